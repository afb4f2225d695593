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
#include "outbox/sqlite/connection.h"

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
  // > 0: after consuming, delete processed_event rows older than this, ms
  // (PruneProcessedEvents). 0 keeps every row. Retain at least the longest
  // window in which the same event can arrive again (README, "Pruning the
  // dedupe table"): an event re-sent after its row is gone is applied twice.
  std::int64_t retain_ms = 0;
  std::int64_t prune_batch_size = 1000;  // rows per prune transaction, > 0
};

struct ConsumedRecord {
  std::int32_t partition = 0;
  std::int64_t offset = 0;
  std::string event_id;  // empty: the record has none (applied, not deduplicated)
  bool applied = false;  // false: a duplicate, skipped
};

struct ConsumeReport {
  std::int64_t read = 0;
  std::int64_t applied = 0;
  std::int64_t skipped = 0;        // duplicates found in processed_event
  // Records with no event id (no event_id header, no "eventId" in the payload): applied
  // without deduplication, and counted in applied too.
  std::int64_t without_event_id = 0;
  std::int64_t effects_total = 0;  // rows in loan_effect afterwards
  std::int64_t pruned = 0;         // processed_event rows deleted (retain_ms > 0)
  std::int64_t prune_batches = 0;  // transactions that deleted them
  std::int64_t processed_kept = 0; // processed_event rows afterwards
};

// The consumer's own database (not the outbox's): processed_event(event_id,
// processed_at) and loan_effect(event_id, loan_id, applied_at), times in epoch
// ms. Opens path, creating the file and tables when missing, in WAL mode.
// Throws DbError.
sqlite::Connection OpenEffectsDatabase(const std::string& path);

// One record's local transaction: inserts event_id into processed_event and,
// only when it was not there, applies the effect (a loan_effect row), both or
// neither. Returns true when applied, false for a duplicate, skipped. An empty
// event_id (a record without one) is not an id: the effect is applied with no
// processed_event row, every time, and true returned. now_ms: processed_at and
// applied_at, epoch ms. Throws DbError.
bool ApplyOnce(sqlite::Connection& effects, const std::string& event_id,
               const std::string& loan_id, std::int64_t now_ms);

struct PruneReport {
  std::int64_t pruned = 0;   // rows deleted
  std::int64_t batches = 0;  // committed transactions that deleted at least one row
};

// Deletes processed_event rows with processed_at < cutoff_ms (epoch ms),
// oldest first, at most batch_size rows per transaction, so a running consumer
// never waits long on the write lock and a crash loses at most the current
// batch's work. Failpoint consume.mid_prune fires in every batch before its
// commit. Throws ConfigError for batch_size <= 0, DbError, FailpointError
// (earlier batches stay committed).
PruneReport PruneProcessedEvents(sqlite::Connection& effects, std::int64_t cutoff_ms,
                                 std::int64_t batch_size);

// Consumes from the group's committed offsets (else the beginning) up to the
// high watermark as it was at the start, then returns. Calls on_record after
// each record's local transaction. Failpoint consume.after_effect fires after
// that transaction, before the offset commit. With retain_ms > 0, prunes
// processed_event afterwards (cutoff = now - retain_ms). Throws KafkaError
// (broker unreachable, offset commit failed), DbError, ConfigError.
ConsumeReport ConsumeIdempotently(const IdempotentConsumerOptions& options,
                                  const std::function<void(const ConsumedRecord&)>& on_record);

}  // namespace outbox::lab
