// The idempotent consumer (chapter 7.1: "重复只能由下游按事件 ID 去重"): each
// record's effect and its event id (table processed_event) commit in one
// local transaction; the Kafka offset is committed after. A crash between the
// two re-delivers the record, and the processed_event row turns the second
// delivery into a no-op: at-least-once delivery, exactly-once effects.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "outbox/clock.h"
#include "outbox/kafka/handles.h"

namespace outbox::lab {

struct IdempotentConsumerOptions {
  std::string brokers;
  std::string topic;
  std::string group;       // group.id; offsets are committed under it
  std::string effects_db;  // SQLite file for processed_event and loan_effect (created if missing)
  std::vector<kafka::Property> properties;  // -X, applied last
  int timeout_ms = 10000;  // bound on catching up to the high watermark, ms
  // Where processed_at and applied_at come from. Not owned. Null: the system clock.
  Clock* clock = nullptr;
};

struct ConsumedRecord {
  std::int32_t partition = 0;
  std::int64_t offset = 0;
  std::string event_id;
  bool applied = false;  // false: a duplicate, skipped
};

struct ConsumeReport {
  std::int64_t read = 0;
  std::int64_t applied = 0;
  std::int64_t skipped = 0;        // duplicates found in processed_event
  std::int64_t effects_total = 0;  // rows in loan_effect afterwards
};

// Consumes from the group's committed offsets (else the beginning) up to the
// high watermark as it was at the start, then returns. Calls on_record after
// each record's local transaction. Failpoint consume.after_effect fires after
// that transaction, before the offset commit. Throws KafkaError (broker
// unreachable, offset commit failed), DbError, ConfigError.
ConsumeReport ConsumeIdempotently(const IdempotentConsumerOptions& options,
                                  const std::function<void(const ConsumedRecord&)>& on_record);

}  // namespace outbox::lab
