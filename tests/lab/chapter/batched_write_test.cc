// `write --batch N`: N loans in one transaction give the same business rows and outbox rows (event
// ids, aggregates, types, payloads) as N transactions of one loan each, on both backends.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "lab/chapter/loans.h"
#include "outbox/failpoint.h"
#include "pg_test_support.h"
#include "relay_test_support.h"
#include "test_support.h"

namespace {

using outbox::lab::LoanToWrite;

// Loans 1, 2, 1, 3, 2: the third and fifth write renew a loan written earlier in the same batch.
const std::vector<LoanToWrite> kLoans = {{1, 1}, {2, 2}, {3, 1}, {4, 3}, {5, 2}};

struct Rows {
  std::vector<std::string> loan_ids;
  std::vector<std::string> outbox;  // "event_id aggregate_id event_type payload" per row, id order
};

Rows ReadRows(outbox::OutboxStore& store) {
  Rows rows;
  rows.loan_ids = outbox::lab::ReadLabSnapshot(store).loan_ids;
  for (const outbox::OutboxRow& row : store.FetchUnpublished(0, 100))
    rows.outbox.push_back(row.event.event_id + " " + row.event.aggregate_id + " " +
                          row.event.event_type + " " + row.event.payload);
  return rows;
}

// Writes kLoans one transaction each into one store and as one batch into the other; returns
// both stores' rows and checks what the batch returned.
void CheckBatchEqualsSingles(outbox::OutboxStore& singles, outbox::OutboxStore& batched) {
  for (const LoanToWrite& loan : kLoans)
    outbox::lab::WriteLoanWithEvent(singles, loan.index, nullptr, loan.loan_number);
  const auto written = outbox::lab::WriteLoansWithEvents(batched, kLoans);

  REQUIRE(written.size() == 5);
  CHECK(written[2].event.event_id == "evt-1003");
  CHECK(written[2].event.event_type == "LoanRenewed");
  CHECK(written[2].loan.status == "RENEWED");
  const Rows one_by_one = ReadRows(singles);
  const Rows together = ReadRows(batched);
  CHECK(together.loan_ids == std::vector<std::string>{"L-1001", "L-1002", "L-1003"});
  CHECK(together.loan_ids == one_by_one.loan_ids);
  REQUIRE(together.outbox.size() == 5);
  CHECK(together.outbox == one_by_one.outbox);
  CHECK(together.outbox[0] ==
        "evt-1001 L-1001 LoanCreated {\"eventId\":\"evt-1001\",\"loanId\":\"L-1001\",\"bookId\":\"B-101\"}");
  CHECK(together.outbox[4].starts_with("evt-1005 L-1002 LoanRenewed "));
}

}  // namespace

TEST_CASE("A batched write of 5 loans gives the rows of 5 single writes on SQLite", "[lab][store]") {
  outbox::testing::TempDir dir;
  auto singles = outbox::lab::ResetLabDatabase(dir.File("singles.db"), {});
  auto batched = outbox::lab::ResetLabDatabase(dir.File("batched.db"), {});
  CheckBatchEqualsSingles(*singles, *batched);
}

TEST_CASE("A batched write of 5 loans gives the rows of 5 single writes on PostgreSQL",
          "[lab][postgres]") {
  outbox::testing::PgSchema singles_schema("batch");
  outbox::testing::PgSchema batched_schema("batch");
  auto singles = outbox::lab::ResetLabStore(singles_schema.url(), {});
  auto batched = outbox::lab::ResetLabStore(batched_schema.url(), {});
  CheckBatchEqualsSingles(*singles, *batched);
}

TEST_CASE("A batched write that fails before its commit leaves none of its loans", "[lab][failpoint]") {
  outbox::testing::FailpointReset reset;
  outbox::testing::TempDir dir;
  auto store = outbox::lab::ResetLabDatabase(dir.File("lab.db"), {});
  outbox::ConfigureFailpoints("write.before_commit=error");
  CHECK_THROWS_AS(outbox::lab::WriteLoansWithEvents(*store, kLoans), outbox::FailpointError);
  outbox::ConfigureFailpoints("");
  CHECK(store->Count().total == 0);
  CHECK(outbox::lab::CountLoans(*store) == 0);
}
