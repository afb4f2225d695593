#include "lab/chapter/idempotent_consumer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>

#include "lab/chapter/partition_reader.h"
#include "outbox/error.h"
#include "outbox/failpoint.h"
#include "outbox/sqlite/connection.h"

namespace outbox::lab {
namespace {

constexpr const char* kEffectsSchema = R"sql(
CREATE TABLE IF NOT EXISTS processed_event (
  event_id     TEXT PRIMARY KEY,
  processed_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS loan_effect (
  event_id   TEXT NOT NULL,
  loan_id    TEXT NOT NULL,
  applied_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS processed_event_by_time ON processed_event(processed_at);
)sql";

// The record's event id: header event_id, else the payload's "eventId"; empty when it has
// neither. The Kafka key is not tried: it may be an aggregate id, shared by many events.
std::string HeaderOrPayloadEventId(const rd_kafka_message_t* msg, std::string& loan_id) {
  const std::string value(static_cast<const char*>(msg->payload), msg->payload ? msg->len : 0);
  const auto payload = nlohmann::json::parse(value, nullptr, false);
  if (payload.is_object() && payload.contains("loanId") && payload["loanId"].is_string())
    loan_id = payload["loanId"].get<std::string>();
  rd_kafka_headers_t* headers = nullptr;
  const void* data = nullptr;
  size_t size = 0;
  if (rd_kafka_message_headers(msg, &headers) == RD_KAFKA_RESP_ERR_NO_ERROR &&
      rd_kafka_header_get_last(headers, "event_id", &data, &size) == RD_KAFKA_RESP_ERR_NO_ERROR && data)
    return std::string(static_cast<const char*>(data), size);
  if (payload.is_object() && payload.contains("eventId") && payload["eventId"].is_string())
    return payload["eventId"].get<std::string>();
  return {};
}

}  // namespace

sqlite::Connection OpenEffectsDatabase(const std::string& path) {
  try {
    sqlite::Connection effects(path,
                               SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX);
    effects.SetBusyTimeout(5000);
    effects.Exec("PRAGMA journal_mode=WAL");
    effects.Exec(kEffectsSchema);
    return effects;
  } catch (const DbError& e) {
    // Another program's file: name it as the consumer's, not by our SQL. Other errors keep
    // their message (it names the file, the SQLite code and any failpoint).
    if (e.primary_code() != SQLITE_NOTADB) throw;
    throw DbError(fmt::format("open the consumer's --effects-db '{}': not an SQLite database "
                              "(another program's file?); it was left as it was: give another "
                              "path",
                              path),
                  e.code(), e.reason());
  }
}

bool ApplyOnce(sqlite::Connection& effects, const std::string& event_id,
               const std::string& loan_id, std::int64_t now_ms) {
  // The effect and the dedup row share one transaction: both or neither.
  sqlite::Transaction txn(effects);
  if (event_id.empty()) {
    // A missing id is not an id: nothing to deduplicate on, so apply (a redelivery applies again).
    auto apply = effects.Prepare(
        "INSERT INTO loan_effect(event_id, loan_id, applied_at) VALUES('', ?1, ?2)");
    apply.Bind(1, loan_id).Bind(2, now_ms).Run();
    txn.Commit();
    return true;
  }
  auto mark = effects.Prepare(
      "INSERT OR IGNORE INTO processed_event(event_id, processed_at) VALUES(?1, ?2)");
  mark.Bind(1, event_id).Bind(2, now_ms).Run();
  const bool applied = effects.Changes() == 1;
  if (applied) {
    auto apply = effects.Prepare(
        "INSERT INTO loan_effect(event_id, loan_id, applied_at) VALUES(?1, ?2, ?3)");
    apply.Bind(1, event_id).Bind(2, loan_id).Bind(3, now_ms).Run();
  }
  txn.Commit();
  return applied;
}

PruneReport PruneProcessedEvents(sqlite::Connection& effects, std::int64_t cutoff_ms,
                                 std::int64_t batch_size) {
  if (batch_size <= 0)
    throw ConfigError(fmt::format("prune batch size {}: must be at least 1", batch_size));
  PruneReport report;
  // Through the processed_at index: each batch reads only the rows it deletes.
  auto prune = effects.Prepare(
      "DELETE FROM processed_event WHERE rowid IN (SELECT rowid FROM processed_event "
      "WHERE processed_at < ?1 ORDER BY processed_at LIMIT ?2)");
  for (;;) {
    sqlite::Transaction txn(effects);
    prune.Reset();
    prune.Bind(1, cutoff_ms).Bind(2, batch_size).Run();
    const std::int64_t deleted = effects.Changes();
    if (deleted == 0) break;
    HitFailpoint("consume.mid_prune");
    txn.Commit();
    report.pruned += deleted;
    ++report.batches;
  }
  return report;
}

ConsumeReport ConsumeIdempotently(const IdempotentConsumerOptions& options,
                                  const std::function<void(const ConsumedRecord&)>& on_record) {
  const Deadline deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options.timeout_ms);
  const std::string what =
      fmt::format("consume topic '{}' as group '{}' from '{}'", options.topic, options.group, options.brokers);

  SystemClock system_clock;
  Clock& clock = options.clock ? *options.clock : system_clock;
  if (options.retain_ms < 0 || options.prune_batch_size <= 0)
    throw ConfigError(fmt::format("consume: retain {} ms and prune batch size {}: must be positive",
                                  options.retain_ms, options.prune_batch_size));
  sqlite::Connection effects = OpenEffectsDatabase(options.effects_db);

  std::vector<kafka::Property> properties = {
      {"bootstrap.servers", options.brokers}, {"group.id", options.group},
      {"enable.auto.commit", "false"},        {"enable.auto.offset.store", "false"},
      {"enable.partition.eof", "true"},  // a transactional topic's end (ReadPartitionsToEnd)
      {"log_level", "2"},
  };
  properties.insert(properties.end(), options.properties.begin(), options.properties.end());
  kafka::KafkaHandle consumer = kafka::MakeClient(RD_KAFKA_CONSUMER, kafka::MakeConf(properties));

  const rd_kafka_metadata_t* raw = nullptr;
  rd_kafka_resp_err_t err = rd_kafka_metadata(consumer.get(), 1, nullptr, &raw, RemainingMs(deadline));
  kafka::MetadataHandle metadata(raw);
  if (err) kafka::ThrowKafkaError(what + ": broker unreachable", err);

  // Start from the group's committed offsets: assign() without a group
  // rebalance, so a restarted consumer resumes at once.
  kafka::TopicPartitionListHandle partitions(rd_kafka_topic_partition_list_new(4));
  for (int t = 0; t < metadata->topic_cnt; ++t) {
    if (options.topic != metadata->topics[t].topic) continue;
    for (int p = 0; p < metadata->topics[t].partition_cnt; ++p)
      rd_kafka_topic_partition_list_add(partitions.get(), options.topic.c_str(),
                                        metadata->topics[t].partitions[p].id);
  }
  err = rd_kafka_committed(consumer.get(), partitions.get(), RemainingMs(deadline));
  if (err) kafka::ThrowKafkaError(what + ": committed offsets", err);

  std::map<std::int32_t, std::int64_t> end_offset, next_offset;
  for (int i = 0; i < partitions->cnt; ++i) {
    auto& tp = partitions->elems[i];
    int64_t low = 0, high = 0;
    err = rd_kafka_query_watermark_offsets(consumer.get(), options.topic.c_str(), tp.partition, &low,
                                           &high, RemainingMs(deadline));
    if (err) kafka::ThrowKafkaError(fmt::format("{}: watermarks of partition {}", what, tp.partition), err);
    if (tp.offset < 0) tp.offset = low;  // nothing committed yet: from the beginning
    end_offset[tp.partition] = high;
    next_offset[tp.partition] = tp.offset;
  }
  ConsumeReport report;
  auto unfinished = [&] {
    return std::any_of(next_offset.begin(), next_offset.end(),
                       [&](const auto& e) { return e.second < end_offset[e.first]; });
  };
  if (unfinished()) {
    err = rd_kafka_assign(consumer.get(), partitions.get());
    if (err) kafka::ThrowKafkaError(what + ": assign", err);
  }

  ReadPartitionsToEnd(
      consumer.get(), next_offset, end_offset, deadline, options.timeout_ms, what,
      [&](const rd_kafka_message_t& msg) {
        ConsumedRecord record;
        record.partition = msg.partition;
        record.offset = msg.offset;
        std::string loan_id;
        record.event_id = HeaderOrPayloadEventId(&msg, loan_id);
        record.applied = ApplyOnce(effects, record.event_id, loan_id, clock.EpochMs());
        ++report.read;
        if (record.applied) ++report.applied; else ++report.skipped;
        if (record.event_id.empty()) ++report.without_event_id;
        if (on_record) on_record(record);
        HitFailpoint("consume.after_effect");
        // Offset after the effect: a crash here re-delivers, and processed_event absorbs it.
        const rd_kafka_resp_err_t committed = rd_kafka_commit_message(consumer.get(), &msg, /*async=*/0);
        if (committed) kafka::ThrowKafkaError(what + ": commit offset", committed);
      });
  if (options.retain_ms > 0) {
    const PruneReport pruned =
        PruneProcessedEvents(effects, clock.EpochMs() - options.retain_ms, options.prune_batch_size);
    report.pruned = pruned.pruned;
    report.prune_batches = pruned.batches;
  }
  report.effects_total = effects.QueryInt64("SELECT COUNT(*) FROM loan_effect");
  report.processed_kept = effects.QueryInt64("SELECT COUNT(*) FROM processed_event");
  return report;
}

}  // namespace outbox::lab
