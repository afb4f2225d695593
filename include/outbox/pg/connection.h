// Thin RAII wrapper over libpq (PostgreSQL's C client): a connection, results, and scoped
// transactions. Owns every PGconn* and PGresult* it hands out. Values always travel as
// parameters ($1, $2, ...), never spliced into SQL text
// (https://www.postgresql.org/docs/15/libpq-exec.html, PQexecParams). Not thread-safe: one
// Connection per thread (https://www.postgresql.org/docs/15/libpq-threading.html).
#pragma once

#include <libpq-fe.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "outbox/error.h"

namespace outbox::pg {

// A libpq call or a statement failed. sqlstate() is the five-character SQLSTATE
// (https://www.postgresql.org/docs/15/errcodes-appendix.html), e.g. "40001" for a serialization
// failure, "55P03" lock_not_available, "57P01" admin_shutdown; empty when the failure had none
// (the connection itself broke). The message reads "<what>: <server message> (SQLSTATE x)" on
// one line, never the SQL text.
class PgError : public Error {
 public:
  // reason: the server's own words (its primary message), without what we did; empty means
  // the message is all there is.
  PgError(const std::string& message, std::string sqlstate, std::string reason = {})
      : Error(message), sqlstate_(std::move(sqlstate)), reason_(std::move(reason)) {}
  const std::string& sqlstate() const noexcept { return sqlstate_; }
  // The server's words, e.g. "duplicate key value violates unique constraint ..."; what() when
  // none were given.
  std::string reason() const { return reason_.empty() ? std::string(what()) : reason_; }
  // The connection is gone (server crash, restart, network): reconnect, then retry.
  bool connection_lost() const noexcept {
    return sqlstate_.empty() || sqlstate_.starts_with("08") || sqlstate_ == "57P01" ||
           sqlstate_ == "57P02" || sqlstate_ == "57P03";
  }

 private:
  std::string sqlstate_;
  std::string reason_;
};

struct ConnDeleter {
  void operator()(PGconn* conn) const noexcept { PQfinish(conn); }
};
struct ResultDeleter {
  void operator()(PGresult* result) const noexcept { PQclear(result); }
};

// A parameter: a text value, or NULL (nullopt). Bytes that are not valid in the server's
// encoding are rejected by the server for text columns (SQLSTATE 22021); send them as bytea
// through Param::Bytes, which the server stores unchanged.
struct Param {
  std::optional<std::string> value;
  bool binary = false;  // sent in binary format: the bytes of a bytea, unchanged

  static Param Text(std::string_view text) { return {std::string(text), false}; }
  static Param Int(std::int64_t number) { return {std::to_string(number), false}; }
  static Param Bytes(std::string_view bytes) { return {std::string(bytes), true}; }
  static Param Null() { return {std::nullopt, false}; }
};

// The rows of one statement. Columns are read by index; every value arrives in text format except
// bytea columns, which Bytes() decodes from the server's hex output.
class Result {
 public:
  explicit Result(PGresult* result) : result_(result) {}

  int rows() const noexcept { return PQntuples(result_.get()); }
  bool IsNull(int row, int column) const noexcept { return PQgetisnull(result_.get(), row, column); }
  std::string Text(int row, int column) const;
  // Throws PgError when the value is not an integer (a schema mismatch, never a row's content).
  std::int64_t Int(int row, int column) const;
  // A bytea column's bytes (hex output format, the default since 9.0).
  std::string Bytes(int row, int column) const;
  // Rows changed by an INSERT, UPDATE or DELETE (PQcmdTuples); 0 for other statements.
  std::int64_t Affected() const;

  PGresult* get() const noexcept { return result_.get(); }

 private:
  std::unique_ptr<PGresult, ResultDeleter> result_;
};

class Connection {
 public:
  // Connects with a URL or key=value string (postgresql://user@host:port/db?options=...).
  // Throws PgError "connect to '<url without password>': <libpq message>" when the server is
  // unreachable, refuses, or the database does not exist.
  explicit Connection(const std::string& url);

  // Runs SQL without parameters (one or more statements, e.g. DDL). Throws PgError.
  void Exec(std::string_view sql, std::string_view what);
  // Runs one statement with parameters. `what` names the operation for the error message
  // ("claim a batch"). Throws PgError on any error the server reports.
  Result Query(std::string_view sql, const std::vector<Param>& params, std::string_view what);
  // The same as Query, but the statement is parsed and prepared once per connection (PQprepare,
  // a named statement "outbox_N") and each later call with the same sql only binds and runs it
  // (PQexecPrepared): no parse, analysis or planning per call. For the relay's statements that
  // run once per batch. After five runs the server may keep one generic plan for every later
  // run when it costs no more than the custom ones
  // (https://www.postgresql.org/docs/15/sql-prepare.html, plan_cache_mode). A table dropped and
  // created again (reset) is analysed again at the next run, by the server. Throws PgError, from
  // the prepare too; a failed prepare is not remembered, so the next call prepares again. Outside
  // a transaction, a statement the server refuses before running it because a column it returns
  // changed type (SQLSTATE 0A000, ALTER TABLE ... ALTER COLUMN ... TYPE) or because the session
  // no longer has it (26000, DEALLOCATE or DISCARD ALL) is prepared again and run once more;
  // inside one, that error is thrown and the next call outside one prepares again. Not for
  // a pooler that hands one client several server sessions (PgBouncer's transaction mode before
  // 1.21 keeps no named statements).
  Result QueryPrepared(const std::string& sql, const std::vector<Param>& params,
                       std::string_view what);
  // One integer from the first column of the first row. Throws PgError when there is no row.
  std::int64_t QueryInt(std::string_view sql, const std::vector<Param>& params, std::string_view what);

  // name quoted as an SQL identifier for this connection (libpq's PQescapeIdentifier: double
  // quotes around it, each double quote doubled), for a name from the catalog or the user that
  // a statement cannot take as a parameter. Throws PgError when libpq refuses it (say, bytes
  // that are not valid in the connection's encoding).
  std::string QuoteIdentifier(std::string_view name) const;

  // True when the session is known to be gone while no transaction is open on it: the server, a
  // pooler or a proxy ended it while it sat idle (idle_session_timeout, SQLSTATE 57P05;
  // PgBouncer's client_idle_timeout; pg_terminate_backend; a server restart between two calls),
  // or an earlier call found it broken. The server sends its FATAL ErrorResponse, then closes
  // the socket (https://www.postgresql.org/docs/15/runtime-config-client.html,
  // idle_session_timeout); this reads what arrived without blocking (a recv(2) with MSG_PEEK,
  // then PQconsumeInput, https://www.postgresql.org/docs/15/libpq-async.html), so it costs one
  // recv(2) when the session is alive, and data that is not an error (a notification) stays
  // for its reader. False while a pg::Transaction is open on this connection or the server
  // reports one: that transaction's next statement then fails as it would have, and its
  // caller decides. A session ended after the look (as the next statement is sent) is not seen
  // either, nor a peer that vanished without closing the socket (a NAT that drops its entry
  // silently). Never throws.
  bool ClosedWhileIdle() noexcept;

  // The URL it connected with, the password removed (for messages).
  const std::string& display_url() const noexcept { return display_url_; }
  PGconn* get() const noexcept { return conn_.get(); }

 private:
  std::string display_url_;
  std::unique_ptr<PGconn, ConnDeleter> conn_;
  std::unordered_map<std::string, std::string> prepared_;  // sql -> its statement's name
  int open_transactions_ = 0;  // pg::Transaction objects alive on it (ClosedWhileIdle)
  friend class Transaction;
};

// A scoped transaction: BEGIN (READ COMMITTED, PostgreSQL's default, or REPEATABLE READ), COMMIT on Commit(),
// ROLLBACK in the destructor otherwise. A kill -9 of the client runs no destructor; the server
// then rolls back the open transaction when it sees the connection close.
// https://www.postgresql.org/docs/15/transaction-iso.html
enum class Isolation {
  kReadCommitted,   // each statement sees the commits before it began (PostgreSQL's default)
  kRepeatableRead,  // every statement sees the snapshot of the transaction's first statement
};

class Transaction {
 public:
  // Throws PgError when BEGIN fails (the connection is gone).
  explicit Transaction(Connection& connection, Isolation isolation = Isolation::kReadCommitted);
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();

  // Throws PgError; after a failed COMMIT the transaction is over (the server rolled it back).
  void Commit();
  Connection& connection() noexcept { return connection_; }

 private:
  Connection& connection_;
  bool done_ = false;
};

// "postgresql://" or "postgres://" (a libpq URL): the --db value names a PostgreSQL server.
bool IsPostgresUrl(std::string_view db);

// The URL without its password (user:secret@ -> user@), for messages and logs.
std::string RedactPassword(std::string_view url);

}  // namespace outbox::pg
