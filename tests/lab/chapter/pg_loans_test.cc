// The chapter's business transaction on PostgreSQL (issue 12): the loan and its outbox row share
// one PostgreSQL transaction, and the lab picks the backend by the --db value. Needs a server in
// OUTBOX_PG_URL (scripts/postgres.sh start; scripts/test.sh exports it): without it these tests
// FAIL and say how to start one. Each test works in a schema of its own.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "lab/chapter/history.h"
#include "lab/chapter/loans.h"
#include "lab/check/checker.h"
#include "lab/check/reconciliation.h"
#include "outbox/failpoint.h"
#include "outbox/pg/connection.h"
#include "outbox/pg_store.h"
#include "pg_test_support.h"
#include "relay_test_support.h"
#include "test_support.h"

namespace {

using outbox::ConfigureFailpoints;
using outbox::FailpointError;
using outbox::testing::CaptureThrow;
using outbox::testing::FailpointReset;

class Schema : public outbox::testing::PgSchema {
 public:
  Schema() : PgSchema("lab") {}
};

}  // namespace

TEST_CASE("A postgresql URL opens the PostgreSQL store and a path the SQLite one", "[postgres]") {
  Schema schema;
  CHECK(outbox::lab::ResetLabStore(schema.url(), {})->backend() == outbox::Backend::kPostgres);
  CHECK(outbox::lab::OpenLabStore(schema.url(), {})->backend() == outbox::Backend::kPostgres);
  outbox::testing::TempDir dir;
  CHECK(outbox::lab::ResetLabStore(dir.File("lab.db"), {})->backend() == outbox::Backend::kSqlite);
}

TEST_CASE("OpenLabStore on a PostgreSQL schema never reset fails as schema missing and creates nothing", "[postgres]") {
  Schema schema;
  const auto error = CaptureThrow<outbox::SchemaMissingError>(
      [&] { outbox::lab::OpenLabStore(schema.url(), {}); });
  REQUIRE(error.has_value());
  CHECK_THAT(error->what(), Catch::Contains("no outbox table in schema"));
  outbox::pg::Connection look(schema.url());
  CHECK(look.QueryInt("SELECT (to_regclass('outbox') IS NULL)::int", {}, "look") == 1);
  // The business table alone (an application's) is not enough: still nothing is created.
  look.Exec("CREATE TABLE business_loan (loan_id TEXT PRIMARY KEY)", "create a business table");
  CHECK_THROWS_AS(outbox::lab::OpenLabStore(schema.url(), {}), outbox::SchemaMissingError);
  CHECK(look.QueryInt("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()", {},
                      "count the tables") == 1);
}

TEST_CASE("WriteLoanWithEvent on PostgreSQL with an error before commit leaves neither the loan nor its outbox row", "[postgres][failpoint]") {
  FailpointReset reset;
  Schema schema;
  auto store = outbox::lab::ResetLabStore(schema.url(), {});
  ConfigureFailpoints("write.before_commit=1*off->error");
  outbox::lab::WriteLoanWithEvent(*store, 1);

  const auto error = CaptureThrow<FailpointError>([&] { outbox::lab::WriteLoanWithEvent(*store, 2); });

  REQUIRE(error.has_value());
  CHECK(outbox::lab::LoanExists(*store, "L-1001"));
  CHECK_FALSE(outbox::lab::LoanExists(*store, "L-1002"));
  const outbox::lab::LabSnapshot snapshot = outbox::lab::ReadLabSnapshot(*store);
  CHECK(snapshot.loan_ids == std::vector<std::string>{"L-1001"});
  REQUIRE(snapshot.outbox.rows.size() == 1);
  CHECK(snapshot.outbox.rows[0].event_id == "evt-1001");
  ConfigureFailpoints("");
  outbox::lab::WriteLoanWithEvent(*store, 2);
  CHECK(outbox::lab::CountLoans(*store) == 2);
  CHECK(store->Count().total == 2);
}

TEST_CASE("Rollback on PostgreSQL takes the loan down with the colliding outbox insert", "[postgres]") {
  Schema schema;
  auto store = outbox::lab::ResetLabStore(schema.url(), {});
  outbox::lab::WriteLoanWithEvent(*store, 1);
  const outbox::lab::Loan loan = outbox::lab::ChapterLoan(2001, 0);
  outbox::OutboxEvent event = outbox::lab::LoanCreatedEvent(loan, 2001);
  event.event_id = "evt-1001";

  const std::string failure = outbox::lab::InsertLoanWithCollidingEvent(*store, loan, event);

  CHECK_THAT(failure, Catch::Contains("23505"));
  CHECK_FALSE(outbox::lab::LoanExists(*store, loan.loan_id));
  CHECK(outbox::lab::CountLoans(*store) == 1);
  // The naive dual write commits the loan alone, once.
  CHECK(outbox::lab::InsertLoanWithoutEvent(*store, loan));
  CHECK_FALSE(outbox::lab::InsertLoanWithoutEvent(*store, loan));
  const outbox::lab::DbSnapshot db = outbox::lab::TakeDbSnapshot(*store);
  CHECK(db.business_loans == 2);
  CHECK(db.outbox.total == 1);
  CHECK(db.run_id.size() == 22);
}

TEST_CASE("The checker on PostgreSQL finds a loan without an outbox row", "[postgres]") {
  Schema schema;
  auto store = outbox::lab::ResetLabStore(schema.url(), {});
  outbox::lab::WriteLoanWithEvent(*store, 1);
  outbox::lab::InsertLoanWithoutEvent(*store, outbox::lab::ChapterLoan(1001, 0));
  const outbox::lab::CheckResult result = outbox::lab::CheckRun(*store, {});
  CHECK(result.business_rows == 2);
  CHECK(result.outbox_rows == 1);
  REQUIRE(result.atomicity.size() == 1);
  CHECK(result.atomicity[0] == "loan L-2001 has no outbox row");
  CHECK(result.pending == std::vector<std::string>{"evt-1001"});
}

namespace {

// The txn records ("invoke", "ok", "fail", "info") of event_id in the history at path.
std::vector<std::string> TxnTypes(const std::string& path, const std::string& event_id) {
  std::int64_t malformed = 0;
  std::vector<std::string> types;
  for (const outbox::lab::HistoryOp& op : outbox::lab::ReadHistories({path}, &malformed))
    if (op.f == "txn" && op.value == event_id) types.push_back(op.type);
  CHECK(malformed == 0);
  return types;
}

// Writes loan 1, then makes business_loan end its own session (pg_terminate_backend: 57P01, the
// connection is gone) when a row goes in, at the INSERT or, with at_commit, at COMMIT (a deferred
// constraint trigger), and writes loan 2. Returns the txn records of evt-1002.
std::vector<std::string> WriteWithConnectionLost(bool at_commit) {
  Schema schema;
  outbox::testing::TempDir dir;
  const std::string path = dir.File("history.jsonl");
  auto store = outbox::lab::ResetLabStore(schema.url(), {});
  outbox::lab::History history(path, store->clock());
  outbox::lab::WriteLoanWithEvent(*store, 1, &history);
  outbox::pg::Connection ddl(schema.url());
  ddl.Exec("CREATE FUNCTION end_session() RETURNS trigger LANGUAGE plpgsql AS "
           "$$ BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$",
           "create end_session()");
  ddl.Exec(std::string("CREATE CONSTRAINT TRIGGER end_session AFTER INSERT ON business_loan ") +
               (at_commit ? "DEFERRABLE INITIALLY DEFERRED " : "NOT DEFERRABLE ") +
               "FOR EACH ROW EXECUTE FUNCTION end_session()",
           "create the trigger");

  const auto error = CaptureThrow<outbox::pg::PgError>(
      [&] { outbox::lab::WriteLoanWithEvent(*store, 2, &history); });

  REQUIRE(error.has_value());
  CHECK(error->connection_lost());
  CHECK(TxnTypes(path, "evt-1001") == std::vector<std::string>{"invoke", "ok"});
  // The session ended before its commit completed: the server rolled loan 2 back.
  ddl.Exec("DROP TRIGGER end_session ON business_loan", "drop the trigger");
  CHECK(ddl.QueryInt("SELECT COUNT(*) FROM business_loan", {}, "count the loans") == 1);
  return TxnTypes(path, "evt-1002");
}

}  // namespace

TEST_CASE("WriteLoanWithEvent on PostgreSQL records a COMMIT that lost its connection as indeterminate", "[postgres]") {
  // The writer cannot tell whether the server made it durable before the connection went.
  CHECK(WriteWithConnectionLost(true) == std::vector<std::string>{"invoke", "info"});
}

TEST_CASE("WriteLoanWithEvent on PostgreSQL records a connection lost before its COMMIT as failed", "[postgres]") {
  CHECK(WriteWithConnectionLost(false) == std::vector<std::string>{"invoke", "fail"});
}
