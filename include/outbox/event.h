// The outbox's value types: an event to enqueue, a stored row, a message for
// the broker and the broker's verdict on it. Plain values, freely copyable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace outbox {

// An event as the business transaction writes it (chapter 7.1, table outbox).
struct OutboxEvent {
  std::string event_id;      // unique; the consumer's deduplication key
  // e.g. the loan id; never empty (the outbox contract: an enqueue of an empty one fails, see
  // EmptyAggregateMessage): with relay --key aggregate-id it is the record key, and librdkafka
  // sends an empty key to a random partition, where the aggregate's order is lost.
  std::string aggregate_id;
  std::string event_type;    // e.g. "LoanCreated"
  std::string payload;       // JSON text, sent as the record value
  std::int64_t created_at_ms = 0;  // epoch ms
  // The headers column as the application wrote it: a JSON object of string
  // values, sent as Kafka record headers (record_headers.h). Empty: NULL, none.
  // Untrusted: validated when the relay sends the row, not here.
  std::string headers = {};  // a default, so {id, aggregate, type, payload, ms} stays complete
  // Delayed publish (column not_before, epoch ms): the relay sends the row no earlier than this
  // instant on the database's clock: on SQLite the store's Clock (the relay's process clock),
  // on PostgreSQL the server's now(). nullopt: NULL, the row is due at once. Any value is
  // accepted here, as any value a foreign writer puts in the column is: one at or before the
  // relay's now means at once, one more than kMaxDelayMs ahead of it is taken for a unit
  // mistake and also means at once (docs/delayed-publish.md).
  std::optional<std::int64_t> not_before_ms = {};
  // Or relative to the enqueue: not_before = the database's clock at the INSERT + delay_ms
  // (PostgreSQL: the server computes it, so the writer's own clock never matters). 0: none.
  // Enqueue throws ConfigError for a negative delay, one above kMaxDelayMs, or one given
  // together with not_before_ms.
  std::int64_t delay_ms = 0;
};

// The furthest ahead of the relay's now a not_before may lie and still delay its row: 365 days.
// Further ahead it is no believable delay but a unit mistake (microseconds or nanoseconds since
// the epoch instead of ms) or garbage from a foreign writer, and a relay that believed it would
// hold the row, and under block-key its aggregate, for centuries: such a row is due at once.
inline constexpr std::int64_t kMaxDelayMs = 365LL * 24 * 60 * 60 * 1000;

// "enqueue event 'E': aggregate_id is empty: ..." the message of the ConfigError an enqueue
// throws for an empty aggregate id (Store::Enqueue, PgStore::Enqueue).
inline std::string EmptyAggregateMessage(const std::string& event_id) {
  return "enqueue event '" + event_id +
         "': aggregate_id is empty: the outbox contract needs one (the record key that keeps an "
         "aggregate's events on one partition, in order)";
}

// Why an enqueue refuses event's delay: "enqueue event 'E': delay ..." for a delay_ms below 0 or
// above kMaxDelayMs, or given together with not_before_ms; empty when the delay is acceptable
// (Store::Enqueue, PgStore::Enqueue throw it as a ConfigError).
inline std::string DelayErrorMessage(const OutboxEvent& event) {
  const std::string what = "enqueue event '" + event.event_id + "': ";
  if (event.delay_ms < 0 || event.delay_ms > kMaxDelayMs)
    return what + "delay " + std::to_string(event.delay_ms) + " ms: must be between 0 and " +
           std::to_string(kMaxDelayMs) + " (365 days)";
  if (event.delay_ms > 0 && event.not_before_ms)
    return what + "give a delay or a not_before, not both";
  return {};
}

// A row of the outbox table.
struct OutboxRow {
  std::int64_t id = 0;  // AUTOINCREMENT: ids never go back, so id order is commit order per writer
  OutboxEvent event;
  bool published = false;
};

// A Kafka record header: name and value are bytes, sent as they are.
struct RecordHeader {
  std::string name;
  std::string value;
};

// One record to produce. key is normally the event id (chapter 7.1, decision 2).
struct OutboundMessage {
  std::int64_t outbox_id = 0;
  std::string key;
  std::string payload;
  std::string event_id;    // sent as header "event_id"
  std::string event_type;  // sent as header "event_type"
  // The application's headers (OutboxEvent::headers, parsed), sent after the
  // relay's own event_id, event_type and outbox_id, in the object's order.
  std::vector<RecordHeader> headers = {};
  // Header "run_id": the Store::RunId() of the database the row was read from
  // when it was read (a reset while a relay runs starts a new run). Empty:
  // the publisher's own (KafkaPublisherOptions::run_id).
  std::string run_id = {};
  // The topic this record goes to (relay --topic-template, TopicTemplate::Render). Empty: the
  // publisher's own (KafkaPublisherOptions::topic).
  std::string topic = {};
};

// The delivery report for one message: ok only when the broker acknowledged it
// (acks=all) within the delivery timeout.
struct DeliveryResult {
  std::int64_t outbox_id = 0;
  bool ok = false;
  std::int32_t partition = -1;
  std::int64_t offset = -1;
  std::string error;  // empty when ok, e.g. "Local: Message timed out (_MSG_TIMED_OUT)"
  // Failed because the producer itself hit a fatal error (librdkafka
  // rd_kafka_fatal_error, e.g. an idempotent producer's OUT_OF_ORDER_SEQUENCE):
  // nothing is known about this message, so the relay counts no attempt for it
  // and stops (Relay::FinishBatch). error then names the fatal error.
  bool producer_fatal = false;
  // Failed because the brokers could not be reached or did not answer in time (a broker
  // outage: kafka::ClassifyDeliveryError says which errors): the message is not at fault, so
  // the relay counts no attempt, parks nothing and sends it again after a backoff. error then
  // names the outage's cause, e.g. "all brokers down (_ALL_BROKERS_DOWN)".
  bool outage = false;
  // Accepted by the broker, then aborted with its transaction (relay --exactly-once) because
  // another record of the batch failed: not at fault, so the relay counts no attempt and sends
  // it again with the next batch, while the record that failed backs off (and is parked after
  // --max-attempts) alone. error then names the other record's failure.
  bool rolled_back = false;
};

}  // namespace outbox
