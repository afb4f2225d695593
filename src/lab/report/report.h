// Report: one self-contained HTML page of a run (issue 11). Gathering and
// rendering are separate: BuildReportModel reads the checker's verdict and
// joins it with the topic and the histories into a ReportModel, a plain value;
// RenderReportHtml turns a model into the page and touches nothing else, so a
// test can render a hand-made model.
//
// The page is inline SVG + CSS + a little plain JavaScript (hover and click
// show an element's details). It references nothing outside itself, and its
// Content-Security-Policy forbids any network request, so it opens from disk
// in any browser. Every string from the database, the topic or a history is
// untrusted bytes: it is made valid UTF-8 (invalid sequences become U+FFFD)
// and HTML-escaped before it reaches the page.
//
// Elements the browser test asserts on (stable ids, classes and data-):
//   #timeline .lane[data-process][data-name]       one lane per process
//   .lane .op[data-f][data-outcome][data-value]    one operation (detailed mode)
//   .lane .kill#kill-PID[data-process]             a process that never finished
//   .lane .hold[data-value]                        a hold point it recorded
//   #kafka .partition[data-partition] .cell[data-offset][data-event]
//   .cell.dup[data-cause]                          a copy after the first of an event id
//   #kafka .range[data-first][data-last]           an offset range (binned mode)
//   #reconciliation tr[data-key], #counts tr[data-key][data-count], #verdict[data-valid]
//   #order .violation                              one order violation, both records
// Thread-safety: plain functions over values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
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
  std::int64_t outbox_id = -1;  // -1: no outbox row has its event id (phantom)
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
ReportModel BuildReportModel(Store& store, const std::vector<TopicRecord>& records,
                             const std::vector<HistoryOp>& ops, bool has_history,
                             std::int64_t malformed_lines,
                             const std::string& broker_incarnation = {});

struct RenderOptions {
  // Above these, the page aggregates: time bins instead of one glyph per
  // operation, offset ranges instead of one cell per record.
  std::int64_t max_detailed_ops = 800;       // operations over all lanes
  std::int64_t max_detailed_records = 1000;  // records over all partitions
  int time_bins = 160;                       // bins across the timeline
  int offset_ranges = 160;                   // ranges per partition
  std::int64_t max_listed_ids = 50;          // ids listed per count; "and N more" after
  std::int64_t max_listed_duplicates = 10;   // duplicated ids listed (allowed, so kept short)
};

// The page, as UTF-8 text. Pure: reads only model and options.
std::string RenderReportHtml(const ReportModel& model, const RenderOptions& options = {});

// Writes text to path.tmp and renames it over path, so that a reader never
// sees half a page. Throws ConfigError naming the file and strerror, or naming
// its folder when that does not exist.
void WriteFileAtomically(const std::string& path, const std::string& text);

// Checks, before a long measurement or read, that WriteFileAtomically(path, ...)
// can create its temporary file: creates path.tmp and removes it again (path
// itself is not touched). Throws ConfigError "write 'path.tmp': <strerror>"
// as WriteFileAtomically would, e.g. when the directory does not exist or is
// not writable.
void RequireWritableFile(const std::string& path);

// bytes with every invalid UTF-8 sequence (overlong, surrogate, truncated,
// above U+10FFFF) replaced by U+FFFD and every C0 control but tab and newline
// replaced by U+FFFD. Source: the Unicode Standard, ch. 3, table 3-7
// (well-formed UTF-8 byte sequences).
std::string SanitizeUtf8(std::string_view bytes);

// SanitizeUtf8, then & < > " ' as character references: safe as element text
// and as a quoted attribute value.
std::string EscapeHtml(std::string_view bytes);

}  // namespace outbox::lab
