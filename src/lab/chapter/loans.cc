#include "lab/chapter/loans.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <sqlite3.h>

#include <cctype>

#include "outbox/error.h"
#include "outbox/failpoint.h"
#include "outbox/open_store.h"
#include "outbox/pg/connection.h"
#include "outbox/sqlite/connection.h"

namespace outbox::lab {
namespace {

constexpr const char* kRenewedStatus = "RENEWED";

constexpr const char* kLoanSchema = R"sql(
CREATE TABLE business_loan (
  loan_id    TEXT    PRIMARY KEY,
  book_id    TEXT    NOT NULL,
  member_id  TEXT    NOT NULL,
  status     TEXT    NOT NULL,
  created_at INTEGER NOT NULL
);
)sql";

// The same table in PostgreSQL's types.
constexpr const char* kPgLoanSchema = R"sql(
CREATE TABLE business_loan (
  loan_id    TEXT   PRIMARY KEY,
  book_id    TEXT   NOT NULL,
  member_id  TEXT   NOT NULL,
  status     TEXT   NOT NULL,
  created_at BIGINT NOT NULL
);
)sql";

}  // namespace

void InsertLoan(pg::Connection& connection, const Loan& loan) {
  connection.Query(
      "INSERT INTO business_loan(loan_id, book_id, member_id, status, created_at) "
      "VALUES($1, $2, $3, $4, $5)",
      {pg::Param::Text(loan.loan_id), pg::Param::Text(loan.book_id),
       pg::Param::Text(loan.member_id), pg::Param::Text(loan.status),
       pg::Param::Int(loan.created_at_ms)},
      fmt::format("insert loan '{}'", loan.loan_id));
}

namespace {

void RenewLoan(pg::Connection& connection, const std::string& loan_id) {
  connection.Query("UPDATE business_loan SET status = $2 WHERE loan_id = $1",
                   {pg::Param::Text(loan_id), pg::Param::Text(kRenewedStatus)},
                   fmt::format("renew loan '{}'", loan_id));
}

bool LoanExists(pg::Connection& connection, const std::string& loan_id) {
  return connection.QueryInt("SELECT COUNT(*) FROM business_loan WHERE loan_id = $1",
                             {pg::Param::Text(loan_id)}, "look for a loan") > 0;
}

// The backend's own store: backend() tells which class it is.
Store* AsSqlite(OutboxStore& store) {
  return store.backend() == Backend::kSqlite ? static_cast<Store*>(&store) : nullptr;
}
PgStore& AsPostgres(OutboxStore& store) { return static_cast<PgStore&>(store); }

bool HasLoanTable(sqlite::Connection& connection) {
  return connection.QueryInt64(
             "SELECT COUNT(*) FROM sqlite_master WHERE type='table' AND name='business_loan'") == 1;
}

// Whether the file has an outbox table and no business_loan table, looked at
// read-only before a Store opens it, so a database that cannot be the lab's is
// refused before the Store migrates its outbox table. False when the file
// cannot be read here: the Store then says why.
bool LacksOnlyLoanTable(const std::string& path) {
  try {
    sqlite::Connection look(path, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX);
    const bool has_outbox =
        look.QueryInt64(
            "SELECT COUNT(*) FROM sqlite_master WHERE type='table' AND name='outbox'") == 1;
    return has_outbox && !HasLoanTable(look);
  } catch (const DbError&) {
    return false;
  }
}

}  // namespace

std::unique_ptr<Store> OpenLabDatabase(const std::string& path, const StoreOptions& options,
                                       OpenMode mode) {
  if (mode == OpenMode::kCreate)
    throw ConfigError(fmt::format("open database '{}': OpenLabDatabase never creates; use "
                                  "ResetLabDatabase", path));
  if (LacksOnlyLoanTable(path))
    throw SchemaMissingError(fmt::format("open database '{}': no business_loan table", path));
  auto store = std::make_unique<Store>(path, options, mode);
  bool has_loans = false;
  {
    auto txn = store->BeginRead();
    has_loans = HasLoanTable(txn.connection());
  }
  if (!has_loans)
    throw SchemaMissingError(fmt::format(
        "open database '{}': no business_loan table", path));
  return store;
}

std::unique_ptr<Store> ResetLabDatabase(const std::string& path, const StoreOptions& options,
                                        ResetRemoved* removed) {
  auto store = std::make_unique<Store>(path, options, OpenMode::kCreate);
  std::int64_t loans = 0;
  // In the outbox's reset transaction, counted there too. Dropped and created in a transaction
  // of its own after the outbox's, a `write` that waited for the lock took its turn between the
  // two (Connection::EnableWriterTurns): its loan went into the old table, dropped next, and its
  // event into the new outbox, an event without its business row.
  const ResetCounts outbox = store->ResetSchema([&loans](sqlite::Connection& connection) {
    if (HasLoanTable(connection)) loans = CountLoans(connection);
    connection.Exec("DROP TABLE IF EXISTS business_loan");
    connection.Exec(kLoanSchema);
  });
  if (removed) *removed = ResetRemoved{loans, outbox};
  return store;
}

Loan ChapterLoan(std::int64_t index, std::int64_t created_at_ms) {
  return Loan{fmt::format("L-{}", 1000 + index), fmt::format("B-{}", 100 + index), "M-1",
              "BORROWED", created_at_ms};
}

OutboxEvent LoanCreatedEvent(const Loan& loan, std::int64_t index) {
  nlohmann::ordered_json payload;
  const std::string event_id = fmt::format("evt-{}", 1000 + index);
  payload["eventId"] = event_id;
  payload["loanId"] = loan.loan_id;
  payload["bookId"] = loan.book_id;
  return OutboxEvent{event_id, loan.loan_id, "LoanCreated", payload.dump(), loan.created_at_ms};
}

std::unique_ptr<OutboxStore> OpenLabStore(const std::string& db, const StoreOptions& options,
                                          OpenMode mode) {
  if (StoreBackend(db) == Backend::kSqlite) return OpenLabDatabase(db, options, mode);
  {
    // Look before PgStore's constructor would create the outbox tables.
    pg::Connection probe(db);
    RequirePostgresOutbox(probe);
    if (probe.QueryInt("SELECT (to_regclass('business_loan') IS NOT NULL)::int", {},
                       "look for the lab schema") != 1)
      throw SchemaMissingError(fmt::format("open database '{}': no business_loan table",
                                           probe.display_url()));
  }
  return std::make_unique<PgStore>(db, options.clock);
}

std::unique_ptr<OutboxStore> ResetLabStore(const std::string& db, const StoreOptions& options,
                                           ResetRemoved* removed) {
  if (StoreBackend(db) == Backend::kSqlite) return ResetLabDatabase(db, options, removed);
  auto store = std::make_unique<PgStore>(db, options.clock);
  std::int64_t loans = 0;
  // In the outbox's reset transaction: a `write` running meanwhile waits for it and goes on
  // with both tables new, never between a dropped and a created one.
  const ResetCounts outbox = store->ResetSchema([&loans](pg::Connection& connection) {
    if (connection.QueryInt("SELECT (to_regclass('business_loan') IS NOT NULL)::int", {},
                            "look for the business table") == 1) {
      // Locked before the count: a writer's transaction open now commits first, and none starts
      // after, so the loans counted are the ones dropped, as the outbox rows counted are.
      connection.Exec("LOCK TABLE business_loan IN ACCESS EXCLUSIVE MODE",
                      "lock the business table");
      loans = connection.QueryInt("SELECT COUNT(*) FROM business_loan", {}, "count the loans");
    }
    connection.Exec("DROP TABLE IF EXISTS business_loan", "drop the business table");
    connection.Exec(kPgLoanSchema, "create the business table");
  });
  if (removed) *removed = ResetRemoved{loans, outbox};
  return store;
}

bool InsertLoanWithoutEvent(OutboxStore& store, const Loan& loan) {
  if (Store* sqlite = AsSqlite(store)) {
    auto txn = sqlite->BeginWrite();
    if (LoanExists(txn.connection(), loan.loan_id)) return false;
    InsertLoan(txn.connection(), loan);
    txn.Commit();
    return true;
  }
  auto txn = AsPostgres(store).BeginWrite();
  if (LoanExists(txn.connection(), loan.loan_id)) return false;
  InsertLoan(txn.connection(), loan);
  txn.Commit();
  return true;
}

std::string InsertLoanWithCollidingEvent(OutboxStore& store, const Loan& loan,
                                         const OutboxEvent& event) {
  // No Commit() on either path: the destructor rolls the loan back too.
  if (Store* sqlite = AsSqlite(store)) {
    auto txn = sqlite->BeginWrite();
    InsertLoan(txn.connection(), loan);
    try {
      sqlite->Enqueue(txn, event);
    } catch (const DbError& e) {
      // SQLite's words and code, not the statement: the lesson is the constraint.
      return fmt::format("{} ({})", e.reason(), sqlite::ResultCodeName(e.code()));
    }
    return {};
  }
  PgStore& pg_store = AsPostgres(store);
  auto txn = pg_store.BeginWrite();
  InsertLoan(txn.connection(), loan);
  try {
    pg_store.Enqueue(txn, event);
  } catch (const pg::PgError& e) {
    if (e.sqlstate() != "23505") throw;  // unique_violation
    return fmt::format("{} (SQLSTATE {})", e.reason(), e.sqlstate());
  }
  return {};
}

bool LoanExists(OutboxStore& store, const std::string& loan_id) {
  if (Store* sqlite = AsSqlite(store)) {
    auto txn = sqlite->BeginRead();
    return LoanExists(txn.connection(), loan_id);
  }
  auto txn = AsPostgres(store).BeginRead();
  const bool exists = LoanExists(txn.connection(), loan_id);
  txn.Commit();
  return exists;
}

std::int64_t CountLoans(OutboxStore& store) {
  if (Store* sqlite = AsSqlite(store)) {
    auto txn = sqlite->BeginRead();
    return CountLoans(txn.connection());
  }
  auto txn = AsPostgres(store).BeginRead();
  const std::int64_t count =
      txn.connection().QueryInt("SELECT COUNT(*) FROM business_loan", {}, "count the loans");
  txn.Commit();
  return count;
}

namespace {

bool IsIdentifier(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (const char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

// "schema"."table" or "table", for SQL text: both databases quote identifiers with '"'.
std::string QuotedTable(const std::string& table) {
  const std::size_t dot = table.find('.');
  if (dot == std::string::npos) return '"' + table + '"';
  return '"' + table.substr(0, dot) + "\".\"" + table.substr(dot + 1) + '"';
}

std::string KeysSql(const BusinessTable& business) {
  return fmt::format("SELECT CAST(\"{}\" AS TEXT) FROM {} WHERE \"{}\" IS NOT NULL ORDER BY 1",
                     business.key, QuotedTable(business.table), business.key);
}

std::vector<std::string> BusinessKeys(sqlite::Connection& connection, const BusinessTable& business) {
  std::vector<std::string> ids;
  auto select = connection.Prepare(KeysSql(business));
  while (select.Step()) ids.push_back(select.ColumnText(0));
  return ids;
}

std::vector<std::string> BusinessKeys(pg::Connection& connection, const BusinessTable& business) {
  const pg::Result rows = connection.Query(
      KeysSql(business), {}, fmt::format("read the keys of business table {}", business.table));
  std::vector<std::string> ids;
  for (int i = 0; i < rows.rows(); ++i) ids.push_back(rows.Text(i, 0));
  return ids;
}

template <typename Connection>
void ReadBusinessRows(Connection& connection, const BusinessTable* business, LabSnapshot& snapshot) {
  if (business) {
    snapshot.business_table = business->table;
    snapshot.loan_ids = BusinessKeys(connection, *business);
    return;
  }
  snapshot.loan_ids = BusinessKeys(connection, BusinessTable{"business_loan", "loan_id"});
  snapshot.atomicity_skipped = snapshot.loan_ids.empty() && !snapshot.outbox.rows.empty();
}

}  // namespace

void RequireBusinessTable(const BusinessTable& business) {
  const std::size_t dot = business.table.find('.');
  const bool table_ok =
      dot == std::string::npos
          ? IsIdentifier(business.table)
          : IsIdentifier(business.table.substr(0, dot)) && IsIdentifier(business.table.substr(dot + 1));
  if (!table_ok)
    throw ConfigError(fmt::format("--business-table '{}': expected a table name (letters, digits, "
                                  "'_'; schema.table allowed)",
                                  business.table));
  if (!IsIdentifier(business.key))
    throw ConfigError(fmt::format("--business-key '{}': expected a column name (letters, digits, "
                                  "'_')",
                                  business.key));
}

LabSnapshot ReadLabSnapshot(OutboxStore& store, const BusinessTable* business) {
  if (business) RequireBusinessTable(*business);
  LabSnapshot snapshot;
  if (Store* sqlite = AsSqlite(store)) {
    auto txn = sqlite->BeginRead();
    snapshot.outbox = sqlite->Snapshot(txn);
    ReadBusinessRows(txn.connection(), business, snapshot);
    return snapshot;
  }
  PgStore& pg_store = AsPostgres(store);
  auto txn = pg_store.BeginRead();
  snapshot.outbox = pg_store.Snapshot(txn);
  ReadBusinessRows(txn.connection(), business, snapshot);
  txn.Commit();
  return snapshot;
}

WrittenLoan WriteLoanWithEvent(OutboxStore& store, std::int64_t index, History* history,
                               std::int64_t loan_number, std::int64_t delay_ms) {
  return WriteLoansWithEvents(store, {{index, loan_number}}, history, delay_ms).front();
}

std::vector<WrittenLoan> WriteLoansWithEvents(OutboxStore& store,
                                              const std::vector<LoanToWrite>& loans,
                                              History* history, std::int64_t delay_ms) {
  if (loans.empty()) return {};
  std::vector<WrittenLoan> written;
  written.reserve(loans.size());
  for (const LoanToWrite& next : loans) {
    const std::int64_t number = next.loan_number > 0 ? next.loan_number : next.index;
    WrittenLoan loan{ChapterLoan(number, store.clock().EpochMs()), {}};
    loan.event = LoanCreatedEvent(loan.loan, next.index);
    loan.event.delay_ms = delay_ms;
    written.push_back(std::move(loan));
  }
  NotePhase(history, "begin");
  for (const WrittenLoan& w : written) Note(history, "invoke", "txn", w.event.event_id);
  bool committing = false;
  const auto note_all = [&](const char* type, const std::string& error) {
    for (const WrittenLoan& w : written) Note(history, type, "txn", w.event.event_id, error);
  };
  try {
    // One body for both backends: the transaction types differ, the steps do not.
    const auto write = [&](auto& backend_store) {
      auto txn = backend_store.BeginWrite();
      for (std::size_t i = 0; i < written.size(); ++i) {
        WrittenLoan& w = written[i];
        const bool own_loan = loans[i].loan_number <= 0 || loans[i].loan_number == loans[i].index;
        // A later write of the same loan (a workload with shared aggregates) renews it; an
        // earlier loan of this same transaction counts, as it would one commit earlier.
        if (!own_loan && LoanExists(txn.connection(), w.loan.loan_id)) {
          RenewLoan(txn.connection(), w.loan.loan_id);
          w.loan.status = kRenewedStatus;
          w.event.event_type = "LoanRenewed";
        } else {
          InsertLoan(txn.connection(), w.loan);
        }
        backend_store.Enqueue(txn, w.event);
      }
      HitFailpoint("write.before_commit");
      committing = true;
      txn.Commit();
    };
    if (Store* sqlite = AsSqlite(store)) write(*sqlite);
    else write(AsPostgres(store));
  } catch (const pg::PgError& e) {
    // A COMMIT whose connection died has an unknown outcome: the server may have made it
    // durable before it went (a server crashed while the writer waited on its fsync often
    // has). Jepsen's "info", indeterminate; "fail" would make its published event a phantom.
    // A connection lost before the COMMIT was sent rolled the transaction back: "fail".
    note_all(committing && e.connection_lost() ? "info" : "fail", e.what());
    throw;
  } catch (const std::exception& e) {
    note_all("fail", e.what());
    throw;
  }
  note_all("ok", "");
  NotePhase(history, "commit");
  HitFailpoint("write.after_commit");
  return written;
}

void RenewLoan(sqlite::Connection& connection, const std::string& loan_id) {
  auto update = connection.Prepare("UPDATE business_loan SET status = ?2 WHERE loan_id = ?1");
  update.Bind(1, loan_id).Bind(2, kRenewedStatus).Run();
}

void InsertLoan(sqlite::Connection& connection, const Loan& loan) {
  auto insert = connection.Prepare(
      "INSERT INTO business_loan(loan_id, book_id, member_id, status, created_at) "
      "VALUES(?1, ?2, ?3, ?4, ?5)");
  insert.Bind(1, loan.loan_id)
      .Bind(2, loan.book_id)
      .Bind(3, loan.member_id)
      .Bind(4, loan.status)
      .Bind(5, loan.created_at_ms)
      .Run();
}

std::int64_t NextLoanIndex(OutboxStore& store) { return store.NextId(); }

bool IsUniqueViolation(const std::exception& e) {
  if (const auto* db = dynamic_cast<const DbError*>(&e))
    return db->primary_code() == SQLITE_CONSTRAINT;
  if (const auto* pg = dynamic_cast<const pg::PgError*>(&e)) return pg->sqlstate() == "23505";
  return false;
}

bool IsDeadlockOrSerialization(const std::exception& e) {
  const auto* pg = dynamic_cast<const pg::PgError*>(&e);
  return pg != nullptr && (pg->sqlstate() == "40P01" || pg->sqlstate() == "40001");
}

bool LoanExists(sqlite::Connection& connection, const std::string& loan_id) {
  auto select = connection.Prepare("SELECT COUNT(*) FROM business_loan WHERE loan_id = ?1");
  select.Bind(1, loan_id);
  select.Step();
  return select.ColumnInt64(0) > 0;
}

std::int64_t CountLoans(sqlite::Connection& connection) {
  return connection.QueryInt64("SELECT COUNT(*) FROM business_loan");
}

std::vector<std::string> LoanIds(sqlite::Connection& connection) {
  std::vector<std::string> ids;
  auto select = connection.Prepare("SELECT loan_id FROM business_loan ORDER BY loan_id");
  while (select.Step()) ids.push_back(select.ColumnText(0));
  return ids;
}

}  // namespace outbox::lab
