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
#include <unordered_map>

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
  // Binds value's bytes as text without copying them (SQLITE_STATIC): value must stay valid and
  // unchanged until the statement is reset (Reset, or the end of a Connection::Reuse lease) or
  // this parameter is bound again. Saves the copy Bind makes, which is a malloc and a memcpy per
  // text. Throws DbError as Bind.
  Statement& BindView(int index, std::string_view value);
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
  // The column's text without a copy: valid until the next Step, Reset or Run of this
  // statement (https://www.sqlite.org/c3ref/column_blob.html); empty for NULL.
  std::string_view ColumnView(int column) const;
  bool ColumnIsNull(int column) const;

 private:
  sqlite3* db_;  // not owned
  std::unique_ptr<sqlite3_stmt, StatementDeleter> stmt_;
  std::string sql_;
};

// A statement kept by its Connection (Connection::Reuse) and lent to one caller at a time. It
// comes reset with no bindings; when the lease ends it is reset again, so a read it stepped does
// not keep its snapshot open (https://www.sqlite.org/c3ref/reset.html). Valid while its
// Connection lives and is not moved from.
class ReusedStatement {
 public:
  ReusedStatement(const ReusedStatement&) = delete;
  ReusedStatement& operator=(const ReusedStatement&) = delete;
  ~ReusedStatement();

  Statement& operator*() noexcept { return *statement_; }
  Statement* operator->() noexcept { return statement_; }

 private:
  friend class Connection;
  ReusedStatement(Statement& statement, bool& in_use) noexcept;
  Statement* statement_;
  bool* in_use_;
};

class Connection {
 public:
  // Opens path with sqlite3_open_v2 flags. Throws DbError when SQLite refuses
  // (SQLITE_CANTOPEN for a missing file without SQLITE_OPEN_CREATE).
  Connection(const std::string& path, int flags);
  // Opens uri (a "file:" URI; flags must include SQLITE_OPEN_URI) and names the
  // connection path in messages and path(). Throws DbError as above.
  Connection(const std::string& path, int flags, const std::string& uri);
  Connection(Connection&&) noexcept = default;
  // Closes this connection before it frees this connection's busy-handler state.
  Connection& operator=(Connection&& other) noexcept;

  // Executes one or more statements without results. Throws DbError.
  void Exec(std::string_view sql);
  Statement Prepare(std::string_view sql) { return Statement(db_.get(), sql); }
  // The statement for sql, prepared on this connection the first time and kept until the
  // connection closes, instead of sqlite3_prepare_v2 on every call (about 1 M instructions per
  // 1,000 events relayed, where the relay's page read, mark and lease renewal ran once per batch).
  // SQLite prepares it again by itself after a schema change (sqlite3_prepare_v2, "the
  // statement will be automatically recompiled"). One lease per sql at a time: throws
  // std::logic_error when the same sql is still lent out (a nested use would reset the other's
  // rows). Throws DbError on a bad statement.
  ReusedStatement Reuse(const std::string& sql);
  // Runs a query that yields one integer (e.g. COUNT(*)). Throws DbError.
  std::int64_t QueryInt64(std::string_view sql);
  // How long a statement waits for another connection's lock before it fails
  // with SQLITE_BUSY, in ms (0: fail at once). Like sqlite3_busy_timeout, but
  // it retries every kBusyRetryMaxUs at most: SQLite's own handler sleeps 1, 2,
  // 5, ... then 100 ms between tries (sqlite3.c, sqliteDefaultBusyCallback), so
  // against a writer that commits 1,000 times a second, which frees the lock
  // for well under a millisecond each time, it loses nearly every race and
  // waited up to 1.1 s for one mark (issue 8; README, "Latency").
  void SetBusyTimeout(int timeout_ms);
  // Takes turns for the write lock with the other connections that call this
  // with the same turn_file (the store passes "<database>-turn"): a connection
  // that has waited for the lock once says so with flock(LOCK_SH) on the file,
  // and a connection about to begin a write transaction (Transaction) first
  // lets such a waiter through, for at most kTurnYieldMaxUs. Without it SQLite's
  // lock is not a queue: a writer that commits back to back frees it for a few
  // microseconds at a time, and another process retrying every
  // kBusyRetryMaxUs almost never gets it (issue 8: a relay's mark waited 1.1 s
  // behind a `write --rate 1000` child; README, "Latency"). flock(2), not
  // fcntl(2): closing a descriptor would drop SQLite's own fcntl locks, never
  // a flock; the kernel drops a killed process's flock. When the file cannot be
  // opened (a read-only directory) turns are off and the busy timeout still holds.
  void EnableWriterTurns(const std::string& turn_file) noexcept;
  // Called by Transaction before BEGIN IMMEDIATE: waits (sleeping 20 us at a
  // time, at most kTurnYieldMaxUs) while another connection announces a wait,
  // then lets this connection's busy waits announce themselves.
  void YieldToWaiters() noexcept;
  // Called by Transaction after BEGIN IMMEDIATE: withdraws this connection's
  // announcement, if any (it has the lock, or gave up).
  void EndBusyWait() noexcept;
  // Rows changed by the last INSERT, UPDATE or DELETE on this connection (sqlite3_changes64).
  std::int64_t Changes() const noexcept;
  // Rowid of the last successful INSERT on this connection, 0 when none (sqlite3_last_insert_rowid).
  std::int64_t LastInsertRowid() const noexcept;

  sqlite3* get() const noexcept { return db_.get(); }
  const std::string& path() const noexcept { return path_; }

 private:
  // The busy handler's state; on the heap, so its address (given to SQLite) survives a move.
  struct BusyWait {
    BusyWait() = default;
    BusyWait(const BusyWait&) = delete;
    BusyWait& operator=(const BusyWait&) = delete;
    ~BusyWait();
    int timeout_ms = 0;
    std::int64_t started_us = 0;  // steady clock, at the first retry of the current wait
    int turn_fd = -1;             // the turn file (EnableWriterTurns), owned; -1: none
    bool announced = false;       // this connection holds LOCK_SH on turn_fd: it waits
    bool may_announce = false;    // in Transaction's BEGIN IMMEDIATE (only it ends the announcement)
  };
  static int OnBusy(void* wait, int count) noexcept;

  std::string path_;
  std::unique_ptr<BusyWait> busy_ = std::make_unique<BusyWait>();
  // Closed before busy_ is freed (members are destroyed in reverse order).
  std::unique_ptr<sqlite3, ConnectionDeleter> db_;
  // Reuse's statements, finalized before db_ closes (declared after it). On the heap, so a
  // lent statement survives the map's growth.
  struct Kept {
    explicit Kept(Statement s) : statement(std::move(s)) {}
    Statement statement;
    bool in_use = false;
  };
  std::unordered_map<std::string, std::unique_ptr<Kept>> kept_;
};

// The longest sleep between two tries for a lock, in microseconds (the first
// tries come sooner: 20, 50, 100, 200 us). A try is two fcntl(2) calls, so
// waiting out a 5 s lock costs about 10,000 tries.
inline constexpr int kBusyRetryMaxUs = 500;
// How long a connection starting a write transaction lets an announced waiter
// go first, at most, in microseconds: a few of the waiter's retries on a loaded
// machine, and the most a waiter that is stopped (SIGSTOP) costs each writer.
inline constexpr int kTurnYieldMaxUs = 3000;
// An announced waiter's sleep between tries, in microseconds.
inline constexpr int kAnnouncedRetryUs = 50;

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
