// History: a JSON-lines log of operations, one object a line, in the style of
// Jepsen histories: {"process":PID,"time_ms":T,"type":"invoke|ok|fail|info","f":"txn|send|mark|park","value":"evt-1001"}.
// "txn" is a business transaction (loan + outbox row), "send" a produce and
// its delivery report, "mark" the published mark ("ok"; "fail" with error
// "fenced" when the relay's claim had been taken over), "park" a row parked.
// The production relay's settle records carry "token": the claim's fencing
// token. A process killed between
// invoke and completion leaves the invoke open; the checker reads it as
// "info" (indeterminate). A writer records "info" itself for a transaction whose COMMIT lost its
// PostgreSQL connection: the server may or may not have made it durable.
//
// A History opened with a process name also records the process itself as an
// operation: {"type":"invoke","f":"process","value":"write-hold"} when it is
// opened, and "ok" (or "fail", when an exception is unwinding) when it is
// closed. kill -9 runs no destructor, so a process whose "process" invoke stays
// open never finished: the report draws its kill at its last record.
//
// A victim of the kill soak also records its phase transitions:
// {"type":"note","f":"phase","value":"claim","mono_us":N} (relay: claim, produce,
// acked, mark, idle; writer: begin, commit), so that after a kill -9 the last
// phase of the victim says which window the kill landed in. Readers that do not
// know f "phase" ignore it (the checker counts only txn/send/mark/park; the
// report draws it as a generic record).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/clock.h"

namespace outbox::lab {

class History {
 public:
  // Opens path for appending (created if missing, and its folder too); time_ms of each line comes
  // from clock (not owned; must outlive the History). With a non-empty
  // process_name (the subcommand, e.g. "publish-hold") it records the
  // process's invoke now and its completion in the destructor. Throws SystemError.
  History(const std::string& path, Clock& clock, std::string process_name = {});
  ~History();
  History(const History&) = delete;
  History& operator=(const History&) = delete;

  // Appends one line with a single write(2) to an O_APPEND descriptor, so a
  // kill -9 never leaves half a line and concurrent processes do not interleave.
  // Best effort: a failed write (a full disk) never throws; the first one prints a
  // warning to stderr.
  // token: the fencing token, written when > 0.
  void Record(std::string_view type, std::string_view f, std::string_view value,
              std::string_view error = {}, std::int64_t token = 0);

  // Appends one phase record (one write(2), as Record): type "note", f
  // "phase", value phase, "mono_us" the clock's MonotonicUs() (µs; with
  // SystemClock, CLOCK_MONOTONIC: comparable across the processes of one boot),
  // "token" when > 0.
  void RecordPhase(std::string_view phase, std::int64_t token = 0);

 private:
  // One line; mono_us < 0: none.
  void Write(std::string_view type, std::string_view f, std::string_view value,
             std::string_view error, std::int64_t token, std::int64_t mono_us);

  int fd_ = -1;
  std::string path_;           // for the warning of the first failed write
  bool write_failed_ = false;  // that warning was printed
  Clock& clock_;
  std::string process_name_;
};

// Records into history when it is not null.
inline void Note(History* history, std::string_view type, std::string_view f,
                 std::string_view value, std::string_view error = {}) {
  if (history) history->Record(type, f, value, error);
}

// Records a phase into history when it is not null.
inline void NotePhase(History* history, std::string_view phase, std::int64_t token = 0) {
  if (history) history->RecordPhase(phase, token);
}

// One operation from a history file.
struct HistoryOp {
  std::int64_t process = 0;
  std::int64_t time_ms = 0;  // epoch ms; 0 when the line has none
  std::string type;  // invoke, ok, fail, or any other a newer writer uses
  std::string f;     // txn, send, mark, process, or any other a newer writer uses
  std::string value;  // a non-string value is kept as its JSON text
  std::string error;       // empty when none
  std::int64_t token = 0;  // fencing token of a relay settle record; 0 when none
  // Every other key of the line as one JSON object text ("" when none), for
  // readers that show records they do not know (invalid UTF-8 replaced).
  std::string details;
  // Which of ReadHistories' paths the line came from (its index); lines of one file keep their
  // order, which is the order they were appended in.
  std::size_t file = 0;
};

// Records one relay settle (RelayOptions::on_settle): "ok mark" per marked
// event, "fail mark" with error "fenced" per fenced one, "ok park" per parked
// one, each with the token. No-op when history is null.
void RecordSettle(History* history, std::int64_t token, const std::vector<std::string>& marked,
                  const std::vector<std::string>& parked, const std::vector<std::string>& fenced);

// Reads every complete line of every file, in file order. A line that is not a
// JSON object with string "type" and "f" and a "value" is skipped and counted
// in *malformed (a line with bytes that are not UTF-8 is one). Throws
// SystemError when a file cannot be read.
std::vector<HistoryOp> ReadHistories(const std::vector<std::string>& paths, std::int64_t* malformed);

// `reset` records {"type":"ok","f":"reset","value":RUN_ID} in the history it was given: the
// records before it belong to an earlier run of the database, whose transactions a check of the
// new run would otherwise read as undone (a false "power loss").
inline constexpr const char* kResetOp = "reset";

// Removes from ops, in each file that holds the reset record of run_id (the database's
// Store::RunId()), every record before the last such record (by position in the file: appends
// keep order whatever the clocks say), and every reset record of any run (markers, not
// operations). Returns how many non-reset records it removed. Resets of other databases sharing
// the history cut nothing; a file without this run's reset is kept whole.
std::int64_t DropBeforeLastReset(std::vector<HistoryOp>& ops, const std::string& run_id);

// The run ids of other runs' reset records that DropBeforeLastReset would keep the records after
// (ops as read, before that call): in a file holding this run's reset, those after it; in a file
// without one, all. Each names a database (or a later reset) writing into the same history, whose
// records then count as this run's: give each database its own --history file. Sorted, unique.
std::vector<std::string> OtherRunsInHistory(const std::vector<HistoryOp>& ops,
                                            const std::string& run_id);

}  // namespace outbox::lab
