// The one clock: a ManualClock given to the store moves time for the store's
// own stamps (MarkPublished, PurgePublished) and, through Store::clock(), for
// a relay given no clock of its own.
#include "outbox/clock.h"

#include <catch2/catch.hpp>

#include <cstdint>

#include "outbox/per_row_relay.h"
#include "outbox/relay.h"
#include "outbox/store.h"
#include "relay_test_support.h"
#include "test_support.h"

namespace {

using outbox::ManualClock;
using outbox::OpenMode;
using outbox::Relay;
using outbox::RelayOptions;
using outbox::Store;
using outbox::StoreOptions;
using outbox::testing::EnqueueRange;
using outbox::testing::IntColumn;
using outbox::testing::kNowMs;
using outbox::testing::RowFailingPublisher;
using outbox::testing::TempDir;

}  // namespace

TEST_CASE("ManualClock moves its wall and monotonic readings together and never back",
          "[clock]") {
  ManualClock clock(kNowMs);
  CHECK(clock.EpochMs() == kNowMs);
  CHECK(clock.MonotonicUs() == 0);
  clock.AdvanceMs(1500);
  CHECK(clock.EpochMs() == kNowMs + 1500);
  CHECK(clock.MonotonicUs() == 1500 * 1000);
  clock.AdvanceMs(-10);
  clock.AdvanceMs(0);
  CHECK(clock.EpochMs() == kNowMs + 1500);
  CHECK(clock.MonotonicUs() == 1500 * 1000);
}

TEST_CASE("SystemClock reads epoch ms near the present and a monotonic time that does not go back",
          "[clock]") {
  outbox::SystemClock clock;
  CHECK(clock.EpochMs() > kNowMs);  // after November 2023
  const std::int64_t first = clock.MonotonicUs();
  CHECK(clock.MonotonicUs() >= first);
}

TEST_CASE("One clock moved by the test stamps the relay's claims and marks and the store's purge",
          "[clock][relay][store]") {
  TempDir dir;
  ManualClock clock(kNowMs);
  StoreOptions store_options = outbox::testing::FastStoreOptions();
  store_options.clock = &clock;
  Store store(dir.File("lab.db"), store_options, OpenMode::kCreate);
  store.ResetSchema();
  REQUIRE(&store.clock() == &clock);
  EnqueueRange(store, 1, 3);

  RowFailingPublisher publisher;
  publisher.failing = {1};
  RelayOptions options;  // no clock of its own: the store's
  options.batch_size = 2;
  options.settle.backoff_base_ms = 100;
  Relay relay(store, publisher, options);

  // Rows 1 and 2: row 2 is marked at the clock's now, row 1 backs off from it.
  REQUIRE(relay.RunBatch().settle.marked == 1);
  CHECK(IntColumn(store, "published_at", 2) == kNowMs);
  CHECK(IntColumn(store, "next_attempt_at", 1) == kNowMs + 100);
  CHECK(IntColumn(store, "claim_until", 3) == std::nullopt);

  // Only the clock moves: the backoff runs out when the test says so.
  publisher.failing.clear();
  clock.AdvanceMs(99);
  CHECK(relay.RunBatch().claimed == 1);  // row 3 only; row 1 is still backing off
  CHECK(IntColumn(store, "published_at", 3) == kNowMs + 99);
  CHECK_FALSE(relay.HasClaimable());
  clock.AdvanceMs(1);
  REQUIRE(relay.HasClaimable());
  REQUIRE(relay.RunBatch().settle.marked == 1);
  CHECK(IntColumn(store, "published_at", 1) == kNowMs + 100);

  // The chapter's per-row relay marks through MarkPublished: the same clock.
  EnqueueRange(store, 4, 4);
  clock.AdvanceMs(50);
  outbox::PerRowRelayOptions chapter;
  chapter.limit = 10;
  REQUIRE(outbox::RunPerRowRelay(store, publisher, chapter, nullptr).marked == 1);
  CHECK(IntColumn(store, "published_at", 4) == kNowMs + 150);

  // A day later, a purge of rows older than an hour archives all four, stamped now.
  clock.AdvanceMs(86'400'000);
  const std::int64_t now = clock.EpochMs();
  const auto report = store.PurgePublished(now - 3'600'000, 10, /*archive=*/true);
  CHECK(report.archived == 4);
  auto txn = store.BeginRead();
  CHECK(txn.connection().QueryInt64("SELECT MIN(archived_at) FROM outbox_archive") == now);
  CHECK(txn.connection().QueryInt64("SELECT MAX(archived_at) FROM outbox_archive") == now);
}
