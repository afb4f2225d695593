// The power-loss VFS shim: an SQLite VFS in front of the default unix VFS
// that simulates a page cache which a power cut can lose.
//
// - Writes go through to the file, so another process (a relay) sees
//   committed data exactly as it would through the page cache, and may
//   publish a row that a later power cut undoes.
// - Before each xWrite and xTruncate of a database, its WAL or its rollback
//   journal, and before an xDelete of a file with unsynced changes, the shim
//   appends the region's old bytes, the old size and the new bytes to the
//   database's side log (powerloss_log.h), under the log's lock.
// - A successful xSync of a file makes that file's logged changes durable,
//   whichever process made them (they share one page cache); a failed xSync
//   pins them as never durable (Linux fsync-after-error, see
//   https://wiki.postgresql.org/wiki/Fsync_Errors).
// - The -shm file is memory-mapped and never written through xWrite; it is
//   not logged (SQLite rebuilds it from the WAL; power-cut deletes it).
//   Temporary files and sub-journals are not logged either.
//
// Writes made without the shim (say by `reset` run without --vfs) count as durable.
//
// The model follows SQLite's own crash test (src/test6.c), except that test6
// buffers writes in memory inside one process, while this shim writes through
// and keeps pre-images on disk so that several processes can share one
// simulated page cache and be killed at any instant.
#pragma once

#include <sqlite3.h>

#include <mutex>
#include <string>

namespace outbox::lab {

// While an object of this type lives, SQLite's default VFS is the shim, named
// "powerloss" (sqlite3_vfs_register(vfs, 1)), so every sqlite3_open_v2 with a
// null VFS name uses it and no open code changes. Create it before the first
// connection and destroy it after the last; at most one at a time.
//
// The I/O failpoints vfs.read, vfs.write, vfs.truncate and vfs.sync (and the
// same names suffixed .db, .wal or .journal for one kind of file) are
// evaluated by this shim; see failpoint.h.
//
// Thread-safety: the VFS object is used by SQLite from any thread; each file
// it opens is used as SQLite uses files (one connection's thread at a time).
class PowerlossVfs {
 public:
  // Throws DbError when there is no default VFS or SQLite refuses the registration.
  PowerlossVfs();
  // Unregisters the shim; SQLite's previous default VFS becomes the default again.
  ~PowerlossVfs();
  PowerlossVfs(const PowerlossVfs&) = delete;
  PowerlossVfs& operator=(const PowerlossVfs&) = delete;

  static constexpr const char* kName = "powerloss";

  // The last I/O failure the shim returned to SQLite, for an error message
  // (SQLite's own says only "disk I/O error"): "<operation> '<file>': <why>",
  // e.g. "sync '/tmp/x/outbox.db-wal': injected by failpoint vfs.sync.wal".
  // Empty when none failed.
  std::string LastFault() const;
  // Called by the shim's callbacks. Never throws.
  void NoteFault(const char* operation, const std::string& path, const char* why) noexcept;
  sqlite3_vfs* real() const noexcept { return real_; }

 private:
  sqlite3_vfs vfs_{};   // registered with SQLite: must not move while registered
  sqlite3_vfs* real_;   // the unix VFS, owned by SQLite
  mutable std::mutex mutex_;
  std::string last_fault_;  // guarded by mutex_
};

// For a process that runs without the shim: throws ConfigError ("vfs.* failpoints need --vfs
// powerloss (or OUTBOX_VFS=powerloss)") when the active failpoint configuration
// (ConfiguredFailpoints, outbox/failpoint.h) sets a vfs.* point, which only the shim evaluates
// and so could never fire. Returns when none is set.
void RequireNoVfsFailpoints();

}  // namespace outbox::lab
