#include "outbox/sqlite/connection.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <iterator>
#include <stdexcept>
#include <thread>

#include "outbox/error.h"

namespace outbox::sqlite {

std::string ResultCodeName(int rc) {
  // sqlite3_errstr gives prose; the symbolic name is what users search for.
  // Every primary and extended code of https://www.sqlite.org/rescode.html
  // that this sqlite3.h defines, so no code is ever shown as a bare number.
  switch (rc) {
    case SQLITE_OK: return "SQLITE_OK";
    case SQLITE_ERROR: return "SQLITE_ERROR";
    case SQLITE_INTERNAL: return "SQLITE_INTERNAL";
    case SQLITE_PERM: return "SQLITE_PERM";
    case SQLITE_ABORT: return "SQLITE_ABORT";
    case SQLITE_BUSY: return "SQLITE_BUSY";
    case SQLITE_LOCKED: return "SQLITE_LOCKED";
    case SQLITE_NOMEM: return "SQLITE_NOMEM";
    case SQLITE_READONLY: return "SQLITE_READONLY";
    case SQLITE_INTERRUPT: return "SQLITE_INTERRUPT";
    case SQLITE_IOERR: return "SQLITE_IOERR";
    case SQLITE_CORRUPT: return "SQLITE_CORRUPT";
    case SQLITE_NOTFOUND: return "SQLITE_NOTFOUND";
    case SQLITE_FULL: return "SQLITE_FULL";
    case SQLITE_CANTOPEN: return "SQLITE_CANTOPEN";
    case SQLITE_PROTOCOL: return "SQLITE_PROTOCOL";
    case SQLITE_EMPTY: return "SQLITE_EMPTY";
    case SQLITE_SCHEMA: return "SQLITE_SCHEMA";
    case SQLITE_TOOBIG: return "SQLITE_TOOBIG";
    case SQLITE_CONSTRAINT: return "SQLITE_CONSTRAINT";
    case SQLITE_MISMATCH: return "SQLITE_MISMATCH";
    case SQLITE_MISUSE: return "SQLITE_MISUSE";
    case SQLITE_NOLFS: return "SQLITE_NOLFS";
    case SQLITE_AUTH: return "SQLITE_AUTH";
    case SQLITE_FORMAT: return "SQLITE_FORMAT";
    case SQLITE_RANGE: return "SQLITE_RANGE";
    case SQLITE_NOTADB: return "SQLITE_NOTADB";
    case SQLITE_NOTICE: return "SQLITE_NOTICE";
    case SQLITE_WARNING: return "SQLITE_WARNING";
    case SQLITE_ROW: return "SQLITE_ROW";
    case SQLITE_DONE: return "SQLITE_DONE";
    case SQLITE_ERROR_MISSING_COLLSEQ: return "SQLITE_ERROR_MISSING_COLLSEQ";
    case SQLITE_ERROR_RETRY: return "SQLITE_ERROR_RETRY";
    case SQLITE_ERROR_SNAPSHOT: return "SQLITE_ERROR_SNAPSHOT";
    case SQLITE_IOERR_READ: return "SQLITE_IOERR_READ";
    case SQLITE_IOERR_SHORT_READ: return "SQLITE_IOERR_SHORT_READ";
    case SQLITE_IOERR_WRITE: return "SQLITE_IOERR_WRITE";
    case SQLITE_IOERR_FSYNC: return "SQLITE_IOERR_FSYNC";
    case SQLITE_IOERR_DIR_FSYNC: return "SQLITE_IOERR_DIR_FSYNC";
    case SQLITE_IOERR_TRUNCATE: return "SQLITE_IOERR_TRUNCATE";
    case SQLITE_IOERR_FSTAT: return "SQLITE_IOERR_FSTAT";
    case SQLITE_IOERR_UNLOCK: return "SQLITE_IOERR_UNLOCK";
    case SQLITE_IOERR_RDLOCK: return "SQLITE_IOERR_RDLOCK";
    case SQLITE_IOERR_DELETE: return "SQLITE_IOERR_DELETE";
    case SQLITE_IOERR_BLOCKED: return "SQLITE_IOERR_BLOCKED";
    case SQLITE_IOERR_NOMEM: return "SQLITE_IOERR_NOMEM";
    case SQLITE_IOERR_ACCESS: return "SQLITE_IOERR_ACCESS";
    case SQLITE_IOERR_CHECKRESERVEDLOCK: return "SQLITE_IOERR_CHECKRESERVEDLOCK";
    case SQLITE_IOERR_LOCK: return "SQLITE_IOERR_LOCK";
    case SQLITE_IOERR_CLOSE: return "SQLITE_IOERR_CLOSE";
    case SQLITE_IOERR_DIR_CLOSE: return "SQLITE_IOERR_DIR_CLOSE";
    case SQLITE_IOERR_SHMOPEN: return "SQLITE_IOERR_SHMOPEN";
    case SQLITE_IOERR_SHMSIZE: return "SQLITE_IOERR_SHMSIZE";
    case SQLITE_IOERR_SHMLOCK: return "SQLITE_IOERR_SHMLOCK";
    case SQLITE_IOERR_SHMMAP: return "SQLITE_IOERR_SHMMAP";
    case SQLITE_IOERR_SEEK: return "SQLITE_IOERR_SEEK";
    case SQLITE_IOERR_DELETE_NOENT: return "SQLITE_IOERR_DELETE_NOENT";
    case SQLITE_IOERR_MMAP: return "SQLITE_IOERR_MMAP";
    case SQLITE_IOERR_GETTEMPPATH: return "SQLITE_IOERR_GETTEMPPATH";
    case SQLITE_IOERR_CONVPATH: return "SQLITE_IOERR_CONVPATH";
    case SQLITE_IOERR_VNODE: return "SQLITE_IOERR_VNODE";
    case SQLITE_IOERR_AUTH: return "SQLITE_IOERR_AUTH";
    case SQLITE_IOERR_BEGIN_ATOMIC: return "SQLITE_IOERR_BEGIN_ATOMIC";
    case SQLITE_IOERR_COMMIT_ATOMIC: return "SQLITE_IOERR_COMMIT_ATOMIC";
    case SQLITE_IOERR_ROLLBACK_ATOMIC: return "SQLITE_IOERR_ROLLBACK_ATOMIC";
    case SQLITE_IOERR_DATA: return "SQLITE_IOERR_DATA";
    case SQLITE_IOERR_CORRUPTFS: return "SQLITE_IOERR_CORRUPTFS";
    case SQLITE_LOCKED_SHAREDCACHE: return "SQLITE_LOCKED_SHAREDCACHE";
    case SQLITE_LOCKED_VTAB: return "SQLITE_LOCKED_VTAB";
    case SQLITE_BUSY_RECOVERY: return "SQLITE_BUSY_RECOVERY";
    case SQLITE_BUSY_SNAPSHOT: return "SQLITE_BUSY_SNAPSHOT";
    case SQLITE_BUSY_TIMEOUT: return "SQLITE_BUSY_TIMEOUT";
    case SQLITE_CANTOPEN_NOTEMPDIR: return "SQLITE_CANTOPEN_NOTEMPDIR";
    case SQLITE_CANTOPEN_ISDIR: return "SQLITE_CANTOPEN_ISDIR";
    case SQLITE_CANTOPEN_FULLPATH: return "SQLITE_CANTOPEN_FULLPATH";
    case SQLITE_CANTOPEN_CONVPATH: return "SQLITE_CANTOPEN_CONVPATH";
    case SQLITE_CANTOPEN_DIRTYWAL: return "SQLITE_CANTOPEN_DIRTYWAL";
    case SQLITE_CANTOPEN_SYMLINK: return "SQLITE_CANTOPEN_SYMLINK";
    case SQLITE_CORRUPT_VTAB: return "SQLITE_CORRUPT_VTAB";
    case SQLITE_CORRUPT_SEQUENCE: return "SQLITE_CORRUPT_SEQUENCE";
    case SQLITE_CORRUPT_INDEX: return "SQLITE_CORRUPT_INDEX";
    case SQLITE_READONLY_RECOVERY: return "SQLITE_READONLY_RECOVERY";
    case SQLITE_READONLY_CANTLOCK: return "SQLITE_READONLY_CANTLOCK";
    case SQLITE_READONLY_ROLLBACK: return "SQLITE_READONLY_ROLLBACK";
    case SQLITE_READONLY_DBMOVED: return "SQLITE_READONLY_DBMOVED";
    case SQLITE_READONLY_CANTINIT: return "SQLITE_READONLY_CANTINIT";
    case SQLITE_READONLY_DIRECTORY: return "SQLITE_READONLY_DIRECTORY";
    case SQLITE_ABORT_ROLLBACK: return "SQLITE_ABORT_ROLLBACK";
    case SQLITE_CONSTRAINT_CHECK: return "SQLITE_CONSTRAINT_CHECK";
    case SQLITE_CONSTRAINT_COMMITHOOK: return "SQLITE_CONSTRAINT_COMMITHOOK";
    case SQLITE_CONSTRAINT_FOREIGNKEY: return "SQLITE_CONSTRAINT_FOREIGNKEY";
    case SQLITE_CONSTRAINT_FUNCTION: return "SQLITE_CONSTRAINT_FUNCTION";
    case SQLITE_CONSTRAINT_NOTNULL: return "SQLITE_CONSTRAINT_NOTNULL";
    case SQLITE_CONSTRAINT_PRIMARYKEY: return "SQLITE_CONSTRAINT_PRIMARYKEY";
    case SQLITE_CONSTRAINT_TRIGGER: return "SQLITE_CONSTRAINT_TRIGGER";
    case SQLITE_CONSTRAINT_UNIQUE: return "SQLITE_CONSTRAINT_UNIQUE";
    case SQLITE_CONSTRAINT_VTAB: return "SQLITE_CONSTRAINT_VTAB";
    case SQLITE_CONSTRAINT_ROWID: return "SQLITE_CONSTRAINT_ROWID";
    case SQLITE_CONSTRAINT_PINNED: return "SQLITE_CONSTRAINT_PINNED";
    case SQLITE_CONSTRAINT_DATATYPE: return "SQLITE_CONSTRAINT_DATATYPE";
    case SQLITE_NOTICE_RECOVER_WAL: return "SQLITE_NOTICE_RECOVER_WAL";
    case SQLITE_NOTICE_RECOVER_ROLLBACK: return "SQLITE_NOTICE_RECOVER_ROLLBACK";
    case SQLITE_WARNING_AUTOINDEX: return "SQLITE_WARNING_AUTOINDEX";
    case SQLITE_AUTH_USER: return "SQLITE_AUTH_USER";
    case SQLITE_OK_LOAD_PERMANENTLY: return "SQLITE_OK_LOAD_PERMANENTLY";
    case SQLITE_OK_SYMLINK: return "SQLITE_OK_SYMLINK";
    default: break;
  }
  // A code newer than this table: the primary name plus the extended number.
  if ((rc & 0xff) != rc) return fmt::format("{}+{}", ResultCodeName(rc & 0xff), rc >> 8);
  return fmt::format("SQLITE_UNKNOWN+{}", rc);
}

void ThrowDbError(sqlite3* db, int rc, std::string_view what) {
  const int extended = db ? sqlite3_extended_errcode(db) : rc;
  const int code = (extended & 0xff) == (rc & 0xff) ? extended : rc;
  const char* message = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  throw DbError(fmt::format("{}: {} ({})", what, message, ResultCodeName(code)), code, message);
}

Statement::Statement(sqlite3* db, std::string_view sql) : db_(db), sql_(sql) {
  sqlite3_stmt* raw = nullptr;
  const int rc = sqlite3_prepare_v2(db, sql_.c_str(), static_cast<int>(sql_.size()), &raw, nullptr);
  stmt_.reset(raw);
  if (rc != SQLITE_OK) ThrowDbError(db_, rc, fmt::format("prepare '{}'", sql_));
}

Statement& Statement::Bind(int index, std::int64_t value) {
  const int rc = sqlite3_bind_int64(stmt_.get(), index, value);
  if (rc != SQLITE_OK) ThrowDbError(db_, rc, fmt::format("bind ?{} of '{}'", index, sql_));
  return *this;
}

Statement& Statement::Bind(int index, std::string_view value) {
  const int rc = sqlite3_bind_text(stmt_.get(), index, value.data(),
                                   static_cast<int>(value.size()), SQLITE_TRANSIENT);
  if (rc != SQLITE_OK) ThrowDbError(db_, rc, fmt::format("bind ?{} of '{}'", index, sql_));
  return *this;
}

Statement& Statement::BindView(int index, std::string_view value) {
  const int rc = sqlite3_bind_text(stmt_.get(), index, value.data(),
                                   static_cast<int>(value.size()), SQLITE_STATIC);
  if (rc != SQLITE_OK) ThrowDbError(db_, rc, fmt::format("bind ?{} of '{}'", index, sql_));
  return *this;
}

Statement& Statement::BindNull(int index) {
  const int rc = sqlite3_bind_null(stmt_.get(), index);
  if (rc != SQLITE_OK) ThrowDbError(db_, rc, fmt::format("bind ?{} of '{}'", index, sql_));
  return *this;
}

bool Statement::Step() {
  const int rc = sqlite3_step(stmt_.get());
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  ThrowDbError(db_, rc, fmt::format("execute '{}'", sql_));
}

void Statement::Run() {
  while (Step()) {
  }
}

void Statement::Reset() {
  sqlite3_reset(stmt_.get());
  sqlite3_clear_bindings(stmt_.get());
}

std::int64_t Statement::ColumnInt64(int column) const {
  return sqlite3_column_int64(stmt_.get(), column);
}

std::string Statement::ColumnText(int column) const {
  const auto* text = sqlite3_column_text(stmt_.get(), column);
  if (!text) return {};
  return std::string(reinterpret_cast<const char*>(text),
                     static_cast<std::size_t>(sqlite3_column_bytes(stmt_.get(), column)));
}

std::string_view Statement::ColumnView(int column) const {
  const auto* text = sqlite3_column_text(stmt_.get(), column);
  if (!text) return {};
  return {reinterpret_cast<const char*>(text),
          static_cast<std::size_t>(sqlite3_column_bytes(stmt_.get(), column))};
}

bool Statement::ColumnIsNull(int column) const {
  return sqlite3_column_type(stmt_.get(), column) == SQLITE_NULL;
}

Connection::Connection(const std::string& path, int flags) : Connection(path, flags, path) {}

Connection::Connection(const std::string& path, int flags, const std::string& uri) : path_(path) {
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(uri.c_str(), &raw, flags, nullptr);
  // sqlite3_open_v2 allocates a handle even on failure: own it before checking.
  db_.reset(raw);
  if (rc != SQLITE_OK) ThrowDbError(db_.get(), rc, fmt::format("open database '{}'", path));
  sqlite3_extended_result_codes(db_.get(), 1);
}

void Connection::Exec(std::string_view sql) {
  const std::string text(sql);
  const int rc = sqlite3_exec(db_.get(), text.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) ThrowDbError(db_.get(), rc, fmt::format("execute '{}' on '{}'", text, path_));
}

std::int64_t Connection::QueryInt64(std::string_view sql) {
  Statement stmt = Prepare(sql);
  if (!stmt.Step()) return 0;
  return stmt.ColumnInt64(0);
}

Connection& Connection::operator=(Connection&& other) noexcept {
  kept_ = std::move(other.kept_);  // this connection's own statements are finalized first
  db_ = std::move(other.db_);
  busy_ = std::move(other.busy_);
  path_ = std::move(other.path_);
  return *this;
}

ReusedStatement::ReusedStatement(Statement& statement, bool& in_use) noexcept
    : statement_(&statement), in_use_(&in_use) {
  *in_use_ = true;
}

ReusedStatement::~ReusedStatement() {
  statement_->Reset();
  *in_use_ = false;
}

ReusedStatement Connection::Reuse(const std::string& sql) {
  auto found = kept_.find(sql);
  if (found == kept_.end())
    found = kept_.emplace(sql, std::make_unique<Kept>(Statement(db_.get(), sql))).first;
  Kept& kept = *found->second;
  if (kept.in_use)
    throw std::logic_error(fmt::format("Connection::Reuse: '{}' is already in use", sql));
  kept.statement.Reset();
  return ReusedStatement(kept.statement, kept.in_use);
}

void Connection::SetBusyTimeout(int timeout_ms) {
  busy_->timeout_ms = std::max(timeout_ms, 0);
  if (timeout_ms <= 0) {
    sqlite3_busy_handler(db_.get(), nullptr, nullptr);  // fail with SQLITE_BUSY at once
    return;
  }
  sqlite3_busy_handler(db_.get(), &Connection::OnBusy, busy_.get());
}

namespace {

std::int64_t SteadyMicros() noexcept {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Connection::BusyWait::~BusyWait() {
  if (turn_fd >= 0) ::close(turn_fd);  // drops the flock too
}

int Connection::OnBusy(void* state, int count) noexcept {
  // The lock is a non-blocking fcntl(2) lock (this SQLite is built without
  // SQLITE_ENABLE_SETLK_TIMEOUT), so the only way to wait for it is to try again.
  // A lock wait, not an event time: the steady clock, as SQLite's own handler.
  constexpr int kFirstSleepsUs[] = {20, 50, 100, 200};
  auto* wait = static_cast<BusyWait*>(state);
  const std::int64_t now_us = SteadyMicros();
  if (count == 0) wait->started_us = now_us;
  const std::int64_t left_us = std::int64_t{wait->timeout_ms} * 1000 - (now_us - wait->started_us);
  if (left_us <= 0) return 0;  // SQLITE_BUSY to the caller
  // Announce the wait (LOCK_NB: a connection checking for waiters holds LOCK_EX for an instant;
  // then the next retry announces).
  if (wait->turn_fd >= 0 && wait->may_announce && !wait->announced)
    wait->announced = flock(wait->turn_fd, LOCK_SH | LOCK_NB) == 0;
  int sleep_us =
      count < static_cast<int>(std::size(kFirstSleepsUs)) ? kFirstSleepsUs[count] : kBusyRetryMaxUs;
  // The holder lets an announced waiter through at its next transaction: be there soon.
  if (wait->announced) sleep_us = std::min(sleep_us, kAnnouncedRetryUs);
  std::this_thread::sleep_for(std::chrono::microseconds(std::min<std::int64_t>(sleep_us, left_us)));
  return 1;
}

void Connection::EnableWriterTurns(const std::string& turn_file) noexcept {
  if (!busy_ || busy_->turn_fd >= 0) return;
  int fd = ::open(turn_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fd = ::open(turn_file.c_str(), O_RDONLY | O_CLOEXEC);
  busy_->turn_fd = fd;  // -1: no turns
}

void Connection::YieldToWaiters() noexcept {
  if (!busy_ || busy_->turn_fd < 0) return;
  busy_->may_announce = true;
  const std::int64_t until_us = SteadyMicros() + kTurnYieldMaxUs;
  // LOCK_EX succeeds only when no connection holds LOCK_SH: no one announced a wait.
  while (flock(busy_->turn_fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK || SteadyMicros() >= until_us) return;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  flock(busy_->turn_fd, LOCK_UN);
}

void Connection::EndBusyWait() noexcept {
  if (!busy_) return;
  busy_->may_announce = false;
  if (!busy_->announced) return;
  flock(busy_->turn_fd, LOCK_UN);
  busy_->announced = false;
}

std::int64_t Connection::Changes() const noexcept { return sqlite3_changes64(db_.get()); }

std::int64_t Connection::LastInsertRowid() const noexcept {
  return sqlite3_last_insert_rowid(db_.get());
}

Transaction::Transaction(Connection& connection) : connection_(connection) {
  connection_.YieldToWaiters();
  // The operation in the error, not the SQL (docs/commands.md): "begin a write transaction on
  // 'x.db': database is locked".
  const int rc = sqlite3_exec(connection_.get(), "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
  connection_.EndBusyWait();
  if (rc != SQLITE_OK)
    ThrowDbError(connection_.get(), rc,
                 fmt::format("begin a write transaction on '{}'", connection_.path()));
}

Transaction::~Transaction() {
  if (!done_) sqlite3_exec(connection_.get(), "ROLLBACK", nullptr, nullptr, nullptr);
}

void Transaction::Commit() {
  connection_.Exec("COMMIT");
  done_ = true;
}

ReadTransaction::ReadTransaction(Connection& connection) : connection_(connection) {
  connection_.Exec("BEGIN");
}

ReadTransaction::~ReadTransaction() {
  sqlite3_exec(connection_.get(), "ROLLBACK", nullptr, nullptr, nullptr);
}

}  // namespace outbox::sqlite
