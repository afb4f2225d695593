#include "cli/publishing.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <algorithm>

#include "cli/duration.h"
#include "lab/broker/json_bytes.h"
#include "lab/check/topic_reader.h"
#include "outbox/error.h"
#include "outbox/outbox_store.h"

namespace outbox::cli {

CLI::Option* AddDeliveryTimeoutOption(CLI::App& sub, std::int64_t& ms) {
  return AddDurationOption(sub, "--delivery-timeout", ms,
                           "How long a send may wait for the broker's ack (librdkafka "
                           "message.timeout.ms; the chapter waits 10s)",
                           1, kMaxDeliveryTimeoutMs, "--delivery-timeout-ms");
}

void AddPublishOptions(CLI::App& sub, PublishOptions& options) {
  sub.add_option("N", options.count, "Number of unpublished rows to send at most")
      ->required()
      ->transform(PositiveInteger());
  AddDeliveryTimeoutOption(sub, options.delivery_timeout_ms);
}

std::vector<kafka::Property> ProducerProperties(const GlobalOptions& global) {
  std::vector<kafka::Property> properties = {{"compression.type", "none"}};
  const std::vector<kafka::Property> given = global.ParsedProperties();
  properties.insert(properties.end(), given.begin(), given.end());
  return properties;
}

std::unique_ptr<kafka::KafkaPublisher> MakePublisher(const GlobalOptions& global,
                                                     const PublishOptions& options,
                                                     const std::string& run_id) {
  kafka::KafkaPublisherOptions publisher_options;
  publisher_options.brokers = global.RequireBrokers();
  publisher_options.topic = global.topic;
  publisher_options.delivery_timeout_ms = static_cast<int>(options.delivery_timeout_ms);
  publisher_options.properties = ProducerProperties(global);
  publisher_options.run_id = run_id;
  return std::make_unique<kafka::KafkaPublisher>(publisher_options);
}

namespace {

bool NoteIncarnation(const std::string& incarnation, OutboxStore& store) {
  if (incarnation.empty()) return false;
  try {
    store.NoteBrokerIncarnation(incarnation);
  } catch (const DbError& e) {
    if (e.primary_code() != SQLITE_READONLY) throw;
    return false;
  }
  return true;
}

}  // namespace

bool NoteBrokerIncarnation(const GlobalOptions& global, OutboxStore& store,
                           std::int64_t timeout_ms) {
  return NoteIncarnation(
      lab::ReadBrokerIncarnation(global.RequireBrokers(), global.ParsedProperties(),
                                 static_cast<int>(std::clamp<std::int64_t>(timeout_ms, 1, 2000))),
      store);
}

bool NoteBrokerIncarnation(rd_kafka_t* producer, OutboxStore& store, std::int64_t timeout_ms) {
  return NoteIncarnation(
      lab::ReadBrokerIncarnation(producer,
                                 static_cast<int>(std::clamp<std::int64_t>(timeout_ms, 1, 2000))),
      store);
}

void PrintDeliveryFailure(const char* tag, const PerRowRelayStep& step,
                          const kafka::KafkaPublisher& publisher) {
  const std::string client_error = publisher.LastClientError();
  fmt::print("[{}] outboxId={} key={} delivery FAILED: {}{}; left unpublished\n", tag, step.row.id,
             lab::EscapeBytes(step.row.event.event_id), step.delivery.error,
             client_error.empty() ? "" : fmt::format("; last client error: {}", client_error));
}

}  // namespace outbox::cli
