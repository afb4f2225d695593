// History: a JSON-lines log of operations, one object a line, in the style of
// Jepsen histories: {"process":PID,"time_ms":T,"type":"invoke|ok|fail","f":"txn|send|mark","value":"evt-1001"}.
// "txn" is a business transaction (loan + outbox row), "send" a produce and
// its delivery report, "mark" the published mark. A process killed between
// invoke and completion leaves the invoke open; the checker reads it as
// "info" (indeterminate).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/clock.h"

namespace outbox::lab {

class History {
 public:
  // Opens path for appending (created if missing); time_ms of each line comes
  // from clock (not owned; must outlive the History). Throws SystemError.
  History(const std::string& path, Clock& clock);
  ~History();
  History(const History&) = delete;
  History& operator=(const History&) = delete;

  // Appends one line with a single write(2) to an O_APPEND descriptor, so a
  // kill -9 never leaves half a line and concurrent processes do not interleave.
  void Record(std::string_view type, std::string_view f, std::string_view value,
              std::string_view error = {});

 private:
  int fd_ = -1;
  Clock& clock_;
};

// Records into history when it is not null.
inline void Note(History* history, std::string_view type, std::string_view f,
                 std::string_view value, std::string_view error = {}) {
  if (history) history->Record(type, f, value, error);
}

// One operation from a history file.
struct HistoryOp {
  std::int64_t process = 0;
  std::string type;  // invoke, ok, fail
  std::string f;     // txn, send, mark
  std::string value;
};

// Reads every complete line of every file; a malformed line is skipped and
// counted in *malformed. Throws SystemError when a file cannot be read.
std::vector<HistoryOp> ReadHistories(const std::vector<std::string>& paths, std::int64_t* malformed);

}  // namespace outbox::lab
