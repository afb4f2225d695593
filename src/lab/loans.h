// The chapter's business workload: loans (table business_loan) written in the
// same local transaction as their LoanCreated outbox event (chapter 7.1).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lab/history.h"
#include "outbox/event.h"
#include "outbox/store.h"

namespace outbox::lab {

struct Loan {
  std::string loan_id;
  std::string book_id;
  std::string member_id;
  std::string status;
  std::int64_t created_at_ms = 0;  // epoch ms
};

// Opens the lab database: the file must exist with both business_loan and
// outbox tables. mode is kExisting (the command writes) or kReadOnly (it only
// reads: works on read-only media, see Store). Throws SchemaMissingError ("run
// reset first") otherwise, having created and changed nothing; DbError as Store does.
std::unique_ptr<Store> OpenLabDatabase(const std::string& path, const StoreOptions& options,
                                       OpenMode mode = OpenMode::kExisting);

// What a reset removed: business_loan rows, and the outbox's (Store::ResetSchema).
struct ResetRemoved {
  std::int64_t loans = 0;
  ResetCounts outbox;
};

// reset: creates parent directories and the file, then drops and recreates
// both tables (whatever tables carry those names). When removed is given, it
// receives what was dropped. Throws DbError (SQLITE_NOTADB for a file that is
// not SQLite: it is never overwritten).
std::unique_ptr<Store> ResetLabDatabase(const std::string& path, const StoreOptions& options,
                                        ResetRemoved* removed = nullptr);

// The chapter's i-th loan (i >= 1): L-(1000+i), book B-(100+i), created at
// created_at_ms (epoch ms, e.g. Store::clock().EpochMs()).
Loan ChapterLoan(std::int64_t index, std::int64_t created_at_ms);
// Its event: evt-(1000+i), type LoanCreated, payload
// {"eventId":"evt-1001","loanId":"L-1001","bookId":"B-101"} (chapter's order of keys).
OutboxEvent LoanCreatedEvent(const Loan& loan, std::int64_t index);

struct WrittenLoan {
  Loan loan;
  OutboxEvent event;
};

// The chapter's business transaction for the index-th loan: the loan and its
// LoanCreated event in one BEGIN IMMEDIATE transaction, with failpoints
// write.before_commit and write.after_commit. Throws DbError (nothing of the
// loan is committed then) or FailpointError.
// created_at is store.clock().EpochMs().
// history (may be null) gets a "begin" phase and an invoke before BEGIN, ok/fail
// after, and a "commit" phase after the commit (History::RecordPhase).
// loan_number (>= 1, lab/workload.h) picks the loan, the event's aggregate;
// 0 means index (every event its own loan). When it differs from index and
// that loan exists, the transaction renews it (status RENEWED) and the event
// is LoanRenewed, with event id evt-(1000+index) all the same.
WrittenLoan WriteLoanWithEvent(Store& store, std::int64_t index, History* history = nullptr,
                               std::int64_t loan_number = 0);

// The lab's own SQL on business_loan: call with the connection of a
// transaction from Store::BeginWrite() (InsertLoan) or Store::BeginRead().

// Inserts loan. Call inside a transaction from Store::BeginWrite(). Throws DbError
// (SQLITE_CONSTRAINT_PRIMARYKEY when loan_id exists).
void InsertLoan(sqlite::Connection& connection, const Loan& loan);

// The next chapter index for write/write-hold: Store::NextId(), one past the
// highest outbox id ever assigned, so numbering continues after earlier runs,
// killed ones and purges alike. Throws DbError.
std::int64_t NextLoanIndex(Store& store);

// Sets the loan's status to RENEWED. Call inside a transaction from
// Store::BeginWrite(). Throws DbError. A loan that does not exist is left alone.
void RenewLoan(sqlite::Connection& connection, const std::string& loan_id);

bool LoanExists(sqlite::Connection& connection, const std::string& loan_id);
std::int64_t CountLoans(sqlite::Connection& connection);
// Every loan id, sorted. Throws DbError.
std::vector<std::string> LoanIds(sqlite::Connection& connection);

}  // namespace outbox::lab
