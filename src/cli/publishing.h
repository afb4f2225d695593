// Options and output shared by publish and publish-hold.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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

// The lab's producer properties: compression.type=none, then -X (which wins).
// Uncompressed, as the chapter's Java producer and Kafka's own producer send
// by default, so every Kafka client reads the records without a codec
// (kafkajs reads only gzip without a plugin: "KafkaJSNotImplemented: LZ4
// compression not implemented"). -X compression.type=lz4 (or zstd, snappy,
// gzip) is the opt-in: librdkafka 2.0.2's mock cluster keeps at most 5 MiB
// per partition (rdkafka_mock.c, rd_kafka_mock_partition_init) and stores
// batches as produced, so lz4 lets the embedded broker keep about five times
// more of the lab's events (measured, of 150,000 relayed: 146,995 with lz4,
// 29,000 uncompressed). Throws ConfigError for a malformed -X.
std::vector<kafka::Property> ProducerProperties(const GlobalOptions& global);

// A publisher that sends run_id (Store::RunId() of the database the rows come
// from) as header "run_id" on every record. Throws ConfigError (no broker, bad
// -X property).
std::unique_ptr<kafka::KafkaPublisher> MakePublisher(const GlobalOptions& global,
                                                     const PublishOptions& options,
                                                     const std::string& run_id);

// Notes on store which broker incarnation --brokers is now (lab::ReadBrokerIncarnation,
// waiting at most min(timeout_ms, 2000) ms), so that verify and check can tell a restart of the
// in-memory embedded broker from a lost event. Returns false when the broker did not answer in
// time (call it again once a delivery was acknowledged) or the database is read-only (nothing is
// published from it then). Throws the store's other errors.
bool NoteBrokerIncarnation(const GlobalOptions& global, OutboxStore& store,
                           std::int64_t timeout_ms);

// The same through the caller's own producer (the relay's): a second client's teardown is what
// hangs a relay under libfaketime (librdkafka's timed waits run on the real clock; see the README
// on pg-clock-skew), and one client is cheaper anyway.
bool NoteBrokerIncarnation(rd_kafka_t* producer, OutboxStore& store, std::int64_t timeout_ms);

// "[tag] outboxId=1 key=evt-1001 delivery FAILED: ...; left unpublished", to stdout,
// with librdkafka's last client error (e.g. connection refused) when it has one.
void PrintDeliveryFailure(const char* tag, const PerRowRelayStep& step,
                          const kafka::KafkaPublisher& publisher);

}  // namespace outbox::cli
