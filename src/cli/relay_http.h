// relay --http: the options of the relay's HTTP endpoint and its start (ops/ops_server.h).
#pragma once

#include <librdkafka/rdkafka.h>

#include <cstdint>
#include <memory>
#include <string>

#include "cli/command.h"
#include "ops/ops_server.h"
#include "outbox/relay_observer.h"

namespace outbox::cli {

struct RelayHttpOptions {
  std::string address;         // --http; empty: no endpoint
  std::string token_file;      // --http-token-file
  std::int64_t ready_max_age_ms = 0;  // --ready-max-age; 0: no age rule
  std::int64_t health_factor = 10;    // --health-factor
};

// Adds --http, --http-token-file, --ready-max-age and --health-factor to the relay command.
void AddRelayHttpOptions(CLI::App& relay, RelayHttpOptions& options);

// Starts the endpoint when options.address is set (null otherwise) and prints the line
// "[relay] http: listening on HOST:PORT ..." (a JSON line {"report":"http",...} with json). The
// server reads observer and probes the broker through producer; both must outlive it. Throws
// CommandError kUsage for a bad address or token file, kSystem when the address cannot be bound.
std::unique_ptr<ops::OpsServer> StartRelayHttp(const RelayHttpOptions& options,
                                               const GlobalOptions& global,
                                               const RelayObserver& observer,
                                               rd_kafka_t* producer, std::int64_t idle_max_ms,
                                               std::int64_t delivery_timeout_ms, bool json);

}  // namespace outbox::cli
