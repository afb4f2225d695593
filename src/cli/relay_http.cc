#include "cli/relay_http.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "cli/duration.h"
#include "lab/broker/json_bytes.h"
#include "outbox/open_store.h"
#include "ops/broker_probe.h"
#include "ops/probes.h"
#include "outbox/duration.h"

namespace outbox::cli {

// The broker probe's wait: a readiness probe must answer well inside a kubelet's 1 s default.
constexpr int kBrokerProbeTimeoutMs = 800;

void AddRelayHttpOptions(CLI::App& relay, RelayHttpOptions& o) {
  relay.add_option("--http", o.address,
                   "Serve GET /metrics /healthz /readyz /parked and POST /parked/unpark on this "
                   "address: PORT (loopback), HOST:PORT or [IPV6]:PORT; port 0 picks a free one. "
                   "Off unless given");
  relay.add_option("--http-token-file", o.token_file,
                   "Bearer tokens for POST /parked/unpark, one name:token a line (also "
                   "OUTBOX_HTTP_TOKEN=name:token); without any, unpark over HTTP is disabled");
  AddDurationOption(relay, "--ready-max-age", o.ready_max_age_ms,
                    "/readyz answers 503 while the oldest pending row is older than this (0: "
                    "never for age)",
                    0, 7LL * 24 * 3600 * 1000);
  relay.add_option("--health-factor", o.health_factor,
                   "/healthz answers 503 once the loop has not turned for this many idle maxima "
                   "plus the delivery timeout (and the transaction timeout with --exactly-once) "
                   "and 5s")
      ->transform(PositiveInteger())
      ->capture_default_str();
}

std::unique_ptr<ops::OpsServer> StartRelayHttp(const RelayHttpOptions& o,
                                               const GlobalOptions& global,
                                               const RelayObserver& observer,
                                               rd_kafka_t* producer, std::int64_t idle_max_ms,
                                               std::int64_t delivery_timeout_ms, bool json) {
  if (o.address.empty()) {
    if (!o.token_file.empty())
      throw CommandError(ExitCode::kUsage, "--http-token-file needs --http");
    return nullptr;
  }
  ops::OpsServerOptions options;
  try {
    const ops::ListenAddress address = ops::ParseListenAddress(o.address);
    options.host = address.host;
    options.port = address.port;
    if (!o.token_file.empty()) options.tokens = ops::LoadTokenFile(o.token_file);
    if (const char* env = std::getenv("OUTBOX_HTTP_TOKEN"); env && *env) {
      std::vector<ops::NamedToken> more = ops::ParseTokens(env, "OUTBOX_HTTP_TOKEN");
      options.tokens.insert(options.tokens.end(), more.begin(), more.end());
    }
  } catch (const ConfigError& e) {
    throw CommandError(ExitCode::kUsage, e.what());
  }
  options.stall_limit_ms = ops::HealthStallLimitMs(o.health_factor, idle_max_ms, delivery_timeout_ms);
  options.ready_max_age_ms = o.ready_max_age_ms;
  ops::OpsServerHooks hooks;
  hooks.observer = &observer;
  hooks.open_store = [&global](bool read_only) {
    return OpenStore(global.db, read_only ? OpenMode::kReadOnly : OpenMode::kExisting,
                     global.MakeStoreOptions());
  };
  hooks.probe_broker = [producer] { return ops::ProbeBroker(producer, kBrokerProbeTimeoutMs); };
  hooks.log = [](const std::string& line) {
    fmt::print("{}\n", line);
    std::fflush(stdout);
  };
  std::unique_ptr<ops::OpsServer> server;
  try {
    server = std::make_unique<ops::OpsServer>(options, hooks);
  } catch (const ConfigError& e) {
    throw CommandError(ExitCode::kSystem, e.what());
  }
  const std::string unpark =
      options.tokens.empty() ? "disabled (no token)"
                             : fmt::format("enabled for {} tokens", options.tokens.size());
  if (json)
    fmt::print("{}\n", lab::DumpJson(nlohmann::ordered_json{
                           {"report", "http"}, {"host", server->host()}, {"port", server->port()},
                           {"stall_limit_ms", options.stall_limit_ms},
                           {"unpark", !options.tokens.empty()}}));
  else
    fmt::print("[relay] http: listening on {}:{} (GET /metrics /healthz /readyz /parked; POST "
               "/parked/unpark {}); healthz stall limit {}\n",
               server->host(), server->port(), unpark, FormatDuration(options.stall_limit_ms));
  std::fflush(stdout);
  return server;
}

}  // namespace outbox::cli
