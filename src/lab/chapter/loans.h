// The chapter's business workload: loans (table business_loan) written in the
// same local transaction as their LoanCreated outbox event (chapter 7.1).
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "lab/chapter/history.h"
#include "outbox/event.h"
#include "outbox/outbox_store.h"
#include "outbox/pg_store.h"
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

// What a reset removed: business_loan rows, and the outbox's (Store::ResetSchema or
// PgStore::ResetSchema).
struct ResetRemoved {
  std::int64_t loans = 0;
  ResetCounts outbox;
};

// OpenLabDatabase for either backend (StoreBackend, outbox/open_store.h: ConfigError for another
// URL scheme): the outbox and the business_loan table must both exist.
// On PostgreSQL the tables are looked for before anything is created: throws
// SchemaMissingError ("no business_loan table"), having created nothing, when reset never ran
// there; pg::PgError when the server cannot be reached. kReadOnly changes nothing on
// PostgreSQL: the commands that pass it only read.
std::unique_ptr<OutboxStore> OpenLabStore(const std::string& db, const StoreOptions& options,
                                          OpenMode mode = OpenMode::kExisting);

// ResetLabDatabase for either backend (StoreBackend, as OpenLabStore). On PostgreSQL: drops and recreates the outbox tables
// (PgStore::ResetSchema) and business_loan in the URL's database and search_path schema, which
// must exist. When removed is given, it receives what was dropped (on PostgreSQL too: counted
// in the reset's transactions). Throws DbError or pg::PgError.
std::unique_ptr<OutboxStore> ResetLabStore(const std::string& db, const StoreOptions& options,
                                           ResetRemoved* removed = nullptr);

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
// Either backend: on PostgreSQL one READ COMMITTED transaction, the loan and the event's row
// commit together (pg::PgError instead of DbError). A pg::PgError with connection_lost() from
// the COMMIT itself (a server crash) leaves the outcome unknown, the loan possibly committed:
// history gets "info" for it instead of "fail" (Jepsen's indeterminate).
// loan_number (>= 1, lab/chapter/workload.h) picks the loan, the event's aggregate;
// 0 means index (every event its own loan). When it differs from index and
// that loan exists, the transaction renews it (status RENEWED) and the event
// is LoanRenewed, with event id evt-(1000+index) all the same.
// delay_ms > 0 delays the event's publish (OutboxEvent::delay_ms: not_before = the database's
// clock at the INSERT + delay_ms, at most kMaxDelayMs).
WrittenLoan WriteLoanWithEvent(OutboxStore& store, std::int64_t index, History* history = nullptr,
                               std::int64_t loan_number = 0, std::int64_t delay_ms = 0);

// One loan of a batched write: its index (event id evt-(1000+index)) and loan_number as for
// WriteLoanWithEvent.
struct LoanToWrite {
  std::int64_t index = 0;
  std::int64_t loan_number = 0;
};
// `write --batch N`: the loans, in order, in ONE transaction: each still its business row (or
// renewal) and its own outbox row with the same event id as WriteLoanWithEvent would give it, so
// the rows committed are the same as those of one transaction per loan; only the commits (and
// fsyncs) are fewer. A loan renewed by a later one of the same batch sees the earlier insert, as
// it would one commit later. The failpoints write.before_commit and write.after_commit are hit
// once per transaction; history gets one "begin" and "commit" phase and an invoke and an
// ok/fail/info per event. All or none of the batch commits. Returns the loans written, in order;
// nothing for an empty list. Throws as WriteLoanWithEvent (nothing of the batch committed then,
// or, on a lost connection during COMMIT, an unknown outcome for the whole batch). delay_ms as
// for WriteLoanWithEvent, for every loan of the batch.
std::vector<WrittenLoan> WriteLoansWithEvents(OutboxStore& store,
                                              const std::vector<LoanToWrite>& loans,
                                              History* history = nullptr,
                                              std::int64_t delay_ms = 0);

// naive-hold's dual write done wrong: commits loan alone, with no outbox row. Returns false, having
// written nothing, when the loan exists already. Throws DbError or pg::PgError.
bool InsertLoanWithoutEvent(OutboxStore& store, const Loan& loan);

// rollback's shared fate: inserts loan, then event, in ONE transaction that is never committed.
// Returns the enqueue's error when event_id collides with an existing row (a unique violation;
// SQLite: its words and result code, without the statement; PostgreSQL: the server's message),
// or empty when the enqueue unexpectedly succeeded; the transaction is rolled back either way.
// Throws DbError or pg::PgError for any other failure.
std::string InsertLoanWithCollidingEvent(OutboxStore& store, const Loan& loan,
                                         const OutboxEvent& event);

// Either backend, each in a transaction of its own. Throw DbError or pg::PgError.
bool LoanExists(OutboxStore& store, const std::string& loan_id);
std::int64_t CountLoans(OutboxStore& store);

// The business table whose rows the outbox's events are about: each row's key is an aggregate
// id. The lab's own is business_loan keyed by loan_id; an application names its own
// (check/verify --business-table orders --business-key id).
struct BusinessTable {
  std::string table;  // [A-Za-z_][A-Za-z0-9_]*, optionally schema-qualified (one dot)
  std::string key;    // a column of table, read as text
};

// Throws ConfigError unless table and key are plain SQL identifiers (letters, digits, '_', not
// starting with a digit; table may be schema.table): they are quoted into SQL, never bound.
void RequireBusinessTable(const BusinessTable& business);

// The loans (or the named business table's keys) and the outbox rows of one instant (one read
// transaction; REPEATABLE READ on PostgreSQL), for reconciliation and the checker.
// business: null for the lab's business_loan. Throws DbError or pg::PgError (e.g. no such
// table or column), ConfigError for a bad business table name.
struct LabSnapshot {
  std::vector<std::string> loan_ids;  // the business rows' keys, sorted
  OutboxSnapshot outbox;
  // No business table was named and business_loan is empty while the outbox has rows: the
  // events come from another application, whose business rows the lab cannot find, so the
  // checker judges the outbox against Kafka only and says it skipped atomicity.
  bool atomicity_skipped = false;
  std::string business_table = "business_loan";  // the table read
};
LabSnapshot ReadLabSnapshot(OutboxStore& store, const BusinessTable* business = nullptr);

// The lab's own SQL on business_loan: call with the connection of a
// transaction from Store::BeginWrite() (InsertLoan) or Store::BeginRead().

// Inserts loan. Call inside a transaction from Store::BeginWrite(). Throws DbError
// (SQLITE_CONSTRAINT_PRIMARYKEY when loan_id exists).
void InsertLoan(sqlite::Connection& connection, const Loan& loan);
// The same on PostgreSQL: call with the connection of a transaction from PgStore::BeginWrite().
// Throws pg::PgError (SQLSTATE 23505 when loan_id exists).
void InsertLoan(pg::Connection& connection, const Loan& loan);

// The next chapter index for write/write-hold: Store::NextId(), one past the
// highest outbox id ever assigned, so numbering continues after earlier runs,
// killed ones and purges alike. Throws DbError.
std::int64_t NextLoanIndex(OutboxStore& store);

// Whether e is a write that failed on a unique key (a loan id or an event id: SQLite's
// SQLITE_CONSTRAINT, PostgreSQL's SQLSTATE 23505), as when another `write` on the same database
// took the indexes this one read at its start; nothing of that transaction committed.
bool IsUniqueViolation(const std::exception& e);

// Whether e is a PostgreSQL transaction the server rolled back to break a deadlock (SQLSTATE
// 40P01) or a serialization failure (40001): nothing of it committed, and the same transaction
// may simply run again (two writers renewing the same loans in another order).
bool IsDeadlockOrSerialization(const std::exception& e);

// Sets the loan's status to RENEWED. Call inside a transaction from
// Store::BeginWrite(). Throws DbError. A loan that does not exist is left alone.
void RenewLoan(sqlite::Connection& connection, const std::string& loan_id);

bool LoanExists(sqlite::Connection& connection, const std::string& loan_id);
std::int64_t CountLoans(sqlite::Connection& connection);
// Every loan id, sorted. Throws DbError.
std::vector<std::string> LoanIds(sqlite::Connection& connection);

}  // namespace outbox::lab
