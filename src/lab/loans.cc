#include "lab/loans.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "outbox/error.h"
#include "outbox/failpoint.h"

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
  {
    auto read = store->BeginRead();
    if (HasLoanTable(read.connection())) loans = CountLoans(read.connection());
  }
  const ResetCounts outbox = store->ResetSchema();
  if (removed) *removed = ResetRemoved{loans, outbox};
  auto txn = store->BeginWrite();
  txn.connection().Exec("DROP TABLE IF EXISTS business_loan");
  txn.connection().Exec(kLoanSchema);
  txn.Commit();
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

WrittenLoan WriteLoanWithEvent(Store& store, std::int64_t index, History* history,
                               std::int64_t loan_number) {
  const std::int64_t number = loan_number > 0 ? loan_number : index;
  WrittenLoan written{ChapterLoan(number, store.clock().EpochMs()), {}};
  written.event = LoanCreatedEvent(written.loan, index);
  NotePhase(history, "begin");
  Note(history, "invoke", "txn", written.event.event_id);
  try {
    auto txn = store.BeginWrite();
    // A later write of the same loan (a workload with shared aggregates) renews it.
    if (number != index && LoanExists(txn.connection(), written.loan.loan_id)) {
      RenewLoan(txn.connection(), written.loan.loan_id);
      written.loan.status = kRenewedStatus;
      written.event.event_type = "LoanRenewed";
    } else {
      InsertLoan(txn.connection(), written.loan);
    }
    store.Enqueue(txn, written.event);
    HitFailpoint("write.before_commit");
    txn.Commit();
  } catch (const std::exception& e) {
    Note(history, "fail", "txn", written.event.event_id, e.what());
    throw;
  }
  Note(history, "ok", "txn", written.event.event_id);
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

std::int64_t NextLoanIndex(Store& store) { return store.NextId(); }

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
