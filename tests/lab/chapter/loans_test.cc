// The chapter's business transaction under failpoints: the loan and its
// outbox row share one fate (chapter 7.1, 同库同事务).
#include <catch2/catch.hpp>

#include <string>

#include "lab/chapter/loans.h"
#include "outbox/failpoint.h"
#include "outbox/store.h"
#include "relay_test_support.h"
#include "test_support.h"

namespace {

using outbox::ConfigureFailpoints;
using outbox::FailpointError;
using outbox::testing::CaptureThrow;
using outbox::testing::FailpointReset;
using outbox::testing::TempDir;

}  // namespace

TEST_CASE("WriteLoanWithEvent with an error before commit leaves neither the loan nor its "
          "outbox row",
          "[failpoint][store]") {
  FailpointReset reset;
  TempDir dir;
  auto store = outbox::lab::ResetLabDatabase(dir.File("lab.db"), {});
  ConfigureFailpoints("write.before_commit=1*off->error");
  outbox::lab::WriteLoanWithEvent(*store, 1);

  const auto error = CaptureThrow<FailpointError>([&] { outbox::lab::WriteLoanWithEvent(*store, 2); });

  REQUIRE(error.has_value());
  CHECK_THAT(error->what(), Catch::Contains("write.before_commit"));
  {
    auto txn = store->BeginRead();
    CHECK(outbox::lab::LoanExists(txn.connection(), "L-1001"));
    CHECK_FALSE(outbox::lab::LoanExists(txn.connection(), "L-1002"));
    CHECK(outbox::lab::CountLoans(txn.connection()) == 1);
    const auto rows = store->Snapshot(txn).rows;
    REQUIRE(rows.size() == 1);
    CHECK(rows[0].event_id == "evt-1001");
  }
  CHECK(store->Count().total == 1);
  // The rollback released the write lock: the next write goes through.
  ConfigureFailpoints("");
  outbox::lab::WriteLoanWithEvent(*store, 2);
  CHECK(outbox::lab::CountLoans(store->BeginRead().connection()) == 2);
  CHECK(store->Count().total == 2);
}

TEST_CASE("WriteLoanWithEvent with an error after commit has committed both the loan and its "
          "outbox row",
          "[failpoint][store]") {
  FailpointReset reset;
  TempDir dir;
  auto store = outbox::lab::ResetLabDatabase(dir.File("lab.db"), {});
  ConfigureFailpoints("write.after_commit=error");

  const auto error = CaptureThrow<FailpointError>([&] { outbox::lab::WriteLoanWithEvent(*store, 1); });

  REQUIRE(error.has_value());
  CHECK_THAT(error->what(), Catch::Contains("write.after_commit"));
  CHECK(outbox::lab::LoanExists(store->BeginRead().connection(), "L-1001"));
  const auto rows = store->FetchUnpublished(0, 10);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].event.event_id == "evt-1001");
  CHECK(rows[0].event.aggregate_id == "L-1001");
  CHECK(rows[0].event.event_type == "LoanCreated");
}
