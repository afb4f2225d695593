// The power-loss side log: an append-only file next to a database
// (`<db>-powerloss`) in which the power-loss VFS shim (powerloss_vfs.h) keeps,
// for every write, truncate and delete of the database, its WAL and its
// rollback journal, the bytes before and after the change, until that file's
// next successful xSync makes the change durable. `power-cut` (power_cut.h)
// reads it to put each file back to its last-synced content.
//
// Format: records of a fixed header, the file's path, the old bytes and the
// new bytes, then a 64-bit FNV-1a checksum over all of it. A record is written
// with one write(2) to an O_APPEND descriptor while holding flock(LOCK_EX) on
// the log, so several processes can append at once; a reader stops at the
// first record that is short or fails its checksum (a torn tail).
//
// The log models the page cache, not the disk: it is never fsynced and is
// assumed to survive the simulated power cut, as a test oracle must.
//
// Not thread-safe: one SideLog per open file per thread, as SQLite uses files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lab/faults/unique_fd.h"

namespace outbox::lab {

enum class LogRecordType : std::uint32_t {
  // A write or a truncate: offset, old bytes from offset (the part that
  // existed), old_size; new bytes (for a write) and new_size.
  kChange = 1,
  // The file was deleted: old bytes are its whole content (offset 0).
  kDelete = 2,
  // xSync of path succeeded: every change of path logged before log position
  // `offset` is durable.
  kSynced = 3,
  // xSync of path failed: changes of path logged before position `offset`
  // may have been dropped by the kernel (Linux clears the error after
  // reporting it once), so no later successful sync makes them durable.
  kSyncFailed = 4,
  // First record after a compaction (Clear): positions continue from
  // `offset`, so they never go back and a sync in flight during a compaction
  // cannot cover changes logged after it.
  kBase = 5,
};

struct LogRecord {
  LogRecordType type = LogRecordType::kChange;
  std::int64_t position = 0;  // where the record starts in the log, bytes, never decreasing
                              // across compactions (set by Read)
  std::int32_t pid = 0;       // the process that logged it
  std::string path;           // the database file, WAL or journal, as SQLite named it
  std::int64_t offset = 0;    // bytes into the file (kSynced/kSyncFailed: log position)
  std::int64_t old_size = 0;  // file size before the change, bytes
  std::int64_t new_size = 0;  // file size after the change, bytes
  std::string old_bytes;      // content of [offset, min(offset + len, old_size)) before
  std::string new_bytes;      // what a write wrote at offset (empty for truncate, delete)
};

// What Read found.
struct LogContents {
  std::vector<LogRecord> records;
  std::int64_t ignored_tail_bytes = 0;  // after the first short or bad record
};

class SideLog {
 public:
  // Opens (creating, mode 0644) the log at path for appending. Throws
  // SystemError "open power-loss log '<path>': <strerror>" when it cannot.
  explicit SideLog(const std::string& path);

  // flock(LOCK_EX) on the log for the scope: appends and the file change they
  // describe happen under it, so a sync in another process cannot slip in
  // between and declare a change durable that was not yet made.
  class Lock {
   public:
    explicit Lock(const SideLog& log);  // blocks; throws SystemError if flock fails
    ~Lock();
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

   private:
    int fd_;  // not owned
  };

  // Appends record (its position is ignored). Call under a Lock. Throws
  // SystemError on a failed or short write.
  void Append(const LogRecord& record) const;
  // The position the next record gets, bytes (counting what compactions dropped).
  std::int64_t Size() const;
  // Reads every whole record. Throws SystemError when the log cannot be read.
  LogContents Read() const;
  // Drops every record (every change in it is durable), keeping positions
  // going up. Call under a Lock. A kill -9 inside it can restart positions at
  // 0; the shim only compacts when nothing in the log is unsynced.
  void Clear() const;

  const std::string& path() const noexcept { return path_; }

 private:
  std::int64_t PhysicalSize() const;  // bytes in the file now
  std::int64_t Base() const;          // position of the file's first byte

  std::string path_;
  UniqueFd fd_;
};

// The side log of a database: "<db_path>-powerloss".
std::string SideLogPath(const std::string& db_path);

// A kChange or kDelete record and whether it is durable: covered by a later
// kSynced of its path and not pinned by a kSyncFailed before that (Linux
// fsync-after-error: the failed sync's pages were dropped, so no later sync
// writes them; a later write of the same bytes is durable on its own).
struct Change {
  LogRecord record;
  bool durable = false;
};

// Every kChange and kDelete of records, in log order, with its durability.
std::vector<Change> ClassifyChanges(const std::vector<LogRecord>& records);

// The changes of ClassifyChanges that are not durable, in log order.
std::vector<LogRecord> UnsyncedChanges(const std::vector<LogRecord>& records);

}  // namespace outbox::lab
