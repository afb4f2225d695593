// PowerCut: what a power cut does to a database written through the power-loss
// VFS shim (powerloss_vfs.h). Call it only when no process has the database
// open: it rewrites the files underneath SQLite.
//
// Each file (database, WAL, journal) returns to its last-synced content by
// restoring the pre-images of its unsynced changes from the side log, newest
// first. The -shm file is deleted (SQLite rebuilds it from the WAL on the next
// open). The side log is deleted: after the cut every file is as durable as it
// will ever be.
//
// Device models, after SQLite's crash test (src/test6.c):
// - default: every unsynced write is lost;
// - torn: as default, and the last sector (4096 bytes, SQLite's default
//   sector size) of each file's last unsynced write holds garbage, limited to
//   the bytes that write covered (SQLite assumes powersafe overwrite:
//   https://www.sqlite.org/psow.html);
// - seed: each unsynced change independently reaches the disk or not, drawn
//   from a generator seeded with seed, so the disk may keep a later write and
//   lose an earlier one (reordering within a sync window). The same log and
//   seed give the same result.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lab/faults/wal_file.h"

namespace outbox::lab {

struct PowerCutOptions {
  bool torn = false;
  std::optional<std::uint64_t> seed;  // keep a random subset of unsynced changes
};

struct FileUndo {
  std::string path;
  std::int64_t changes_undone = 0;  // writes, truncates and deletes that did not survive
  std::int64_t changes_kept = 0;    // unsynced, yet on disk (seed model)
  std::int64_t bytes_undone = 0;    // bytes written by the undone writes
  std::int64_t size_before = 0;     // bytes, before the cut (-1: the file did not exist)
  std::int64_t size_after = 0;      // bytes, after the cut
  std::int64_t torn_bytes = 0;      // bytes of garbage written (torn model)
};

struct PowerCutReport {
  bool log_found = false;           // false: nothing was written through the shim
  std::vector<FileUndo> files;      // files with unsynced changes, in order of first change
  WalSummary wal_before;
  WalSummary wal_after;
  std::int64_t wal_frames_lost = 0;   // committed frames SQLite no longer replays
  std::int64_t wal_commits_lost = 0;  // transactions among them
  bool shm_removed = false;
  std::int64_t ignored_log_bytes = 0;  // torn tail of the side log, skipped
};

// Cuts the power under db_path. Throws SystemError when a file cannot be
// read or written (the files may then be partly restored).
PowerCutReport PowerCut(const std::string& db_path, const PowerCutOptions& options);

}  // namespace outbox::lab
