#include "lab/check/checker.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <set>
#include <unordered_map>

#include "lab/chapter/loans.h"

namespace outbox::lab {

std::map<std::string, std::string> TxnOutcomes(const std::vector<HistoryOp>& ops) {
  // Per process and event id: the outcome of each attempt, in order; an invoke opens one
  // ("info" until it completes), an ok or fail completes the process's latest open one (or
  // stands alone when that process's invoke is missing).
  std::map<std::pair<std::int64_t, std::string>, std::vector<std::string>> attempts;
  for (const HistoryOp& op : ops) {
    if (op.f != "txn") continue;
    auto& list = attempts[{op.process, op.value}];
    if (op.type == "invoke") {
      list.push_back("info");
    } else if (op.type == "ok" || op.type == "fail") {
      const auto open = std::find(list.rbegin(), list.rend(), "info");
      if (open != list.rend()) *open = op.type;
      else list.push_back(op.type);
    }
  }
  // Across processes and attempts: one commit is enough (ok); an attempt left open may have
  // committed (info); only an event whose every attempt definitely failed is "fail".
  std::map<std::string, std::string> outcome;
  for (const auto& [key, list] : attempts) {
    for (const std::string& attempt : list) {
      std::string& event = outcome[key.second];
      if (attempt == "ok" || event.empty()) event = attempt;
      else if (attempt == "info" && event == "fail") event = "info";
    }
  }
  return outcome;
}

namespace {

// Published by its flag, or (under the WAL relay, which marks no row) once the slot holds no
// pending insert of it and it is not a row older than the slot (WalProgress::Confirmed).
bool CountsAsPublished(const SnapshotRow& row, const WalProgress* wal) {
  return row.published || (wal != nullptr && !row.archived && wal->Confirmed(row.id));
}

template <typename OutboxMap, typename SeenMap>
void JudgeHistory(const std::vector<HistoryOp>& ops, const OutboxMap& outbox, const SeenMap& seen,
                  const std::vector<std::string>& first_seen, CheckResult& result) {
  HistoryVerdict& h = result.history;
  h.present = true;
  const std::map<std::string, std::string> txn_outcome = TxnOutcomes(ops);
  h.attempts = static_cast<std::int64_t>(txn_outcome.size());
  std::set<std::string> phantom(result.phantom.begin(), result.phantom.end());
  for (const auto& [event_id, outcome] : txn_outcome) {
    const bool in_kafka = seen.count(event_id) > 0;
    const bool gone = !outbox.count(event_id);
    if (outcome == "ok") {
      ++h.acknowledged;
      if (in_kafka) ++h.ok;
      // Acknowledged, now without an outbox row: the commit was undone (a power cut).
      // With its row, CheckRun already judged it (ok, pending, lost or unjudgeable).
      if (gone) result.undone.push_back(event_id);
    } else if (outcome == "fail") {
      ++h.failed;
      if (in_kafka && phantom.insert(event_id).second) result.phantom.push_back(event_id);
    } else {
      ++h.indeterminate;
      if (in_kafka) ++h.recovered;
    }
    if (outcome != "fail" && gone && in_kafka) result.undone_phantom.push_back(event_id);
  }
  for (const std::string& id : first_seen)
    if (!txn_outcome.count(id)) h.unexpected.push_back(id);

  // Settles. A relay marks only rows it produced and saw acknowledged in the same batch, so
  // the ack it relied on is an earlier "ok send" of the same process.
  std::set<std::pair<std::int64_t, std::string>> acked;  // (process, event id)
  std::map<std::string, std::int64_t> sends;               // event id -> produce attempts, all processes
  std::set<std::string> fenced;
  std::set<std::string> without_ack;
  std::set<std::string> lost_after_mark(result.lost_after_mark.begin(), result.lost_after_mark.end());
  for (const HistoryOp& op : ops) {
    if (op.f == "send" && op.type == "invoke") {
      ++sends[op.value];
    } else if (op.f == "send" && op.type == "ok") {
      acked.emplace(op.process, op.value);
    } else if (op.f == "mark" && op.type == "ok") {
      ++h.marked;
      if (!acked.count({op.process, op.value}) && without_ack.insert(op.value).second) {
        h.marked_without_ack.push_back(op.value);
        if (lost_after_mark.insert(op.value).second) result.lost_after_mark.push_back(op.value);
      }
    } else if (op.f == "mark" && op.type == "fail") {
      ++h.fenced;
      fenced.insert(op.value);
    } else if (op.f == "park" && op.type == "ok") {
      ++h.parked;
    }
  }
  for (const auto& [event_id, times] : result.duplicated) {
    if (fenced.count(event_id)) h.fenced_duplicates.push_back(event_id);
    const auto sent = sends.find(event_id);
    if (sent != sends.end() && sent->second < times) h.producer_duplicates.push_back(event_id);
  }
}

}  // namespace

CheckResult CheckRun(OutboxStore& store, const std::vector<TopicRecord>& records,
                     const std::vector<HistoryOp>* history,
                     const std::vector<PartitionExtent>& partitions,
                     const std::string& broker_incarnation,
                     const BusinessTable* business, const WalProgress* wal,
                     const std::unordered_set<std::string>* published_before_read) {
  CheckResult result;
  result.partitions = partitions;
  result.broker_restart = JudgeBrokerRestart(store.BrokerIncarnations(), broker_incarnation);
  for (const PartitionExtent& p : partitions) result.dropped_offsets += p.log_start + p.compacted;
  // PRAGMA integrity_check exists on SQLite only; a PostgreSQL server checks its own pages
  // (and reports damage as errors on the reads below).
  if (store.backend() == Backend::kSqlite) {
    const std::string answer = static_cast<Store&>(store).IntegrityCheck();
    if (answer != "ok") result.corrupt = answer;
  }
  std::unordered_map<std::string, OutboxEntry> outbox;
  std::vector<std::string> outbox_order;
  std::set<std::string> loans;
  {
    // One read transaction: the loans and the outbox rows of one instant.
    LabSnapshot lab = ReadLabSnapshot(store, business);
    result.atomicity_skipped = lab.atomicity_skipped;
    result.business_table = lab.business_table;
    // Archived rows (purge --archive) were published: they still count.
    for (const SnapshotRow& row : lab.outbox.rows) {
      const bool published = CountsAsPublished(row, wal);
      const auto earlier = outbox.find(row.event_id);
      if (earlier != outbox.end())
        result.reused_event_ids.push_back(fmt::format("{} (outbox ids {} and {})", row.event_id,
                                                      earlier->second.id, row.id));
      else
        outbox_order.push_back(row.event_id);
      outbox[row.event_id] = {row.id, row.event_id, row.aggregate_id, published, row.parked};
    }
    for (std::string& loan : lab.loan_ids) loans.insert(std::move(loan));
  }
  result.outbox_rows = static_cast<std::int64_t>(outbox_order.size());
  result.kafka_records = static_cast<std::int64_t>(records.size());

  // Atomicity: the lab's aggregate is the loan; one LoanCreated event per loan.
  result.business_rows = static_cast<std::int64_t>(loans.size());
  std::set<std::string> aggregates;
  for (const auto& [event_id, entry] : outbox) aggregates.insert(entry.aggregate_id);
  const bool lab_table = result.business_table == "business_loan";
  for (const auto& loan : loans)
    if (!aggregates.count(loan))
      result.atomicity.push_back(lab_table ? fmt::format("loan {} has no outbox row", loan)
                                           : fmt::format("{} row {} has no outbox row",
                                                         result.business_table, loan));
  for (const auto& event_id : outbox_order)
    if (!result.atomicity_skipped && !loans.count(outbox[event_id].aggregate_id))
      result.atomicity.push_back(fmt::format("event {} has no business row", event_id));

  std::unordered_map<std::string, std::int64_t> seen;
  std::vector<std::string> first_seen;
  // Per topic and partition, per aggregate: the highest outbox id first seen so far, and its
  // record (null before the first: no id can stand for "none", a foreign writer's ids may be 0
  // or below). Order holds within a partition only: under --topic-template an aggregate's events
  // of different types go to different topics, with no order between them.
  std::map<std::tuple<std::string, std::int32_t, std::string>,
           std::pair<std::int64_t, const TopicRecord*>>
      last_id_by_aggregate;
  std::unordered_map<std::string, const TopicRecord*> first_copy;
  std::unordered_set<std::string> changed;
  for (const TopicRecord& record : records) {
    if (seen[record.event_id]++ > 0) {
      if (first_copy[record.event_id]->value != record.value &&
          changed.insert(record.event_id).second)
        result.duplicated_changed.push_back(record.event_id);
      continue;
    }
    first_copy[record.event_id] = &record;
    first_seen.push_back(record.event_id);
    const auto found = outbox.find(record.event_id);
    if (found == outbox.end()) {
      result.phantom.push_back(record.event_id);
      continue;
    }
    auto& last =
        last_id_by_aggregate[{record.topic, record.partition, found->second.aggregate_id}];
    if (last.second != nullptr && found->second.id < last.first) {
      result.order_violations.push_back(fmt::format("{} (aggregate {}) after a later event",
                                                    record.event_id, found->second.aggregate_id));
      result.order_pairs.push_back(
          {found->second.aggregate_id, *last.second, last.first, record, found->second.id});
    }
    if (last.second == nullptr || found->second.id > last.first)
      last = {found->second.id, &record};
  }
  // Every copy counts: a re-send after a partitioner switch lands on the new partition. Per
  // topic: an aggregate spread over topics by --topic-template is routing, not a hazard.
  std::map<std::pair<std::string, std::string>, std::pair<std::set<std::int32_t>, bool>>
      partitions_by_aggregate;
  for (const TopicRecord& record : records) {
    const auto found = outbox.find(record.event_id);
    if (found == outbox.end()) continue;
    auto& [seen_on, other_key] =
        partitions_by_aggregate[{record.topic, found->second.aggregate_id}];
    seen_on.insert(record.partition);
    if (record.key != found->second.aggregate_id) other_key = true;
  }
  for (const auto& [topic_and_aggregate, entry] : partitions_by_aggregate)
    if (entry.first.size() > 1)
      result.order_hazards.push_back(
          {topic_and_aggregate.second, std::vector<std::int32_t>(entry.first.begin(), entry.first.end()),
           !entry.second});
  // In outbox order (the order of the chapter's ids), then any duplicated id with no outbox row,
  // as first seen: topic order mixes the partitions.
  {
    std::unordered_set<std::string> listed;
    for (const auto& id : outbox_order)
      if (const auto it = seen.find(id); it != seen.end() && it->second > 1) {
        result.duplicated.emplace_back(id, it->second);
        listed.insert(id);
      }
    for (const auto& id : first_seen)
      if (seen[id] > 1 && !listed.count(id)) result.duplicated.emplace_back(id, seen[id]);
  }
  for (const auto& event_id : outbox_order) {
    const OutboxEntry& entry = outbox[event_id];
    if (!entry.published) {
      // Committed: the relay owes it to Kafka and will pay (or re-pay) it.
      result.stuck.push_back(event_id);
      (entry.parked ? result.parked : result.pending).push_back(event_id);
    }
    if (seen.count(event_id)) {
      ++result.ok;
      continue;
    }
    if (!entry.published) continue;
    if (published_before_read != nullptr && !published_before_read->count(event_id)) {
      result.published_during_read.push_back(event_id);
      continue;
    }
    if (result.broker_restart.restarted) {
      result.restart_unknown.push_back(event_id);
      continue;
    }
    if (result.dropped_offsets > 0) {
      result.retention_unknown.push_back(event_id);
      continue;
    }
    result.lost.push_back(event_id);
    result.lost_after_mark.push_back(event_id);
  }
  result.lost_beyond_retention = LostBeyondRetention(
      static_cast<std::int64_t>(result.retention_unknown.size()), result.dropped_offsets);
  for (const auto& event_id : outbox_order) result.outbox.push_back(outbox[event_id]);
  if (history) JudgeHistory(*history, outbox, seen, first_seen, result);
  return result;
}

std::unordered_set<std::string> PublishedEventIds(OutboxStore& store, const WalProgress* wal) {
  std::unordered_set<std::string> published;
  for (const SnapshotRow& row : store.Snapshot().rows)  // one read transaction, outbox only
    if (CountsAsPublished(row, wal)) published.insert(row.event_id);
  return published;
}

const char* VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kValid: return "valid";
    case Verdict::kInvalid: return "invalid";
    case Verdict::kNotDrained: return "not-drained";
    case Verdict::kCannotJudge: return "cannot-judge";
  }
  return "invalid";
}

const std::vector<std::string>& CheckExpectationKeys() {
  static const std::vector<std::string> keys = {
      "valid",         "business_rows",      "outbox_rows",          "kafka_records",
      "ok",            "lost",               "duplicated",           "phantom",
      "atomicity",     "lost_after_mark",    "stuck",                "order_violations",
      "order_hazards", "reused_event_ids",
      "pending",       "parked",             "retention_unknown",    "lost_beyond_retention",
      "other_run_records", "restart_unknown", "published_during_read",
      "history_attempts", "history_acknowledged", "history_failed", "history_indeterminate",
      "history_ok",    "history_recovered",  "history_unexpected", "history_marked",
      "history_fenced", "history_parked",    "history_marked_without_ack",
      "history_fenced_duplicates", "history_producer_duplicates", "undone", "undone_phantom",
      "corrupt"};
  return keys;
}

std::map<std::string, std::int64_t> CheckValues(const CheckResult& r) {
  const auto size = [](const auto& list) { return static_cast<std::int64_t>(list.size()); };
  std::map<std::string, std::int64_t> values = {
      {"valid", r.valid() ? 1 : 0},
      {"business_rows", r.business_rows},
      {"outbox_rows", r.outbox_rows},
      {"kafka_records", r.kafka_records},
      {"ok", r.ok},
      {"lost", size(r.lost)},
      {"duplicated", size(r.duplicated)},
      {"phantom", size(r.phantom)},
      {"reused_event_ids", size(r.reused_event_ids)},
      {"atomicity", size(r.atomicity)},
      {"lost_after_mark", size(r.lost_after_mark)},
      {"stuck", size(r.stuck)},
      {"order_violations", size(r.order_violations)},
      {"order_hazards", size(r.order_hazards)},
      {"pending", size(r.pending)},
      {"parked", size(r.parked)},
      {"retention_unknown", size(r.retention_unknown)},
      {"lost_beyond_retention", r.lost_beyond_retention},
      {"restart_unknown", size(r.restart_unknown)},
      {"published_during_read", size(r.published_during_read)},
      {"other_run_records", r.other_run_records},
      {"undone", size(r.undone)},
      {"undone_phantom", size(r.undone_phantom)},
      {"corrupt", r.corrupt.empty() ? 0 : 1},
  };
  if (r.history.present) {
    const HistoryVerdict& h = r.history;
    values["history_attempts"] = h.attempts;
    values["history_acknowledged"] = h.acknowledged;
    values["history_failed"] = h.failed;
    values["history_indeterminate"] = h.indeterminate;
    values["history_ok"] = h.ok;
    values["history_recovered"] = h.recovered;
    values["history_unexpected"] = size(h.unexpected);
    values["history_marked"] = h.marked;
    values["history_fenced"] = h.fenced;
    values["history_parked"] = h.parked;
    values["history_marked_without_ack"] = size(h.marked_without_ack);
    values["history_fenced_duplicates"] = size(h.fenced_duplicates);
    values["history_producer_duplicates"] = size(h.producer_duplicates);
  }
  return values;
}

}  // namespace outbox::lab
