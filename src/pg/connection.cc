#include "outbox/pg/connection.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>

namespace outbox::pg {
namespace {

// libpq messages end with a newline and may span lines (DETAIL, HINT): one line for ours.
std::string OneLine(const char* message) {
  std::string line = message == nullptr ? "" : message;
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return line;
}

[[noreturn]] void ThrowResultError(PGconn* conn, const PGresult* result, std::string_view what) {
  const char* state = result == nullptr ? nullptr : PQresultErrorField(result, PG_DIAG_SQLSTATE);
  const char* primary = result == nullptr ? nullptr : PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY);
  std::string sqlstate = state == nullptr ? "" : state;
  std::string message = OneLine(primary != nullptr ? primary : PQerrorMessage(conn));
  if (sqlstate.empty()) {
    throw PgError(fmt::format("{}: {}", what, message), sqlstate, message);
  }
  throw PgError(fmt::format("{}: {} (SQLSTATE {})", what, message, sqlstate), sqlstate, message);
}

}  // namespace

bool IsPostgresUrl(std::string_view db) {
  return db.starts_with("postgresql://") || db.starts_with("postgres://");
}

std::string RedactPassword(std::string_view url) {
  const auto scheme = url.find("://");
  if (scheme == std::string_view::npos) return std::string(url);
  const auto authority_end = url.find_first_of("/?", scheme + 3);
  const auto at = url.rfind('@', authority_end);
  if (at == std::string_view::npos || at < scheme) return std::string(url);
  const auto colon = url.find(':', scheme + 3);
  if (colon == std::string_view::npos || colon > at) return std::string(url);
  return std::string(url.substr(0, colon)) + std::string(url.substr(at));
}

std::string Result::Text(int row, int column) const {
  return std::string(PQgetvalue(result_.get(), row, column),
                     static_cast<std::size_t>(PQgetlength(result_.get(), row, column)));
}

std::int64_t Result::Int(int row, int column) const {
  const char* text = PQgetvalue(result_.get(), row, column);
  const std::size_t length = static_cast<std::size_t>(PQgetlength(result_.get(), row, column));
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text, text + length, value);
  if (error != std::errc() || end != text + length) {
    throw PgError(fmt::format("column {} of row {} is not an integer: '{}'", column, row,
                              std::string_view(text, length)),
                  "");
  }
  return value;
}

std::string Result::Bytes(int row, int column) const {
  const auto* text = reinterpret_cast<const unsigned char*>(PQgetvalue(result_.get(), row, column));
  std::size_t length = 0;
  std::unique_ptr<unsigned char, decltype(&PQfreemem)> bytes(
      PQunescapeBytea(text, &length), [](void* p) { PQfreemem(p); });
  if (!bytes) throw PgError(fmt::format("decode bytea column {} of row {}: out of memory", column, row), "");
  return std::string(reinterpret_cast<const char*>(bytes.get()), length);
}

std::int64_t Result::Affected() const {
  const char* tuples = PQcmdTuples(result_.get());
  std::int64_t value = 0;
  std::from_chars(tuples, tuples + std::char_traits<char>::length(tuples), value);
  return value;
}

Connection::Connection(const std::string& url)
    : display_url_(RedactPassword(url)), conn_(PQconnectdb(url.c_str())) {
  if (!conn_) throw PgError(fmt::format("connect to '{}': out of memory", display_url_), "");
  if (PQstatus(conn_.get()) != CONNECTION_OK) {
    throw PgError(fmt::format("connect to '{}': {}", display_url_, OneLine(PQerrorMessage(conn_.get()))), "");
  }
  // Notices (e.g. "relation already exists, skipping") are not errors: keep them off stderr.
  PQsetNoticeProcessor(conn_.get(), [](void*, const char*) {}, nullptr);
}

bool Connection::ClosedWhileIdle() noexcept {
  // A caller's transaction holds this Connection by reference: never report it closed under
  // it, or the caller would reopen the session and run the rest of the transaction outside one.
  if (open_transactions_ > 0) return false;
  PGconn* conn = conn_.get();
  if (PQstatus(conn) != CONNECTION_OK) return true;
  if (PQtransactionStatus(conn) != PQTRANS_IDLE) return false;
  // A server that ends a session sends its FATAL ErrorResponse, then closes the socket. Idle,
  // libpq takes that message for a notice and keeps the connection OK, and sees the end only at
  // a read that finds nothing more: so peek, read what is there, and peek again (a few rounds:
  // a TLS session's close_notify is more bytes before the end).
  for (int round = 0; round < 8; ++round) {
    char byte;
    const ssize_t peeked = recv(PQsocket(conn), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (peeked == 0) return true;  // the peer closed it
    if (peeked < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    if (PQconsumeInput(conn) == 0 || PQstatus(conn) != CONNECTION_OK) return true;
  }
  return false;
}

void Connection::Exec(std::string_view sql, std::string_view what) {
  const std::string text(sql);
  // PQexec runs every statement of the string and returns the last one's result; an error stops
  // the rest, and its result is the one returned.
  Result result(PQexec(conn_.get(), text.c_str()));
  const auto status = PQresultStatus(result.get());
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    ThrowResultError(conn_.get(), result.get(), what);
  }
}

namespace {

// The three arrays PQexecParams and PQexecPrepared take for params (text or binary, NULL as a
// null pointer); they point into params, which must outlive them.
struct ParamArrays {
  explicit ParamArrays(const std::vector<Param>& params) {
    values.reserve(params.size());
    lengths.reserve(params.size());
    formats.reserve(params.size());
    for (const Param& param : params) {
      values.push_back(param.value ? param.value->data() : nullptr);
      lengths.push_back(param.value ? static_cast<int>(param.value->size()) : 0);
      formats.push_back(param.binary ? 1 : 0);
    }
  }
  int count() const { return static_cast<int>(values.size()); }
  std::vector<const char*> values;
  std::vector<int> lengths;
  std::vector<int> formats;
};

// result, when it is a command's or a query's success; otherwise throws PgError (ThrowResultError).
Result Checked(PGconn* conn, Result result, std::string_view what) {
  const auto status = PQresultStatus(result.get());
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK)
    ThrowResultError(conn, result.get(), what);
  return result;
}

}  // namespace

Result Connection::Query(std::string_view sql, const std::vector<Param>& params, std::string_view what) {
  const std::string text(sql);
  const ParamArrays arrays(params);
  // Parameter types are left to the server (nullptr): it infers them from the statement.
  return Checked(conn_.get(),
                 Result(PQexecParams(conn_.get(), text.c_str(), arrays.count(), nullptr,
                                     arrays.values.data(), arrays.lengths.data(),
                                     arrays.formats.data(), 0)),
                 what);
}

Result Connection::QueryPrepared(const std::string& sql, const std::vector<Param>& params,
                                 std::string_view what) {
  auto found = prepared_.find(sql);
  if (found == prepared_.end()) {
    const std::string name = fmt::format("outbox_{}", prepared_.size() + 1);
    // Parameter types are left to the server, as in Query.
    Result prepared(PQprepare(conn_.get(), name.c_str(), sql.c_str(),
                              static_cast<int>(params.size()), nullptr));
    if (PQresultStatus(prepared.get()) != PGRES_COMMAND_OK)
      ThrowResultError(conn_.get(), prepared.get(), what);
    found = prepared_.emplace(sql, name).first;
  }
  const ParamArrays arrays(params);
  const auto run = [&] {
    return Result(PQexecPrepared(conn_.get(), found->second.c_str(), arrays.count(),
                                 arrays.values.data(), arrays.lengths.data(),
                                 arrays.formats.data(), 0));
  };
  Result result = run();
  // 0A000 "cached plan must not change result type": a column the statement returns changed
  // type since the prepare (ALTER TABLE ... ALTER COLUMN ... TYPE, say text to varchar); the
  // server refuses the statement before it runs, and would every time. 26000: the server has no
  // statement of that name (a DEALLOCATE or DISCARD ALL on the session, or a failed prepare
  // below). Outside a transaction nothing ran and nothing is left to roll back: the statement is
  // prepared again under its name and run once more. Inside one (now aborted), the error is the
  // caller's; the next call outside one prepares again.
  const char* failed_state = PQresultErrorField(result.get(), PG_DIAG_SQLSTATE);
  const std::string_view state = failed_state != nullptr ? failed_state : "";
  if ((state == "0A000" || state == "26000") &&
      PQtransactionStatus(conn_.get()) == PQTRANS_IDLE) {
    if (state == "0A000") {
      Result deallocated(
          PQexec(conn_.get(), fmt::format("DEALLOCATE {}", found->second).c_str()));
      if (PQresultStatus(deallocated.get()) != PGRES_COMMAND_OK)
        ThrowResultError(conn_.get(), deallocated.get(), what);
    }
    Result prepared(PQprepare(conn_.get(), found->second.c_str(), sql.c_str(),
                              static_cast<int>(params.size()), nullptr));
    if (PQresultStatus(prepared.get()) != PGRES_COMMAND_OK)
      ThrowResultError(conn_.get(), prepared.get(), what);  // 26000 at the next call: again
    result = run();
  }
  return Checked(conn_.get(), std::move(result), what);
}

std::string Connection::QuoteIdentifier(std::string_view name) const {
  std::unique_ptr<char, decltype(&PQfreemem)> quoted(
      PQescapeIdentifier(conn_.get(), name.data(), name.size()), PQfreemem);
  if (!quoted)
    throw PgError(fmt::format("quote the identifier '{}': {}", name,
                              OneLine(PQerrorMessage(conn_.get()))),
                  "");
  return quoted.get();
}

std::int64_t Connection::QueryInt(std::string_view sql, const std::vector<Param>& params,
                                  std::string_view what) {
  Result result = Query(sql, params, what);
  if (result.rows() == 0 || result.IsNull(0, 0)) {
    throw PgError(fmt::format("{}: the query returned no value", what), "");
  }
  return result.Int(0, 0);
}

Transaction::Transaction(Connection& connection, Isolation isolation) : connection_(connection) {
  connection_.Exec(isolation == Isolation::kRepeatableRead ? "BEGIN ISOLATION LEVEL REPEATABLE READ"
                                                           : "BEGIN",
                   "begin a transaction");
  ++connection_.open_transactions_;
}

Transaction::~Transaction() {
  if (connection_.open_transactions_ > 0) --connection_.open_transactions_;
  if (done_) return;
  // Best effort: a broken connection has rolled back already, on the server's side.
  PQclear(PQexec(connection_.get(), "ROLLBACK"));
}

void Transaction::Commit() {
  done_ = true;
  // COMMIT of a transaction that already failed succeeds with the tag ROLLBACK: that is a failure.
  Result result(PQexec(connection_.get(), "COMMIT"));
  if (PQresultStatus(result.get()) != PGRES_COMMAND_OK) {
    ThrowResultError(connection_.get(), result.get(), "commit");
  }
  if (std::string_view(PQcmdStatus(result.get())) == "ROLLBACK") {
    throw PgError("commit: the transaction had failed and was rolled back", "25P02");
  }
}

}  // namespace outbox::pg
