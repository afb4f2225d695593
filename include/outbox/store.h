// Store: the outbox table in an SQLite file.
//
// The business transaction and the outbox insert share one local transaction
// on connection() (chapter 7.1, "同库同事务"): both rows commit or neither does.
// The store owns its connection; one Store per thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "outbox/event.h"
#include "outbox/sqlite/connection.h"

namespace outbox {

// PRAGMA synchronous (https://www.sqlite.org/pragma.html#pragma_synchronous).
// A committed transaction survives kill -9 at every setting: the process dies,
// the OS keeps its writes. Only power loss or an OS crash can undo a commit,
// and in WAL mode only below kFull.
enum class Synchronous { kOff, kNormal, kFull, kExtra };

// Parses "off", "normal", "full", "extra" (case-sensitive). Throws ConfigError.
Synchronous ParseSynchronous(const std::string& text);

struct StoreOptions {
  Synchronous synchronous = Synchronous::kFull;
  // sqlite3_busy_timeout: how long a write waits for another writer's lock
  // before failing with SQLITE_BUSY, in ms.
  int busy_timeout_ms = 5000;
};

enum class OpenMode {
  kExisting,  // the file and schema must exist; nothing is created
  kCreate,    // create parent directories and the file if missing (reset)
};

struct OutboxCounts {
  std::int64_t total = 0;
  std::int64_t published = 0;
  std::int64_t unpublished = 0;
};

class Store {
 public:
  // Opens the database at path in WAL mode with options applied.
  // kExisting: throws SchemaMissingError when the file does not exist or has
  //   no outbox table (and then has created and changed nothing).
  // kCreate: creates missing parent directories; throws DbError with
  //   SQLITE_CANTOPEN when a directory or the file cannot be created.
  // Both throw DbError: SQLITE_NOTADB for a file that is not SQLite,
  //   SQLITE_BUSY when another process holds a lock past the busy timeout.
  Store(const std::string& path, const StoreOptions& options, OpenMode mode);
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Drops and recreates the outbox table and its partial index over
  // unpublished rows, in one transaction. Throws DbError.
  void ResetSchema();
  // True when the outbox table exists.
  bool HasSchema();

  // Inserts event into the outbox. Call inside the caller's
  // sqlite::Transaction on connection(), after the business insert.
  // Returns the new row id. Throws DbError, e.g. SQLITE_CONSTRAINT_UNIQUE when
  // event_id already exists (the caller's transaction must then roll back).
  std::int64_t Enqueue(const OutboxEvent& event);

  // Unpublished rows with id > after_id, in id order, at most limit rows
  // (keyset pagination through the partial index). Throws DbError.
  std::vector<OutboxRow> FetchUnpublished(std::int64_t after_id, std::int64_t limit);

  // Marks row id published in its own transaction (chapter 7.1, decision 3:
  // the mark is a separate transaction after the broker's ack). Returns false
  // when the row does not exist or was already published. Throws DbError.
  bool MarkPublished(std::int64_t id);

  OutboxCounts Count();

  sqlite::Connection& connection() noexcept { return connection_; }

 private:
  sqlite::Connection connection_;
};

}  // namespace outbox
