// The report's model: what happened in a run, as a plain value. BuildReportModel reads the
// checker's verdict and joins it with the topic and the histories (lanes of operations, cells of
// records, the cause of every duplicate); the page (lab/report/page.h) only draws it, so a test
// can render a hand-made model.
// Thread-safety: plain functions over values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "lab/chapter/history.h"
#include "lab/check/checker.h"
#include "lab/check/reconciliation.h"
#include "lab/check/topic_reader.h"
#include "outbox/store.h"

namespace outbox::lab {

// One operation of one process: an invoke paired with its completion.
struct ReportOp {
  std::string f;      // txn, send, mark, hold, or any f a newer history writes
  std::string value;  // the event id for txn/send/mark; raw bytes
  // "ok", "fail", "open" (invoked, never completed: indeterminate) or, for a
  // record without invoke, its own type ("info" for a hold point).
  std::string outcome;
  std::int64_t start_ms = 0;   // the invoke's time (or the record's, without invoke), epoch ms
  std::int64_t end_ms = 0;     // the completion's time; == start_ms when open or without invoke
  std::int64_t start_seq = 0;  // position of its first record in the histories (read order)
  std::int64_t end_seq = 0;
  std::string error;
  std::string details;       // other keys of the completing record, JSON text
  std::int64_t attempt = 0;  // sends: 1 for the first send of this event id in all histories
};

// One process of the histories, in order of its first record.
struct ReportLane {
  std::int64_t process = 0;  // PID
  std::string name;          // its subcommand from the "process" record; "" for older histories
  // True when the lane's "process" invoke never completed (killed, or still
  // running), or, for a history without process records, when an operation
  // is left open. The report draws a kill at last_ms.
  bool never_finished = false;
  bool failed = false;  // it ended by an error (a "process" fail)
  std::int64_t first_ms = 0;
  std::int64_t last_ms = 0;
  std::int64_t last_seq = 0;
  std::vector<ReportOp> ops;  // process records excluded
};

// Why a copy after the first of an event id reached the topic.
struct DuplicateCause {
  enum class Kind {
    kKill,        // `process` acknowledged a send of it, never marked it and never finished
    kFailedSend,  // a send of it failed in `process` (e.g. a timeout), yet the broker stored it
    kUnknown,     // no history explains it
  };
  Kind kind = Kind::kUnknown;
  std::int64_t process = 0;
};

// One record of the topic, as the strip of offsets shows it.
struct ReportCell {
  TopicRecord record;
  // Empty: no outbox row has its event id (phantom). Not -1: a foreign writer's ids may be
  // negative.
  std::optional<std::int64_t> outbox_id;
  std::int64_t copy = 1;        // 1 for the first record of its event id, 2 for the next, ...
  std::int64_t copies = 1;      // records of its event id on the topic
  DuplicateCause cause;         // meaningful when copy > 1
};

struct ReportModel {
  std::string title;
  std::string db_path;
  std::string topic;
  std::int64_t generated_ms = 0;  // epoch ms
  DbSnapshot db;
  KafkaReconciliation kafka;
  CheckResult check;
  std::vector<ReportCell> cells;  // ordered by partition, then offset
  std::vector<ReportLane> lanes;
  bool has_history = false;
  std::int64_t history_records = 0;
  std::int64_t malformed_lines = 0;
};

// Groups history records into lanes (one per PID, in order of first record)
// and operations (an invoke completed by the next ok/fail of the same f and
// value in the same process). Never throws on unknown f or type values.
std::vector<ReportLane> BuildLanes(const std::vector<HistoryOp>& ops);

// One cell per record with its copy number and, for copies after the first,
// the cause found in lanes. outbox gives outbox ids (may be empty).
std::vector<ReportCell> BuildCells(const std::vector<TopicRecord>& records,
                                   const std::vector<OutboxEntry>& outbox,
                                   const std::vector<ReportLane>& lanes);

// Reads the database through the checker and the reconciliation, and joins
// them with records (the whole topic) and the histories' ops. has_history
// false: no --history was given. Throws DbError.
// broker_incarnation: TopicLog::broker_incarnation of the read (empty: not compared), so that
// the verdict after a restart of the in-memory broker is "cannot judge", as check's.
// partitions (TopicLog::partitions) and published_before_read (PublishedEventIds, read before
// the topic; null: not known) as CheckRun takes them, so that records the broker dropped
// (retention) or a relay marked during the read make the verdict check's, not "lost".
ReportModel BuildReportModel(Store& store, const std::vector<TopicRecord>& records,
                             const std::vector<HistoryOp>& ops, bool has_history,
                             std::int64_t malformed_lines,
                             const std::string& broker_incarnation = {},
                             const std::vector<PartitionExtent>& partitions = {},
                             const std::unordered_set<std::string>* published_before_read =
                                 nullptr);

}  // namespace outbox::lab
