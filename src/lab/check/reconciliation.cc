#include "lab/check/reconciliation.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "lab/chapter/loans.h"
#include "outbox/error.h"
#include "outbox/parse_integer.h"

namespace outbox::lab {
namespace {

constexpr std::array<const char*, 9> kExpectationKeys = {
    "business",      "outbox",         "published",        "unpublished",     "kafka_records",
    "kafka_distinct", "kafka_duplicates", "kafka_missing", "kafka_unexpected"};

}  // namespace

DbSnapshot TakeDbSnapshot(OutboxStore& store, const BusinessTable* business,
                          const WalProgress* wal) {
  DbSnapshot snapshot;
  // business and outbox rows of one instant
  LabSnapshot lab = ReadLabSnapshot(store, business);
  snapshot.atomicity_skipped = lab.atomicity_skipped;
  snapshot.business_loans = static_cast<std::int64_t>(lab.loan_ids.size());
  {
    std::unordered_set<std::string> aggregates;
    for (const SnapshotRow& row : lab.outbox.rows) aggregates.insert(row.aggregate_id);
    // As CheckRun's atomicity: a business row is the lab's loan, keyed by its aggregate id.
    for (const std::string& loan : lab.loan_ids)
      if (!aggregates.count(loan)) ++snapshot.orphan_loans;
  }
  if (wal != nullptr && wal->pending_ids)
    for (SnapshotRow& row : lab.outbox.rows)
      if (!row.published && !row.archived && wal->Confirmed(row.id)) row.published = true;
  const OutboxSnapshot& outbox = lab.outbox;
  snapshot.outbox = outbox.Counts();
  for (const SnapshotRow& row : outbox.rows) {
    if (row.archived) {
      snapshot.archived_event_ids.push_back(row.event_id);
      continue;
    }
    snapshot.outbox_event_ids.push_back(row.event_id);
    if (!row.published) snapshot.unpublished_event_ids.push_back(row.event_id);
    if (!row.published && row.parked) snapshot.parked_event_ids.push_back(row.event_id);
  }
  snapshot.run_id = store.RunId();
  snapshot.broker_incarnations = store.BrokerIncarnations();
  return snapshot;
}

BrokerRestart JudgeBrokerRestart(const std::vector<std::string>& noted, const std::string& current) {
  BrokerRestart restart;
  restart.current = current;
  if (current.empty()) return restart;  // a broker that names no incarnation: nothing to compare
  for (const std::string& id : noted) {
    if (id == current) continue;
    restart.restarted = true;
    restart.gone = id;
    restart.embedded = id.rfind("embedded:", 0) == 0;
    break;
  }
  return restart;
}

std::string BrokerRestartReason(const BrokerRestart& restart) {
  if (restart.embedded)
    return "the embedded broker was restarted after these were published (it keeps records in "
           "memory); rerun from reset (or, when --brokers names another embedded broker than the "
           "run's, check --brokers)";
  return fmt::format("they were published to another Kafka cluster ({}) than the one read now "
                     "({}); check --brokers, or rerun from reset",
                     restart.gone, restart.current);
}

std::string BrokerRestartNote(const BrokerRestart& restart) {
  if (!restart.restarted) return {};
  if (restart.embedded)
    return "the embedded broker was restarted during this run (or --brokers names another "
           "one): what was sent to the earlier one is gone, so sends from then (and their "
           "duplicates) do not show in these counts; rerun from reset to see them all";
  return fmt::format("this run also published to another Kafka cluster ({}) than the one read "
                     "now ({}): its records there are not in these counts",
                     restart.gone, restart.current);
}

RunRecords RecordsOfRun(std::vector<TopicRecord> records, const std::string& run_id) {
  RunRecords split;
  for (TopicRecord& record : records) {
    if (record.run_id == run_id) split.records.push_back(std::move(record));
    else ++split.other_run_records;
  }
  return split;
}

KafkaReconciliation Reconcile(const DbSnapshot& db, const TopicLog& log) {
  RunRecords run = RecordsOfRun(log.records, db.run_id);
  KafkaReconciliation result = Reconcile(db.outbox_event_ids, run.records);
  result.other_run_records = run.other_run_records;
  result.dropped_offsets = log.Dropped();
  const std::unordered_set<std::string> unpublished(db.unpublished_event_ids.begin(),
                                                    db.unpublished_event_ids.end());
  const std::unordered_set<std::string> missing(result.missing.begin(), result.missing.end());
  for (const std::string& id : db.unpublished_event_ids)
    if (!missing.count(id)) result.sent_unmarked.push_back(id);
  if (!db.archived_event_ids.empty()) {
    const std::unordered_set<std::string> archived(db.archived_event_ids.begin(),
                                                   db.archived_event_ids.end());
    std::vector<std::string> unexpected;
    for (std::string& id : result.unexpected) {
      if (archived.count(id)) ++result.archived_in_kafka;
      else unexpected.push_back(std::move(id));
    }
    result.unexpected = std::move(unexpected);
    std::unordered_set<std::string> seen;
    for (const TopicRecord& record : run.records) seen.insert(record.event_id);
    for (const std::string& id : db.archived_event_ids)
      if (!seen.count(id)) result.missing.push_back(id);
  }
  result.broker_restart = JudgeBrokerRestart(db.broker_incarnations, log.broker_incarnation);
  for (const std::string& id : result.missing) {
    if (unpublished.count(id)) result.unsent.push_back(id);
    else if (result.broker_restart.restarted) result.restart_unknown.push_back(id);
    else if (result.dropped_offsets > 0) result.retention_unknown.push_back(id);
    else result.lost.push_back(id);
  }
  result.lost_beyond_retention = LostBeyondRetention(
      static_cast<std::int64_t>(result.retention_unknown.size()), result.dropped_offsets);
  return result;
}

std::int64_t LostBeyondRetention(std::int64_t missing, std::int64_t dropped_offsets) {
  if (dropped_offsets <= 0) return 0;
  return std::max<std::int64_t>(0, missing - dropped_offsets);
}

void SetAsideCommittedDuringRead(KafkaReconciliation& result, const DbSnapshot& later) {
  std::unordered_set<std::string> now(later.outbox_event_ids.begin(), later.outbox_event_ids.end());
  now.insert(later.archived_event_ids.begin(), later.archived_event_ids.end());
  std::vector<std::string> unexpected;
  for (std::string& id : result.unexpected)
    (now.count(id) ? result.committed_during_read : unexpected).push_back(std::move(id));
  result.unexpected = std::move(unexpected);
  if (result.sent_unmarked.empty()) return;
  std::unordered_set<std::string> still_unpublished(later.unpublished_event_ids.begin(),
                                                    later.unpublished_event_ids.end());
  std::vector<std::string> sent_unmarked;
  for (std::string& id : result.sent_unmarked)
    (still_unpublished.count(id) ? sent_unmarked : result.marked_during_read)
        .push_back(std::move(id));
  result.sent_unmarked = std::move(sent_unmarked);
}

KafkaReconciliation Reconcile(const std::vector<std::string>& outbox_event_ids,
                              const std::vector<TopicRecord>& records) {
  KafkaReconciliation result;
  result.records = static_cast<std::int64_t>(records.size());
  std::unordered_map<std::string, std::int64_t> counts;
  std::vector<std::string> first_seen;
  for (const TopicRecord& record : records)
    if (counts[record.event_id]++ == 0) first_seen.push_back(record.event_id);
  result.distinct_event_ids = static_cast<std::int64_t>(counts.size());
  for (const std::string& id : first_seen)
    if (counts[id] > 1) result.duplicates.emplace_back(id, counts[id]);

  const std::unordered_set<std::string> in_outbox(outbox_event_ids.begin(), outbox_event_ids.end());
  for (const std::string& id : outbox_event_ids)
    if (!counts.count(id)) result.missing.push_back(id);
  for (const std::string& id : first_seen)
    if (!in_outbox.count(id)) result.unexpected.push_back(id);
  return result;
}

std::map<std::string, std::int64_t> ParseExpectations(const std::string& text) {
  return ParseExpectations(text, std::vector<std::string>(kExpectationKeys.begin(), kExpectationKeys.end()));
}

std::map<std::string, std::int64_t> ParseExpectations(const std::string& text,
                                                      const std::vector<std::string>& known_keys) {
  std::map<std::string, std::int64_t> expected;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos)
      throw ConfigError(fmt::format("expectation '{}': expected key=value", item));
    const std::string key = item.substr(0, eq);
    const std::string value = item.substr(eq + 1);
    if (std::find(known_keys.begin(), known_keys.end(), key) == known_keys.end())
      throw ConfigError(fmt::format("expectation '{}': unknown key; use {}", key,
                                    fmt::join(known_keys, ", ")));
    const auto number = ParseInteger(value, 0);
    if (!number)
      throw ConfigError(fmt::format("expectation '{}': '{}' is not a non-negative integer", key, value));
    if (!expected.emplace(key, *number).second)
      throw ConfigError(fmt::format("expectation '{}': given twice", key));
  }
  if (expected.empty()) throw ConfigError(fmt::format("expectations '{}': none given", text));
  return expected;
}

std::map<std::string, std::int64_t> ActualValues(const DbSnapshot& db,
                                                 const std::optional<KafkaReconciliation>& kafka) {
  std::map<std::string, std::int64_t> actual = {
      {"business", db.business_loans},
      {"outbox", db.outbox.total},
      {"published", db.outbox.published},
      {"unpublished", db.outbox.unpublished},
  };
  if (kafka) {
    actual["kafka_records"] = kafka->records;
    actual["kafka_distinct"] = kafka->distinct_event_ids;
    actual["kafka_duplicates"] = static_cast<std::int64_t>(kafka->duplicates.size());
    actual["kafka_missing"] = static_cast<std::int64_t>(kafka->missing.size());
    actual["kafka_unexpected"] = static_cast<std::int64_t>(kafka->unexpected.size());
  }
  return actual;
}

std::vector<std::string> CompareExpectations(const std::map<std::string, std::int64_t>& expected,
                                             const std::map<std::string, std::int64_t>& actual) {
  std::vector<std::string> mismatches;
  for (const auto& [key, want] : expected) {
    const auto found = actual.find(key);
    if (found == actual.end())
      mismatches.push_back(fmt::format("{}: expected {}, but no broker is configured", key, want));
    else if (found->second != want)
      mismatches.push_back(fmt::format("{}: expected {}, got {}", key, want, found->second));
  }
  return mismatches;
}

}  // namespace outbox::lab
