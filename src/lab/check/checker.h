// Checker: judges a run from what is durable — the database and the whole
// topic — in the style of Jepsen's total-queue checker. Duplicates are
// counted but allowed (at-least-once); anything lost, phantom or half-written
// makes the run invalid. Only an event that can never arrive is lost: a
// committed outbox row not yet published is pending (the relay will send it,
// chapter 7.1: "只要 outbox 行还在，就一定能补发"), and an event whose record
// the broker may have dropped (log start above 0) cannot be judged.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "outbox/wal_progress.h"
#include "lab/chapter/history.h"
#include "lab/chapter/loans.h"
#include "lab/check/reconciliation.h"
#include "lab/check/topic_reader.h"
#include "outbox/store.h"

namespace outbox::lab {

// What the histories say, Jepsen total-queue style. Present only with --history.
struct HistoryVerdict {
  bool present = false;
  std::int64_t attempts = 0;       // events whose business transaction was invoked
  std::int64_t acknowledged = 0;   // ... that returned ok to the writer
  std::int64_t failed = 0;         // ... that definitely failed
  std::int64_t indeterminate = 0;  // ... left open by a crash ("info")
  std::int64_t ok = 0;             // acknowledged and in Kafka
  std::int64_t recovered = 0;      // indeterminate, yet in Kafka: committed before the crash
  std::vector<std::string> unexpected;  // in Kafka, never attempted by any writer
  std::int64_t malformed_lines = 0;
  // Settles, from the relays' and publish's "mark"/"park" records.
  std::int64_t marked = 0;   // "ok mark" records
  std::int64_t fenced = 0;   // "fail mark" (fenced) records
  std::int64_t parked = 0;   // "ok park" records
  // Marked by a process that had no acknowledged send of the event before
  // ("ok send" earlier in the same process's history): the mark-before-ack
  // bug. Each is also lost-after-mark evidence and makes the run invalid.
  std::vector<std::string> marked_without_ack;
  // Duplicated events that a fenced settle explains: a relay sent them, lost
  // its claim to another relay, which sent them again (never a loss).
  std::vector<std::string> fenced_duplicates;
  // Duplicated events whose every copy the histories explain by one send only: no process sent
  // them twice, so the producer itself wrote a record twice (librdkafka retried a request whose
  // answer was lost, as when a partition leader dies mid-request without enable.idempotence;
  // librdkafka issue 4953's family). Counted apart from at-least-once re-sends. Exact only when
  // every producing process wrote its history.
  std::vector<std::string> producer_duplicates;
};

// An outbox row as the checker read it; archived rows count as published.
struct OutboxEntry {
  std::int64_t id = 0;
  std::string event_id;
  std::string aggregate_id;
  bool published = false;
  bool parked = false;
};

// The two records of one order violation, in topic order: `first` is the
// first sighting of an aggregate's newer event (higher outbox id), `second`
// the first sighting of an older event of the same aggregate after it.
struct OrderViolation {
  std::string aggregate_id;
  TopicRecord first;
  std::int64_t first_outbox_id = 0;
  TopicRecord second;
  std::int64_t second_outbox_id = 0;
};

// An aggregate whose records of this run sit on more than one partition: a consumer reads
// partitions independently, so it may apply a later event of the aggregate before an earlier
// one, and the per-partition order check above cannot see it. The key->partition mapping
// changed during the run (a partitioner switch, a partition count change, --key event-id on a
// topic of several partitions, or an empty key spread at random).
struct OrderHazard {
  std::string aggregate_id;
  std::vector<std::int32_t> partitions;  // ascending
  // Every one of its records had the aggregate id as key (relay --key aggregate-id): the mapping
  // itself moved. False: some were keyed otherwise (event id), which never pinned the aggregate.
  bool keyed_by_aggregate = false;
};

// The verdict of a check, in order of precedence: a finding beats an unjudgeable run, which
// beats an unfinished one (the records a broker dropped never come back, so running the relay
// on cannot make the run judgeable: "rerun from reset" is the advice that holds).
enum class Verdict {
  kValid,        // every committed event is in Kafka, none lost, none phantom
  kInvalid,      // something lost, phantom, half-written, corrupt or undone at full
  kCannotJudge,  // nothing wrong in what is left, but the broker dropped records (retention or
                 // a restart of the in-memory embedded broker)
  kNotDrained,   // nothing wrong so far, but outbox rows are still unpublished (pending or parked)
};

struct CheckResult {
  HistoryVerdict history;
  std::int64_t business_rows = 0;
  std::int64_t outbox_rows = 0;      // committed events: what the relay owes Kafka
  std::int64_t kafka_records = 0;
  std::int64_t ok = 0;               // outbox events present in Kafka
  // Marked published, yet not in Kafka, on a topic whose every partition
  // still starts at offset 0: it can never arrive.
  std::vector<std::string> lost;
  // Committed and unpublished, not parked: the relay will send it (some may
  // be in Kafka already, sent but not marked: they will be sent again).
  std::vector<std::string> pending;
  // Unpublished and parked after max attempts: sent only after `unpark`.
  std::vector<std::string> parked;
  // Marked published and not in Kafka, but some partition's log start is
  // above 0: its record may have been among those the broker dropped
  // (retention), so it is neither ok nor lost.
  std::vector<std::string> retention_unknown;
  // How many of retention_unknown the dropped offsets cannot hold: with N such events and D
  // offsets dropped (records of other runs and duplicates among them), at least N - D events
  // never reached the broker. A finding: lost, though which ones cannot be told.
  std::int64_t lost_beyond_retention = 0;
  // Marked published and not in Kafka, but the broker they went to was
  // restarted since (or is another cluster): an in-memory broker took them
  // with it, so they are neither ok nor lost (JudgeBrokerRestart).
  std::vector<std::string> restart_unknown;
  BrokerRestart broker_restart;
  std::vector<PartitionExtent> partitions;  // as given to CheckRun
  std::int64_t dropped_offsets = 0;  // sum of the partitions' log starts and compacted offsets
  std::vector<std::pair<std::string, std::int64_t>> duplicated;  // id, times seen (> 1)
  // Duplicated ids whose copies differ in value: the row was changed between two sends (a hand
  // edit, a foreign writer's UPDATE), so an idempotent consumer keeps whichever came first.
  // Reported, not a finding: at-least-once promises the event, not the bytes of each copy.
  std::vector<std::string> duplicated_changed;
  // In Kafka, but no committed outbox row has it (or its transaction definitely failed).
  std::vector<std::string> phantom;
  // An event id carried by more than one outbox row, live, archived or purged ("evt-7 (outbox
  // ids 3 and 9)"): a writer reused it after purge lifted the UNIQUE guard, or wrote it under
  // another explicit id. A finding: an idempotent consumer keeps the first and drops the other
  // event as a duplicate. The later row is the one judged.
  std::vector<std::string> reused_event_ids;
  std::vector<std::string> atomicity;  // "loan L-1 has no outbox row" / "event e has no loan"
  // Atomicity was not judged (LabSnapshot::atomicity_skipped): outbox against Kafka only.
  bool atomicity_skipped = false;
  std::string business_table = "business_loan";  // the table atomicity was judged against
  // Marked published, yet not in Kafka (the lost ones), or marked without an ack (history).
  std::vector<std::string> lost_after_mark;
  std::vector<std::string> stuck;    // pending and parked together, in outbox id order
  // Marked published after the topic read fixed each partition's end, and not in what it read
  // (CheckRun's published_before_read): a live relay's record may lie past that end, so the
  // event is neither ok nor lost; check again once the relay is idle.
  std::vector<std::string> published_during_read;
  std::vector<std::string> order_violations;  // per aggregate, first sightings out of id order
  std::vector<OrderViolation> order_pairs;    // the same violations, with both records
  // Aggregates seen on more than one partition, by aggregate id. Reported, with order
  // violations, apart from the verdict: the verdict judges delivery (lost, phantom, atomicity),
  // and a gate on order passes --expect order_violations=0,order_hazards=0.
  std::vector<OrderHazard> order_hazards;
  std::vector<OutboxEntry> outbox;            // every row read, in outbox id order
  // Power loss (issue 10). undone: acknowledged to its writer (history), yet
  // no outbox row now: a power cut undid the commit. undone_phantom: the part
  // of phantom whose transaction was acknowledged or left open and is now
  // undone: the relay published it before the cut. corrupt: PRAGMA
  // integrity_check's answer when it is not "ok" (empty when ok).
  std::vector<std::string> undone;
  std::vector<std::string> undone_phantom;
  std::string corrupt;
  // Set by the caller from the run's synchronous level: below FULL a power cut
  // may undo a commit (https://www.sqlite.org/pragma.html#pragma_synchronous),
  // so undone commits and their phantom events are reported but allowed.
  bool undo_allowed = false;
  // Records on the topic from other runs (other databases, earlier resets):
  // left out of every count above; set by the caller (RecordsOfRun).
  std::int64_t other_run_records = 0;
  // Set by the caller for a run relayed with relay --exactly-once and read with
  // isolation.level=read_committed (check --exactly-once): every duplicate is then a finding,
  // not the at-least-once price.
  bool duplicates_forbidden = false;
  // True when something is wrong: lost, phantom, a reused event id, atomicity, lost after mark,
  // unexpected (history), corrupt, undone at full, or a duplicate where duplicates are forbidden.
  bool has_findings() const {
    const std::size_t allowed_phantom = undo_allowed ? undone_phantom.size() : 0;
    return !lost.empty() || lost_beyond_retention > 0 || phantom.size() != allowed_phantom ||
           !reused_event_ids.empty() ||
           !atomicity.empty() ||
           (duplicates_forbidden && !duplicated.empty()) ||
           !lost_after_mark.empty() || !history.unexpected.empty() || !corrupt.empty() ||
           (!undo_allowed && !undone.empty());
  }
  Verdict verdict() const {
    if (has_findings()) return Verdict::kInvalid;
    if (!retention_unknown.empty() || !restart_unknown.empty()) return Verdict::kCannotJudge;
    if (!stuck.empty() || !published_during_read.empty()) return Verdict::kNotDrained;
    return Verdict::kValid;
  }
  bool valid() const { return verdict() == Verdict::kValid; }
};

// "valid", "invalid", "not-drained", "cannot-judge": the verdict's name in JSON.
const char* VerdictName(Verdict verdict);

// The keys of check --expect, in report order: valid (1 or 0), business_rows,
// outbox_rows, kafka_records, ok, then the sizes of the lists lost, duplicated,
// phantom, atomicity, lost_after_mark, stuck, order_violations, order_hazards, pending,
// parked, retention_unknown, other_run_records, restart_unknown, then the
// history counts history_attempts ... history_unexpected, history_marked,
// history_fenced, history_parked, history_marked_without_ack,
// history_fenced_duplicates and history_producer_duplicates (only with --history).
const std::vector<std::string>& CheckExpectationKeys();

// The values of r under CheckExpectationKeys(); history_* only when
// r.history.present.
std::map<std::string, std::int64_t> CheckValues(const CheckResult& r);

// The outcome of each business transaction ("txn") in ops, by event id: "ok" when an attempt
// of any process committed it, else "info" when an attempt was left open (a crash: it may have
// committed), else "fail" (every attempt of every process definitely failed). Judged per
// process and per attempt, so the order in which histories are read never matters: a second
// writer failing on an event id the first one committed does not undo that commit.
std::map<std::string, std::string> TxnOutcomes(const std::vector<HistoryOp>& ops);

// Reads the lab's tables and compares them with records (every record of this
// run on the topic, see RecordsOfRun) and, when history is not null, with what
// the writers were told. partitions (from ReadTopicLog) tell whether the
// broker dropped records: when a log start is above 0, a published event not
// in records is retention_unknown instead of lost. On SQLite runs PRAGMA
// integrity_check first. business: the application's business table (null:
// the lab's business_loan; see LabSnapshot::atomicity_skipped). broker_incarnation (TopicLog::broker_incarnation):
// when it is not among the incarnations the store noted, a published event not
// in records is restart_unknown instead of lost. wal: the WAL relay's progress, as
// TakeDbSnapshot takes it (a row counts as published once its slot holds no insert of it).
// published_before_read (PublishedEventIds, read before the topic): when given, a published
// event not in records and not in it is published_during_read instead of lost, since a relay
// may have marked it after the read fixed the partitions' ends. Throws DbError (SQLITE_CORRUPT
// when the damage stops the reads) or, on PostgreSQL, pg::PgError.
CheckResult CheckRun(OutboxStore& store, const std::vector<TopicRecord>& records,
                     const std::vector<HistoryOp>* history = nullptr,
                     const std::vector<PartitionExtent>& partitions = {},
                     const std::string& broker_incarnation = {},
                     const BusinessTable* business = nullptr,
                     const WalProgress* wal = nullptr,
                     const std::unordered_set<std::string>* published_before_read = nullptr);

// The event ids published at this instant (archived and purged ones included; under wal, as
// CheckRun counts them), in one read transaction. Read before the topic, it lets CheckRun tell
// an event lost from one a live relay marked while the topic was read. Throws as CheckRun.
std::unordered_set<std::string> PublishedEventIds(OutboxStore& store,
                                                  const WalProgress* wal = nullptr);

}  // namespace outbox::lab
