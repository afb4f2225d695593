// The chapter's business transaction under failpoints: the loan and its
// outbox row share one fate (chapter 7.1, 同库同事务).
#include <catch2/catch.hpp>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include "lab/check/checker.h"
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

TEST_CASE("A reset while another connection writes loans leaves no event without its business row",
          "[store]") {
  TempDir dir;
  const std::string path = dir.File("lab.db");
  outbox::lab::ResetLabDatabase(path, {});
  // A writer of its own connection, one loan per transaction, as `write` runs beside `reset`:
  // it waits for the reset's write lock and takes its turn (Connection::EnableWriterTurns) the
  // moment the reset lets go of it.
  std::mutex mutex;
  std::condition_variable changed;
  std::int64_t written = 0;
  bool stop = false;
  std::exception_ptr error;
  std::thread writer([&] {
    try {
      auto store = outbox::lab::OpenLabDatabase(path, {});
      for (std::int64_t i = 1;; ++i) {
        outbox::lab::WriteLoanWithEvent(*store, i);
        std::lock_guard<std::mutex> lock(mutex);
        ++written;
        changed.notify_all();
        if (stop) return;
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      error = std::current_exception();
      stop = true;
      changed.notify_all();
    }
  });
  const auto wait_for_written = [&](std::int64_t n) {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return written >= n || error; });
  };
  wait_for_written(20);
  outbox::lab::ResetRemoved removed;
  outbox::lab::ResetLabDatabase(path, {}, &removed);
  std::int64_t at_reset = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    at_reset = written;
  }
  wait_for_written(at_reset + 20);  // the writer goes on in the new tables
  {
    std::lock_guard<std::mutex> lock(mutex);
    stop = true;
  }
  writer.join();
  REQUIRE_FALSE(error);

  // Counted in one transaction: as many loans as outbox rows dropped.
  CHECK(removed.loans == removed.outbox.outbox_rows);
  auto store = outbox::lab::OpenLabDatabase(path, {});
  const outbox::lab::CheckResult result = outbox::lab::CheckRun(*store, {});
  CHECK(result.atomicity.empty());
  CHECK(result.business_rows == result.outbox_rows);
  CHECK(result.outbox_rows >= 20);
}

TEST_CASE("quick_check of a corrupt lab file answers on one line", "[store]") {
  TempDir dir;
  const std::string path = dir.File("corrupt.db");
  {
    auto store = outbox::lab::ResetLabDatabase(path, {});
    for (std::int64_t i = 1; i <= 300; ++i) outbox::lab::WriteLoanWithEvent(*store, i);
  }  // the last close checkpoints every page into the file
  // Pages 3 and 4 (4,096 bytes each) overwritten with 0xFF, as scenarios/corrupt-db.sh does with
  // random bytes: SQLite answers one row for the main database, and that row holds line breaks
  // ("*** in database main ***\nPage 4: btreeInitPage() returns error code 11\nPage 3: ...").
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(2 * 4096);
    const std::string garbage(2 * 4096, '\xff');
    file.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  }
  // (integrity_check stops at this damage with SQLITE_CORRUPT; it joins its rows the same way.)
  outbox::Store store(path, outbox::StoreOptions{}, outbox::OpenMode::kExisting);
  const std::string answer = store.QuickCheck();
  INFO(answer);
  CHECK(answer.find("*** in database main ***; Page ") == 0);
  CHECK(answer.find('\n') == std::string::npos);
}
