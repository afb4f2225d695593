// Options and output shared by publish and publish-hold.
#pragma once

#include <cstdint>
#include <memory>

#include "cli/command.h"
#include "outbox/per_row_relay.h"
#include "outbox/kafka/kafka_publisher.h"

namespace outbox::cli {

struct PublishOptions {
  std::int64_t count = 0;           // N: rows to send at most
  std::int64_t delivery_timeout_ms = 10000;  // --delivery-timeout: librdkafka message.timeout.ms
};

// The longest --delivery-timeout: 1h.
inline constexpr std::int64_t kMaxDeliveryTimeoutMs = 3'600'000;

// --delivery-timeout DURATION into ms, in [1ms, 1h]; the deprecated
// --delivery-timeout-ms N still works.
CLI::Option* AddDeliveryTimeoutOption(CLI::App& sub, std::int64_t& ms);

void AddPublishOptions(CLI::App& sub, PublishOptions& options);

// Throws ConfigError (no broker, bad -X property).
std::unique_ptr<kafka::KafkaPublisher> MakePublisher(const GlobalOptions& global,
                                                     const PublishOptions& options);

// "[tag] outboxId=1 key=evt-1001 delivery FAILED: ...; left unpublished", to stdout,
// with librdkafka's last client error (e.g. connection refused) when it has one.
void PrintDeliveryFailure(const char* tag, const PerRowRelayStep& step,
                          const kafka::KafkaPublisher& publisher);

}  // namespace outbox::cli
