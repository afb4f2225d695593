// Thin RAII wrapper over the SQLite C API: a connection, prepared statements
// and scoped transactions. Owns every sqlite3* and sqlite3_stmt* it hands out.
// Not thread-safe: use one Connection per thread.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace outbox::sqlite {

struct ConnectionDeleter {
  void operator()(sqlite3* db) const noexcept { sqlite3_close_v2(db); }
};
struct StatementDeleter {
  void operator()(sqlite3_stmt* stmt) const noexcept { sqlite3_finalize(stmt); }
};

// Throws DbError "<what>: <sqlite message> (<SQLITE_CODE>)". The one place
// that turns SQLite result codes into exceptions.
[[noreturn]] void ThrowDbError(sqlite3* db, int rc, std::string_view what);

// Name of an (extended) result code, e.g. "SQLITE_CONSTRAINT_UNIQUE"; a code
// newer than the table as "SQLITE_IOERR+40" (primary name + extended number).
std::string ResultCodeName(int rc);

class Statement {
 public:
  Statement(sqlite3* db, std::string_view sql);  // throws DbError on a bad statement

  Statement& Bind(int index, std::int64_t value);
  Statement& Bind(int index, std::string_view value);
  Statement& BindNull(int index);

  // Steps once. Returns true when a row is available, false when done.
  // Throws DbError on any other result (SQLITE_BUSY after the busy timeout,
  // SQLITE_CONSTRAINT_*, ...).
  bool Step();
  // Steps to completion, ignoring rows.
  void Run();
  // Resets for re-execution and clears bindings.
  void Reset();

  std::int64_t ColumnInt64(int column) const;
  std::string ColumnText(int column) const;
  bool ColumnIsNull(int column) const;

 private:
  sqlite3* db_;  // not owned
  std::unique_ptr<sqlite3_stmt, StatementDeleter> stmt_;
  std::string sql_;
};

class Connection {
 public:
  // Opens path with sqlite3_open_v2 flags. Throws DbError when SQLite refuses
  // (SQLITE_CANTOPEN for a missing file without SQLITE_OPEN_CREATE).
  Connection(const std::string& path, int flags);

  // Executes one or more statements without results. Throws DbError.
  void Exec(std::string_view sql);
  Statement Prepare(std::string_view sql) { return Statement(db_.get(), sql); }
  // Runs a query that yields one integer (e.g. COUNT(*)). Throws DbError.
  std::int64_t QueryInt64(std::string_view sql);
  // sqlite3_busy_timeout: how long a statement waits for another writer's lock, ms.
  void SetBusyTimeout(int timeout_ms);
  // Rows changed by the last INSERT, UPDATE or DELETE on this connection (sqlite3_changes64).
  std::int64_t Changes() const noexcept;
  // Rowid of the last successful INSERT on this connection, 0 when none (sqlite3_last_insert_rowid).
  std::int64_t LastInsertRowid() const noexcept;

  sqlite3* get() const noexcept { return db_.get(); }
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  std::unique_ptr<sqlite3, ConnectionDeleter> db_;
};

// A scoped write transaction. BEGIN IMMEDIATE takes the write lock up front,
// so a busy database fails here (after the busy timeout) and not at COMMIT
// (https://www.sqlite.org/lang_transaction.html).
//
// The destructor rolls back an uncommitted transaction: that covers exceptions
// only. A kill -9 runs no destructor; atomicity under a crash comes from
// SQLite's write-ahead log, which discards uncommitted frames on recovery.
class Transaction {
 public:
  explicit Transaction(Connection& connection);  // throws DbError (e.g. SQLITE_BUSY)
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();

  // Throws DbError; after a failed COMMIT the destructor still rolls back.
  void Commit();

  // The connection the transaction runs on: statements prepared on it run
  // inside the transaction until Commit() or destruction.
  Connection& connection() noexcept { return connection_; }

 private:
  Connection& connection_;
  bool done_ = false;
};

// A scoped read transaction (BEGIN DEFERRED). In WAL mode every read inside
// it sees the one snapshot taken at its first read, so counts and rows read
// through it agree even while other connections commit
// (https://www.sqlite.org/wal.html, "Concurrency"). It takes no write lock.
// The destructor ends it (ROLLBACK: nothing was written).
class ReadTransaction {
 public:
  explicit ReadTransaction(Connection& connection);  // throws DbError
  ReadTransaction(const ReadTransaction&) = delete;
  ReadTransaction& operator=(const ReadTransaction&) = delete;
  ~ReadTransaction();

  Connection& connection() noexcept { return connection_; }

 private:
  Connection& connection_;
};

}  // namespace outbox::sqlite
