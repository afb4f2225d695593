#include "outbox/sqlite/connection.h"

#include <fmt/format.h>

#include "outbox/error.h"

namespace outbox::sqlite {

std::string ResultCodeName(int rc) {
  // sqlite3_errstr gives prose; the symbolic name is what users search for.
  switch (rc) {
    case SQLITE_BUSY: return "SQLITE_BUSY";
    case SQLITE_LOCKED: return "SQLITE_LOCKED";
    case SQLITE_CANTOPEN: return "SQLITE_CANTOPEN";
    case SQLITE_NOTADB: return "SQLITE_NOTADB";
    case SQLITE_CORRUPT: return "SQLITE_CORRUPT";
    case SQLITE_READONLY: return "SQLITE_READONLY";
    case SQLITE_IOERR: return "SQLITE_IOERR";
    case SQLITE_FULL: return "SQLITE_FULL";
    case SQLITE_PERM: return "SQLITE_PERM";
    case SQLITE_CONSTRAINT: return "SQLITE_CONSTRAINT";
    case SQLITE_CONSTRAINT_UNIQUE: return "SQLITE_CONSTRAINT_UNIQUE";
    case SQLITE_CONSTRAINT_PRIMARYKEY: return "SQLITE_CONSTRAINT_PRIMARYKEY";
    case SQLITE_CONSTRAINT_NOTNULL: return "SQLITE_CONSTRAINT_NOTNULL";
    case SQLITE_BUSY_SNAPSHOT: return "SQLITE_BUSY_SNAPSHOT";
    case SQLITE_ERROR: return "SQLITE_ERROR";
    case SQLITE_IOERR_READ: return "SQLITE_IOERR_READ";
    case SQLITE_IOERR_SHORT_READ: return "SQLITE_IOERR_SHORT_READ";
    case SQLITE_IOERR_WRITE: return "SQLITE_IOERR_WRITE";
    case SQLITE_IOERR_FSYNC: return "SQLITE_IOERR_FSYNC";
    case SQLITE_IOERR_TRUNCATE: return "SQLITE_IOERR_TRUNCATE";
    case SQLITE_IOERR_DELETE: return "SQLITE_IOERR_DELETE";
    default: return fmt::format("SQLITE_{}", rc);
  }
}

void ThrowDbError(sqlite3* db, int rc, std::string_view what) {
  const int extended = db ? sqlite3_extended_errcode(db) : rc;
  const int code = (extended & 0xff) == (rc & 0xff) ? extended : rc;
  const char* message = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  throw DbError(fmt::format("{}: {} ({})", what, message, ResultCodeName(code)), code);
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

bool Statement::ColumnIsNull(int column) const {
  return sqlite3_column_type(stmt_.get(), column) == SQLITE_NULL;
}

Connection::Connection(const std::string& path, int flags) : path_(path) {
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
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

void Connection::SetBusyTimeout(int timeout_ms) { sqlite3_busy_timeout(db_.get(), timeout_ms); }

std::int64_t Connection::Changes() const noexcept { return sqlite3_changes64(db_.get()); }

std::int64_t Connection::LastInsertRowid() const noexcept {
  return sqlite3_last_insert_rowid(db_.get());
}

Transaction::Transaction(Connection& connection) : connection_(connection) {
  connection_.Exec("BEGIN IMMEDIATE");
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
