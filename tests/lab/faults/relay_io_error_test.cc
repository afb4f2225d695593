// The relay loop against I/O errors injected by the power-loss shim's vfs.*
// failpoints: a transient error is retried after the idle backoff, a
// persistent one is thrown, and neither marks a row that was not acknowledged.
#include <catch2/catch.hpp>

#include "lab/faults/powerloss_vfs.h"
#include "outbox/error.h"
#include "outbox/failpoint.h"
#include "outbox/relay.h"
#include "outbox/store.h"
#include "relay_test_support.h"
#include "test_support.h"

namespace outbox::lab {
namespace {

using outbox::testing::CaptureThrow;
using outbox::testing::EnqueueRange;
using outbox::testing::FailpointReset;
using outbox::testing::FakeClock;
using outbox::testing::FakePublisher;
using outbox::testing::FakeWaiter;
using outbox::testing::FastStoreOptions;
using outbox::testing::TempDir;

}  // namespace

TEST_CASE("The relay loop retries a transient I/O error and throws a persistent one",
          "[relay][powerloss]") {
  FailpointReset reset;
  TempDir dir;
  PowerlossVfs vfs;
  Store store(dir.File("lab.db"), FastStoreOptions(), OpenMode::kCreate);
  store.ResetSchema();
  EnqueueRange(store, 1, 5);
  FakeClock clock;
  RelayOptions options;
  options.owner = "relay-io-test";
  options.clock = &clock;
  options.batch_size = 2;
  FakePublisher publisher;
  Relay relay(store, publisher, options);
  FakeWaiter waiter;
  LoopOptions loop;
  loop.mode = LoopMode::kUntilEmpty;
  loop.max_io_errors = 3;

  SECTION("one failed write: retried, then every row is published once") {
    ConfigureFailpoints("vfs.write=1*error");
    const LoopReport report = RunRelayLoop(relay, waiter, loop, nullptr);
    CHECK(report.io_errors == 1);
    CHECK(waiter.waits == 1);
    CHECK(report.marked == 5);
    CHECK(store.PendingCount() == 0);
  }
  SECTION("every write fails: thrown after max_io_errors retries, nothing marked") {
    ConfigureFailpoints("vfs.write=error");
    const auto error = CaptureThrow<DbError>([&] { RunRelayLoop(relay, waiter, loop, nullptr); });
    REQUIRE(error);
    CHECK(error->code() == SQLITE_IOERR_WRITE);
    CHECK(waiter.waits == 3);
    ConfigureFailpoints("");
    CHECK(store.PendingCount() == 5);
  }
  SECTION("a full disk is retried like any I/O error") {
    ConfigureFailpoints("vfs.write=2*enospc");
    const LoopReport report = RunRelayLoop(relay, waiter, loop, nullptr);
    CHECK(report.io_errors == 2);
    CHECK(report.marked == 5);
  }
}

}  // namespace outbox::lab
