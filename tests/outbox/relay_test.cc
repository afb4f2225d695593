// The production relay against a fake publisher and a clock the test moves:
// one Publish call and one settle per batch, backoff, parking, per-aggregate
// blocking, the keyset cursor, and RunRelayLoop with a fake IdleWaiter.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outbox/error.h"
#include "outbox/failpoint.h"
#include "outbox/relay.h"
#include "outbox/sqlite/connection.h"
#include "outbox/store.h"
#include "relay_test_support.h"
#include "test_support.h"

namespace {

using outbox::BatchReport;
using outbox::ConfigError;
using outbox::FailureMode;
using outbox::KeyChoice;
using outbox::LoopMode;
using outbox::LoopOptions;
using outbox::OpenMode;
using outbox::Relay;
using outbox::RelayOptions;
using outbox::Store;
using outbox::StoreOptions;
using outbox::testing::CaptureThrow;
using outbox::testing::EnqueueAll;
using outbox::testing::EnqueueRange;
using outbox::testing::EventOn;
using outbox::testing::FastStoreOptions;
using outbox::testing::FailpointReset;
using outbox::testing::FakeClock;
using outbox::testing::FakePublisher;
using outbox::testing::FakeWaiter;
using outbox::testing::IdsOf;
using outbox::testing::IntColumn;
using outbox::testing::IsPublished;
using outbox::testing::kNowMs;
using outbox::testing::MakeEvent;
using outbox::testing::RowFailingPublisher;
using outbox::testing::TempDir;
using outbox::testing::TextColumn;
using Ids = std::vector<std::int64_t>;

// A fresh store in dir and relay options on a fake clock.
class RelayFixture {
 public:
  RelayFixture() : store(dir.File("lab.db"), FastStoreOptions(), OpenMode::kCreate) {
    store.ResetSchema();
    options.owner = "relay-test";
    options.clock = &clock;
    options.settle.backoff_base_ms = 100;
    options.settle.backoff_max_ms = 10000;
  }

  Ids PublishedIds() {
    auto txn = store.BeginRead();
    auto select = txn.connection().Prepare("SELECT id FROM outbox WHERE published <> 0 ORDER BY id");
    Ids ids;
    while (select.Step()) ids.push_back(select.ColumnInt64(0));
    return ids;
  }

  TempDir dir;
  Store store;
  FakeClock clock;
  RelayOptions options;
};

}  // namespace

TEST_CASE("RunBatch publishes a claimed batch in one Publish call and marks every acked row in "
          "one settle",
          "[relay]") {
  RelayFixture f;
  EnqueueRange(f.store, 1, 3);
  f.options.batch_size = 10;
  FakePublisher publisher;
  Relay relay(f.store, publisher, f.options);

  const BatchReport report = relay.RunBatch();

  CHECK(report.token >= 1);
  CHECK(report.claimed == 3);
  CHECK(report.acked == 3);
  CHECK(report.failed == 0);
  CHECK(report.settle.marked == 3);
  CHECK(report.settle.retried == 0);
  CHECK(report.settle.fenced == 0);
  REQUIRE(publisher.calls.size() == 1);
  REQUIRE(IdsOf(publisher.calls[0]) == Ids{1, 2, 3});
  for (int i = 1; i <= 3; ++i) {
    INFO("row " << i);
    const auto& message = publisher.calls[0][static_cast<std::size_t>(i) - 1];
    const auto event = MakeEvent(i);
    CHECK(message.key == event.event_id);  // the chapter's key by default
    CHECK(message.event_id == event.event_id);
    CHECK(message.event_type == event.event_type);
    CHECK(message.payload == event.payload);
    CHECK(IsPublished(f.store, i));
    CHECK(IntColumn(f.store, "published_at", i) == kNowMs);
    CHECK_FALSE(IntColumn(f.store, "claim_token", i).has_value());
  }

  const BatchReport idle = relay.RunBatch();
  CHECK(idle.claimed == 0);
  CHECK(publisher.calls.size() == 1);
  CHECK_FALSE(relay.HasClaimable());
}

TEST_CASE("RunBatch marks the other rows when one delivery fails and puts the failing row into "
          "backoff",
          "[relay]") {
  RelayFixture f;
  EnqueueRange(f.store, 1, 3);
  RowFailingPublisher publisher;
  publisher.failing = {2};
  Relay relay(f.store, publisher, f.options);

  const BatchReport report = relay.RunBatch();

  CHECK(report.claimed == 3);
  CHECK(report.acked == 2);
  CHECK(report.failed == 1);
  CHECK(report.settle.marked == 2);
  CHECK(report.settle.retried == 1);
  CHECK(report.settle.parked == 0);
  CHECK(publisher.calls.size() == 1);
  CHECK(f.PublishedIds() == Ids{1, 3});
  CHECK(IntColumn(f.store, "attempts", 2) == 1);
  CHECK(TextColumn(f.store, "last_error", 2) == std::string("fake: poison row"));
  CHECK(IntColumn(f.store, "next_attempt_at", 2) == kNowMs + 100);
  CHECK_FALSE(IntColumn(f.store, "parked_at", 2).has_value());
  CHECK(f.store.Status(kNowMs).in_backoff == 1);
}

TEST_CASE("RunBatch puts the whole batch into backoff and marks nothing when every delivery fails",
          "[relay]") {
  RelayFixture f;
  EnqueueRange(f.store, 1, 4);
  FakePublisher publisher({false});
  Relay relay(f.store, publisher, f.options);

  const BatchReport report = relay.RunBatch();

  CHECK(report.claimed == 4);
  CHECK(report.acked == 0);
  CHECK(report.failed == 4);
  CHECK(report.settle.marked == 0);
  CHECK(report.settle.retried == 4);
  CHECK(f.PublishedIds().empty());
  CHECK(f.store.Status(kNowMs).in_backoff == 4);
  CHECK(TextColumn(f.store, "last_error", 4) == std::string("fake: scripted delivery failure"));
}

TEST_CASE("A relay sends each batch under the run id of the database it claimed it from even "
          "after a reset while it runs",
          "[relay]") {
  RelayFixture f;
  const std::string first_run = f.store.RunId();
  REQUIRE_FALSE(first_run.empty());
  EnqueueRange(f.store, 1, 2);
  FakePublisher publisher;
  std::vector<std::string> new_runs;
  f.options.on_new_run = [&new_runs](const std::string& previous, const std::string& run,
                                     std::int64_t dropped) {
    new_runs.push_back(previous + " " + run + " " + std::to_string(dropped));
  };
  Relay relay(f.store, publisher, f.options);
  REQUIRE(relay.RunBatch().acked == 2);

  f.clock.AdvanceMs(1);  // a reset starts a new run: a new id (epoch ms and random bits)
  f.store.ResetSchema();
  const std::string second_run = f.store.RunId();
  REQUIRE(second_run != first_run);
  EnqueueRange(f.store, 3, 4);
  // The first batch to find the new run is not sent (Relay::RunOf: it may have been read before
  // the reset) and its claim is released; the next one goes out under the new run's id.
  CHECK(relay.RunBatch().claimed == 0);
  CHECK(new_runs == std::vector<std::string>{first_run + " " + second_run + " 2"});
  CHECK(f.store.Status(kNowMs).claimed == 0);
  REQUIRE(relay.RunBatch().acked == 2);

  REQUIRE(publisher.calls.size() == 2);
  for (const auto& message : publisher.calls[0]) CHECK(message.run_id == first_run);
  for (const auto& message : publisher.calls[1]) CHECK(message.run_id == second_run);
  CHECK(new_runs.size() == 1);
}

TEST_CASE("With key aggregate-id the record key is the aggregate id", "[relay]") {
  RelayFixture f;
  EnqueueAll(f.store, {EventOn(1, "L-1"), EventOn(2, "L-2"), EventOn(3, "L-1")});
  f.options.key = outbox::ParseKeyChoice("aggregate-id");
  // skip: all three rows in one batch (block-key would hold evt-3 until evt-1 is published).
  f.options.on_failure = outbox::FailureMode::kSkip;
  FakePublisher publisher;
  Relay relay(f.store, publisher, f.options);

  REQUIRE(relay.RunBatch().acked == 3);

  CHECK(publisher.SentKeys() == std::vector<std::string>{"L-1", "L-2", "L-1"});
  // The event id still travels in its own field (header event_id).
  REQUIRE(publisher.calls.size() == 1);
  CHECK(publisher.calls[0][2].event_id == "evt-3");
}

TEST_CASE("The keyset cursor claims batches of 2 then 2 then 1 over five rows and then starts a "
          "new pass from id 0",
          "[relay]") {
  RelayFixture f;
  EnqueueRange(f.store, 1, 5);
  f.options.batch_size = 2;
  FakePublisher publisher({false});  // the first batch fails and goes into backoff
  Relay relay(f.store, publisher, f.options);

  CHECK(relay.RunBatch().claimed == 2);
  CHECK(relay.RunBatch().claimed == 2);
  CHECK(relay.RunBatch().claimed == 1);
  CHECK(relay.RunBatch().claimed == 0);  // rows 1 and 2 are in backoff
  f.clock.AdvanceMs(100);
  const BatchReport retry = relay.RunBatch();  // nothing past id 5: a new pass
  CHECK(retry.claimed == 2);
  CHECK(retry.settle.marked == 2);

  REQUIRE(publisher.calls.size() == 4);
  CHECK(IdsOf(publisher.calls[0]) == Ids{1, 2});
  CHECK(IdsOf(publisher.calls[1]) == Ids{3, 4});
  CHECK(IdsOf(publisher.calls[2]) == Ids{5});
  CHECK(IdsOf(publisher.calls[3]) == Ids{1, 2});
  CHECK(f.PublishedIds() == Ids{1, 2, 3, 4, 5});
}

TEST_CASE("A due retry behind the keyset cursor is served before the rows past it", "[relay]") {
  RelayFixture f;
  EnqueueRange(f.store, 1, 3);
  f.options.batch_size = 2;
  FakePublisher publisher({false});
  Relay relay(f.store, publisher, f.options);
  REQUIRE(relay.RunBatch().claimed == 2);  // rows 1, 2 fail: backoff until +100

  f.clock.AdvanceMs(100);  // rows 1 and 2 are due again; row 3 lies past the cursor
  const BatchReport next = relay.RunBatch();

  // A new pass starts at once, so a stream of new rows cannot starve retries.
  CHECK(next.claimed == 2);
  REQUIRE(publisher.calls.size() == 2);
  CHECK(IdsOf(publisher.calls[1]) == Ids{1, 2});
  CHECK(relay.RunBatch().claimed == 1);
  CHECK(IdsOf(publisher.calls.back()) == Ids{3});
}

TEST_CASE("A row in backoff is picked up once its backoff expires and not a millisecond before",
          "[relay]") {
  RelayFixture f;
  EnqueueRange(f.store, 1, 1);
  FakePublisher publisher({false, false, true});
  Relay relay(f.store, publisher, f.options);

  REQUIRE(relay.RunBatch().settle.retried == 1);  // attempt 1: backoff 100 ms
  f.clock.AdvanceMs(99);
  CHECK_FALSE(relay.HasClaimable());
  CHECK(relay.RunBatch().claimed == 0);
  f.clock.AdvanceMs(1);
  CHECK(relay.HasClaimable());
  REQUIRE(relay.RunBatch().settle.retried == 1);  // attempt 2: backoff 200 ms
  CHECK(IntColumn(f.store, "next_attempt_at", 1) == f.clock.EpochMs() + 200);
  f.clock.AdvanceMs(199);
  CHECK(relay.RunBatch().claimed == 0);
  f.clock.AdvanceMs(1);
  const BatchReport third = relay.RunBatch();
  CHECK(third.settle.marked == 1);
  CHECK(publisher.calls.size() == 3);
  CHECK(IntColumn(f.store, "published_at", 1) == f.clock.EpochMs());
  CHECK(IntColumn(f.store, "attempts", 1) == 2);
}

TEST_CASE("A poison row is parked after max_attempts while rows of other aggregates keep flowing",
          "[relay]") {
  RelayFixture f;
  f.options.settle.max_attempts = 3;
  EnqueueAll(f.store, {EventOn(1, "poison"), EventOn(2, "A"), EventOn(3, "B")});
  RowFailingPublisher publisher;
  publisher.failing = {1};
  Relay relay(f.store, publisher, f.options);
  // Runs batches until nothing is claimable (bounded).
  const auto drain = [&] {
    for (int i = 0; i < 10 && relay.RunBatch().claimed > 0; ++i) {
    }
  };

  drain();
  CHECK(publisher.TimesSent(1) == 1);
  CHECK(f.PublishedIds() == Ids{2, 3});

  // Each round: another aggregate writes a row, the backoff runs out, the relay drains.
  std::int64_t parked_after_round = 0;
  for (int round = 1; round <= 4; ++round) {
    INFO("round " << round);
    const std::int64_t id = EnqueueAll(f.store, {EventOn(100 + round, "other")}).front();
    f.clock.AdvanceMs(f.options.settle.backoff_max_ms);
    drain();
    CHECK(IsPublished(f.store, id));
    CHECK(publisher.TimesSent(1) == std::min(1 + round, 3));
    if (parked_after_round == 0 && IntColumn(f.store, "parked_at", 1).has_value())
      parked_after_round = round;
  }

  CHECK(parked_after_round == 2);  // attempts 2 and 3 came in rounds 1 and 2
  CHECK(IntColumn(f.store, "attempts", 1) == 3);
  CHECK_FALSE(IsPublished(f.store, 1));
  const auto status = f.store.Status(f.clock.EpochMs());
  CHECK(status.parked == 1);
  CHECK(status.pending == 0);
  CHECK(f.store.PendingCount() == 0);
}

TEST_CASE("With block-key a later row of a parked aggregate waits until the parked row is "
          "unparked and published but with skip it is sent",
          "[relay]") {
  RelayFixture f;
  f.options.settle.max_attempts = 1;
  EnqueueAll(f.store, {EventOn(1, "X"), EventOn(2, "Y")});
  RowFailingPublisher publisher;
  publisher.failing = {1};

  SECTION("block-key") {
    f.options.on_failure = outbox::ParseFailureMode("block-key");
    Relay relay(f.store, publisher, f.options);
    REQUIRE(relay.RunBatch().settle.parked == 1);
    EnqueueAll(f.store, {EventOn(3, "X"), EventOn(4, "Z")});  // row 3 follows the parked row 1

    const BatchReport blocked = relay.RunBatch();
    CHECK(blocked.claimed == 1);  // row 4 only
    CHECK(publisher.TimesSent(3) == 0);
    f.clock.AdvanceMs(86400000);
    CHECK(relay.RunBatch().claimed == 0);
    CHECK_FALSE(relay.HasClaimable());
    CHECK(publisher.TimesSent(3) == 0);

    publisher.failing.clear();
    REQUIRE(f.store.Unpark(1));
    // One row per aggregate per batch, after an unpark too: row 3 rides in the batch after
    // row 1's, so a failure of row 1 in its batch can never let row 3 overtake it.
    const BatchReport released = relay.RunBatch();
    CHECK(released.settle.marked == 1);
    REQUIRE_FALSE(publisher.calls.empty());
    CHECK(IdsOf(publisher.calls.back()) == Ids{1});
    const BatchReport follower = relay.RunBatch();
    CHECK(follower.settle.marked == 1);
    CHECK(IdsOf(publisher.calls.back()) == Ids{3});
    CHECK(f.PublishedIds() == Ids{1, 2, 3, 4});
  }
  SECTION("skip") {
    f.options.on_failure = outbox::ParseFailureMode("skip");
    Relay relay(f.store, publisher, f.options);
    REQUIRE(relay.RunBatch().settle.parked == 1);
    EnqueueAll(f.store, {EventOn(3, "X")});

    const BatchReport next = relay.RunBatch();
    CHECK(next.claimed == 1);
    CHECK(next.settle.marked == 1);
    CHECK(publisher.TimesSent(3) == 1);
    CHECK(f.PublishedIds() == Ids{2, 3});
    CHECK_FALSE(IsPublished(f.store, 1));
  }
}

// Regression: an earlier row whose backoff expired lies behind the keyset
// cursor; a claim from the cursor must not take the later row of its aggregate
// alone and send it first.
TEST_CASE("With block-key a later row of an aggregate is not sent before an earlier row whose "
          "backoff expired behind the cursor",
          "[relay]") {
  RelayFixture f;
  f.options.batch_size = 2;
  EnqueueAll(f.store,
             {EventOn(1, "X"), EventOn(2, "Y"), EventOn(3, "X"), EventOn(4, "Z")});
  FakePublisher publisher({false});  // batch {1, 2} fails once
  Relay relay(f.store, publisher, f.options);
  REQUIRE(relay.RunBatch().settle.retried == 2);

  f.clock.AdvanceMs(100);  // rows 1 and 2 due again; the cursor is at 2
  while (relay.RunBatch().claimed > 0) {
  }

  // Per-aggregate order: row 1 (X) must reach the publisher before row 3 (X).
  std::vector<std::int64_t> order;
  for (const auto& call : publisher.calls)
    for (const auto& m : call)
      if (m.outbox_id == 1 || m.outbox_id == 3) order.push_back(m.outbox_id);
  CHECK(order == Ids{1, 1, 3});
}

// Regression: under block-key a batch holds at most one row per aggregate, so
// a failing earlier row cannot be overtaken by a later row of the same batch.
TEST_CASE("With block-key a later row of an aggregate is not published while an earlier row of "
          "the same batch waits in backoff",
          "[relay]") {
  RelayFixture f;
  EnqueueAll(f.store, {EventOn(1, "X"), EventOn(2, "X")});
  RowFailingPublisher publisher;
  publisher.failing = {1};
  Relay relay(f.store, publisher, f.options);

  relay.RunBatch();

  CHECK_FALSE(IsPublished(f.store, 1));
  CHECK_FALSE(IsPublished(f.store, 2));
}

// Regression: a due retry behind the cursor must be served even while every
// batch also finds a newly written row past the cursor.
TEST_CASE("A row whose backoff expired is retried within a bounded number of batches while "
          "writers keep adding rows",
          "[relay]") {
  RelayFixture f;
  f.options.batch_size = 1;
  EnqueueRange(f.store, 1, 1);
  FakePublisher publisher({false});  // row 1 fails once, then the broker is fine
  Relay relay(f.store, publisher, f.options);
  REQUIRE(relay.RunBatch().settle.retried == 1);

  for (int i = 2; i <= 11; ++i) {
    f.clock.AdvanceMs(1000);  // far past the 100 ms backoff
    EnqueueRange(f.store, i, i);
    relay.RunBatch();
  }

  CHECK(IsPublished(f.store, 1));
}

TEST_CASE("Relay rejects batch size 0 and lease 0 and max attempts 0 with ConfigError", "[relay]") {
  RelayFixture f;
  FakePublisher publisher;
  std::string expected;
  SECTION("batch size") {
    f.options.batch_size = 0;
    expected = "batch size 0";
  }
  SECTION("negative batch size") {
    f.options.batch_size = -1;
    expected = "batch size -1";
  }
  SECTION("lease") {
    f.options.lease_ms = 0;
    expected = "lease 0 ms";
  }
  SECTION("max attempts") {
    f.options.settle.max_attempts = 0;
    expected = "max attempts 0";
  }
  const auto error = CaptureThrow<ConfigError>([&] { Relay relay(f.store, publisher, f.options); });
  REQUIRE(error.has_value());
  CHECK_THAT(error->what(), Catch::Contains(expected));
}

TEST_CASE("ParseKeyChoice and ParseFailureMode accept their two words and reject anything else",
          "[relay]") {
  CHECK(outbox::ParseKeyChoice("event-id") == KeyChoice::kEventId);
  CHECK(outbox::ParseKeyChoice("aggregate-id") == KeyChoice::kAggregateId);
  CHECK(outbox::ParseFailureMode("block-key") == FailureMode::kBlockKey);
  CHECK(outbox::ParseFailureMode("skip") == FailureMode::kSkip);

  const std::string bad = GENERATE(as<std::string>{}, "", "event_id", "Event-Id", "aggregate",
                                   "block_key", "SKIP", " skip", "skip ");
  INFO("text: '" << bad << "'");
  const auto key_error = CaptureThrow<ConfigError>([&] { outbox::ParseKeyChoice(bad); });
  REQUIRE(key_error.has_value());
  CHECK_THAT(key_error->what(), Catch::Contains("'" + bad + "'"));
  const auto mode_error = CaptureThrow<ConfigError>([&] { outbox::ParseFailureMode(bad); });
  REQUIRE(mode_error.has_value());
  CHECK_THAT(mode_error->what(), Catch::Contains("'" + bad + "'"));
}

TEST_CASE("An error between the ack and the mark leaves the batch claimed and after the lease it "
          "is sent again and marked",
          "[relay][failpoint]") {
  FailpointReset reset;
  RelayFixture f;
  EnqueueRange(f.store, 1, 2);
  f.options.lease_ms = 5000;
  FakePublisher publisher;
  Relay relay(f.store, publisher, f.options);
  outbox::ConfigureFailpoints("relay.after_ack_before_mark=1*error->off");

  REQUIRE(CaptureThrow<outbox::FailpointError>([&] { relay.RunBatch(); }).has_value());
  CHECK(publisher.calls.size() == 1);
  CHECK(f.PublishedIds().empty());
  CHECK(f.store.Status(f.clock.EpochMs()).claimed == 2);
  CHECK(relay.RunBatch().claimed == 0);  // the lease holds

  f.clock.AdvanceMs(5000);
  const BatchReport again = relay.RunBatch();
  CHECK(again.settle.marked == 2);
  CHECK(publisher.calls.size() == 2);  // at-least-once: both rows sent twice
  CHECK(f.PublishedIds() == Ids{1, 2});
}

TEST_CASE("RunRelayLoop in once mode runs exactly one batch", "[relay]") {
  RelayFixture f;
  f.options.batch_size = 2;
  FakePublisher publisher;
  Relay relay(f.store, publisher, f.options);
  FakeWaiter waiter;
  LoopOptions loop;
  loop.mode = LoopMode::kOnce;
  int callbacks = 0;

  SECTION("with rows") {
    EnqueueRange(f.store, 1, 5);
    const auto report = outbox::RunRelayLoop(relay, waiter, loop,
                                             [&](const BatchReport&) { ++callbacks; });
    CHECK(report.batches == 1);
    CHECK(report.acked == 2);
    CHECK(report.marked == 2);
    CHECK_FALSE(report.stopped);
    CHECK(callbacks == 1);
    CHECK(f.PublishedIds() == Ids{1, 2});
  }
  SECTION("with nothing to do") {
    const auto report = outbox::RunRelayLoop(relay, waiter, loop,
                                             [&](const BatchReport&) { ++callbacks; });
    CHECK(report.batches == 0);
    CHECK(callbacks == 0);
    CHECK(publisher.calls.empty());
  }
  CHECK(waiter.waits == 0);
}

TEST_CASE("RunRelayLoop until empty ends once nothing is pending", "[relay]") {
  RelayFixture f;
  f.options.batch_size = 2;
  EnqueueRange(f.store, 1, 5);
  FakePublisher publisher;
  Relay relay(f.store, publisher, f.options);
  FakeWaiter waiter;
  LoopOptions loop;
  loop.mode = LoopMode::kUntilEmpty;
  std::vector<std::int64_t> claimed;

  const auto report = outbox::RunRelayLoop(relay, waiter, loop,
                                           [&](const BatchReport& b) { claimed.push_back(b.claimed); });

  CHECK(report.batches == 3);
  CHECK(report.marked == 5);
  CHECK(report.failed == 0);
  CHECK_FALSE(report.stopped);
  CHECK(claimed == Ids{2, 2, 1});
  CHECK(waiter.waits == 0);
  CHECK(f.store.PendingCount() == 0);
}

TEST_CASE("RunRelayLoop until empty waits out a backoff instead of ending early", "[relay]") {
  RelayFixture f;
  f.options.settle.backoff_base_ms = 300;
  EnqueueRange(f.store, 1, 2);
  FakePublisher publisher({false});
  Relay relay(f.store, publisher, f.options);
  FakeWaiter waiter;
  std::int64_t waited_ms = 0;
  waiter.on_wait = [&](int timeout_ms) {
    f.clock.AdvanceMs(timeout_ms);  // the wait times out: time passes
    waited_ms += timeout_ms;
  };
  LoopOptions loop;
  loop.mode = LoopMode::kUntilEmpty;
  loop.idle_min_ms = 5;
  loop.idle_max_ms = 80;

  const auto report = outbox::RunRelayLoop(relay, waiter, loop, nullptr);

  CHECK_FALSE(report.stopped);
  CHECK(report.batches == 2);
  CHECK(report.failed == 2);
  CHECK(report.marked == 2);
  CHECK(publisher.calls.size() == 2);
  CHECK(f.PublishedIds() == Ids{1, 2});
  CHECK(waited_ms >= 300);
  CHECK(waiter.forgets >= waiter.waits);
  // Idle waits double from idle_min_ms up to idle_max_ms.
  REQUIRE(waiter.timeouts_ms.size() >= 6);
  CHECK(std::vector<int>(waiter.timeouts_ms.begin(), waiter.timeouts_ms.begin() + 6) ==
        std::vector<int>{5, 10, 20, 40, 80, 80});
}

// Regression: a row blocked behind a parked row of its aggregate can never be
// claimed; until-empty must end rather than wait forever. The FakeWaiter would
// request a stop after 50 waits.
TEST_CASE("RunRelayLoop until empty ends when the only pending row is blocked behind a parked row",
          "[relay]") {
  RelayFixture f;
  f.options.batch_size = 1;
  f.options.settle.max_attempts = 1;
  EnqueueAll(f.store, {EventOn(1, "X"), EventOn(2, "X")});
  RowFailingPublisher publisher;
  publisher.failing = {1};
  Relay relay(f.store, publisher, f.options);
  FakeWaiter waiter;
  waiter.max_waits = 50;
  waiter.on_wait = [&](int timeout_ms) { f.clock.AdvanceMs(timeout_ms); };
  LoopOptions loop;
  loop.mode = LoopMode::kUntilEmpty;

  const auto report = outbox::RunRelayLoop(relay, waiter, loop, nullptr);

  CHECK(report.parked == 1);
  CHECK_FALSE(report.stopped);
  CHECK(waiter.waits < 50);
}

TEST_CASE("A stop request ends the loop after the current batch with every acked row of that "
          "batch marked",
          "[relay]") {
  RelayFixture f;
  f.options.batch_size = 3;
  EnqueueRange(f.store, 1, 7);
  FakeWaiter waiter;
  FakePublisher publisher;
  // SIGTERM arrives while the first batch is in flight.
  publisher.on_publish = [&](const std::vector<outbox::OutboundMessage>&) { waiter.stop = true; };
  Relay relay(f.store, publisher, f.options);
  LoopOptions loop;
  loop.mode = GENERATE(LoopMode::kForever, LoopMode::kUntilEmpty);

  const auto report = outbox::RunRelayLoop(relay, waiter, loop, nullptr);

  CHECK(report.stopped);
  CHECK(report.batches == 1);
  CHECK(report.acked == 3);
  CHECK(report.marked == 3);
  CHECK(publisher.calls.size() == 1);
  CHECK(f.PublishedIds() == Ids{1, 2, 3});
  CHECK(f.store.Status(f.clock.EpochMs()).claimed == 0);
  CHECK(waiter.waits == 0);
}

TEST_CASE("RunRelayLoop forever sleeps while idle and picks up a row written during a wait",
          "[relay]") {
  RelayFixture f;
  FakePublisher publisher;
  Relay relay(f.store, publisher, f.options);
  FakeWaiter waiter;
  waiter.on_wait = [&](int) {
    if (waiter.waits == 3) EnqueueRange(f.store, 1, 1);
    if (waiter.waits == 6) waiter.stop = true;
  };
  LoopOptions loop;
  loop.mode = LoopMode::kForever;

  const auto report = outbox::RunRelayLoop(relay, waiter, loop, nullptr);

  CHECK(report.stopped);
  CHECK(report.batches == 1);
  CHECK(report.marked == 1);
  CHECK(waiter.waits == 6);
  // After the batch the idle wait starts over at idle_min_ms.
  CHECK(waiter.timeouts_ms == std::vector<int>{5, 10, 20, 5, 10, 20});
}

TEST_CASE("RunBatch reports each settle to on_settle with its token and the marked and parked "
          "and fenced event ids",
          "[relay]") {
  RelayFixture f;
  f.options.settle.max_attempts = 1;
  f.options.lease_ms = 5000;
  std::vector<outbox::SettleRecord> settles;
  f.options.on_settle = [&](const outbox::SettleRecord& s) { settles.push_back(s); };
  EnqueueAll(f.store, {EventOn(1, "A"), EventOn(2, "B"), EventOn(3, "C")});

  SECTION("marked and parked") {
    RowFailingPublisher publisher;
    publisher.failing = {2};
    Relay relay(f.store, publisher, f.options);
    const BatchReport report = relay.RunBatch();
    REQUIRE(settles.size() == 1);
    CHECK(settles[0].token == report.token);
    CHECK(settles[0].marked == std::vector<std::string>{"evt-1", "evt-3"});
    CHECK(settles[0].parked == std::vector<std::string>{"evt-2"});
    CHECK(settles[0].fenced.empty());
  }
  SECTION("fenced: the lease ran out during the send and another relay took the rows over") {
    FakePublisher other_publisher;
    RelayOptions other_options = f.options;
    other_options.on_settle = nullptr;
    Relay other(f.store, other_publisher, other_options);
    FakePublisher publisher;
    bool took_over = false;
    publisher.on_publish = [&](const std::vector<outbox::OutboundMessage>&) {
      if (took_over) return;
      took_over = true;
      f.clock.AdvanceMs(f.options.lease_ms);  // this relay's lease is gone
      REQUIRE(other.RunBatch().settle.marked == 3);
    };
    Relay relay(f.store, publisher, f.options);
    const BatchReport report = relay.RunBatch();
    CHECK(report.settle.fenced == 3);
    REQUIRE(settles.size() == 1);
    CHECK(settles[0].token == report.token);
    CHECK(settles[0].marked.empty());
    CHECK(settles[0].fenced == std::vector<std::string>{"evt-1", "evt-2", "evt-3"});
  }
}

TEST_CASE("With pipeline depth 2 the loop sends batch N plus 1 before it settles batch N and "
          "marks each row only after its own ack",
          "[relay]") {
  RelayFixture f;
  f.options.batch_size = 2;
  EnqueueRange(f.store, 1, 6);
  outbox::testing::PipelineFakePublisher publisher;
  std::vector<Ids> published_at_send;
  publisher.on_send = [&](const std::vector<outbox::OutboundMessage>&) {
    published_at_send.push_back(f.PublishedIds());
  };
  publisher.on_ack = [&](const std::vector<outbox::OutboundMessage>& messages) {
    for (const outbox::OutboundMessage& m : messages) CHECK_FALSE(IsPublished(f.store, m.outbox_id));
  };
  Relay relay(f.store, publisher, f.options);
  FakeWaiter waiter;
  LoopOptions loop;
  loop.mode = LoopMode::kUntilEmpty;
  loop.pipeline_depth = 2;

  const auto report = outbox::RunRelayLoop(relay, waiter, loop, nullptr);

  CHECK(report.batches == 3);
  CHECK(report.marked == 6);
  CHECK(publisher.max_in_flight == 2);
  CHECK(publisher.log ==
        std::vector<std::string>{"send 1", "send 3", "ack 1", "send 5", "ack 3", "ack 5"});
  // Batch 3..4 went out while 1..2 were unmarked; 5..6 after 1..2 were marked.
  CHECK(published_at_send == std::vector<Ids>{{}, {}, {1, 2}});
  CHECK(f.PublishedIds() == Ids{1, 2, 3, 4, 5, 6});
}

TEST_CASE("With pipeline depth 1 the loop waits for each batch before it claims the next",
          "[relay]") {
  RelayFixture f;
  f.options.batch_size = 2;
  EnqueueRange(f.store, 1, 4);
  outbox::testing::PipelineFakePublisher publisher;
  Relay relay(f.store, publisher, f.options);
  FakeWaiter waiter;
  LoopOptions loop;
  loop.mode = LoopMode::kUntilEmpty;
  loop.pipeline_depth = 1;

  const auto report = outbox::RunRelayLoop(relay, waiter, loop, nullptr);

  CHECK(report.marked == 4);
  CHECK(publisher.max_in_flight == 1);
  CHECK(publisher.log == std::vector<std::string>{"send 1", "ack 1", "send 3", "ack 3"});
}

TEST_CASE("A stop request with two batches in flight settles both before the loop ends",
          "[relay]") {
  RelayFixture f;
  f.options.batch_size = 2;
  EnqueueRange(f.store, 1, 9);
  FakeWaiter waiter;
  outbox::testing::PipelineFakePublisher publisher;
  // SIGTERM arrives while the second batch is in flight.
  publisher.on_send = [&](const std::vector<outbox::OutboundMessage>& messages) {
    if (messages.front().outbox_id == 3) waiter.stop = true;
  };
  Relay relay(f.store, publisher, f.options);
  LoopOptions loop;
  loop.mode = GENERATE(LoopMode::kForever, LoopMode::kUntilEmpty);
  loop.pipeline_depth = 2;

  const auto report = outbox::RunRelayLoop(relay, waiter, loop, nullptr);

  CHECK(report.stopped);
  CHECK(report.batches == 2);
  CHECK(report.marked == 4);
  CHECK(publisher.log == std::vector<std::string>{"send 1", "send 3", "ack 1", "ack 3"});
  CHECK(f.PublishedIds() == Ids{1, 2, 3, 4});
  CHECK(f.store.Status(f.clock.EpochMs()).claimed == 0);
  CHECK(relay.InFlight() == 0);
}

TEST_CASE("With block-key a later row of an aggregate is not claimed while an earlier row of it "
          "is in flight in the pipeline",
          "[relay]") {
  RelayFixture f;
  f.options.batch_size = 1;
  f.options.on_failure = FailureMode::kBlockKey;
  EnqueueAll(f.store, {EventOn(1, "X"), EventOn(2, "X"), EventOn(3, "Y")});
  outbox::testing::PipelineFakePublisher publisher;
  Relay relay(f.store, publisher, f.options);
  FakeWaiter waiter;
  LoopOptions loop;
  loop.mode = LoopMode::kUntilEmpty;
  loop.pipeline_depth = 2;

  const auto report = outbox::RunRelayLoop(relay, waiter, loop, nullptr);

  CHECK(report.marked == 3);
  // Row 2 (X) waits for row 1 (X) to be settled; row 3 (Y) rides along with row 1.
  CHECK(publisher.log ==
        std::vector<std::string>{"send 1", "send 3", "ack 1", "send 2", "ack 3", "ack 2"});
}

TEST_CASE("RunRelayLoop rejects pipeline depth 0 with ConfigError", "[relay]") {
  RelayFixture f;
  FakePublisher publisher;
  Relay relay(f.store, publisher, f.options);
  FakeWaiter waiter;
  LoopOptions loop;
  loop.pipeline_depth = 0;
  CHECK_THROWS_AS(outbox::RunRelayLoop(relay, waiter, loop, nullptr), ConfigError);
}

TEST_CASE("RunRelayLoop says once that rows wait on another relay's lease and until when",
          "[relay]") {
  RelayFixture f;
  EnqueueRange(f.store, 1, 3);
  outbox::ClaimRequest other;
  other.owner = "relay-other@host";
  other.limit = 10;
  other.lease_ms = 30000;
  other.now_ms = kNowMs;
  REQUIRE(f.store.ClaimBatch(other).rows.size() == 3);
  FakePublisher publisher;
  Relay relay(f.store, publisher, f.options);
  FakeWaiter waiter;
  waiter.max_waits = 5;
  waiter.on_wait = [&](int timeout_ms) { f.clock.AdvanceMs(timeout_ms); };
  std::vector<outbox::WaitReport> waits;
  LoopOptions loop;
  loop.mode = LoopMode::kForever;
  loop.on_wait = [&](const outbox::WaitReport& wait) { waits.push_back(wait); };

  const auto report = outbox::RunRelayLoop(relay, waiter, loop, nullptr);

  CHECK(report.stopped);
  CHECK(report.batches == 0);
  CHECK(waiter.waits == 5);
  REQUIRE(waits.size() == 1);  // five idle polls, one wait: said once
  REQUIRE(waits[0].leases.size() == 1);
  CHECK(waits[0].leases[0].owner == "relay-other@host");
  CHECK(waits[0].leases[0].rows == 3);
  CHECK(waits[0].leases[0].until_ms == kNowMs + 30000);
  CHECK(waits[0].backoff.rows == 0);
  CHECK(publisher.calls.empty());
}

TEST_CASE("RunRelayLoop says once that a failed row waits on its backoff and when it is due",
          "[relay]") {
  RelayFixture f;
  f.options.settle.backoff_base_ms = 300;
  EnqueueRange(f.store, 1, 1);
  FakePublisher publisher({false});
  Relay relay(f.store, publisher, f.options);
  FakeWaiter waiter;
  waiter.on_wait = [&](int timeout_ms) { f.clock.AdvanceMs(timeout_ms); };
  std::vector<outbox::WaitReport> waits;
  LoopOptions loop;
  loop.mode = LoopMode::kUntilEmpty;
  loop.on_wait = [&](const outbox::WaitReport& wait) { waits.push_back(wait); };

  const auto report = outbox::RunRelayLoop(relay, waiter, loop, nullptr);

  CHECK(report.marked == 1);
  CHECK(waiter.waits >= 2);
  REQUIRE(waits.size() == 1);
  CHECK(waits[0].leases.empty());
  CHECK(waits[0].backoff.rows == 1);
  CHECK(waits[0].backoff.first_due_ms == kNowMs + 300);
}

TEST_CASE("Relay Waits leaves out the relay's own claims", "[relay]") {
  RelayFixture f;
  EnqueueRange(f.store, 1, 2);
  outbox::ClaimRequest own;
  own.owner = f.options.owner;
  own.limit = 10;
  own.lease_ms = 30000;
  own.now_ms = kNowMs;
  REQUIRE(f.store.ClaimBatch(own).rows.size() == 2);
  FakePublisher publisher;
  Relay relay(f.store, publisher, f.options);
  CHECK(relay.Waits().empty());
}

TEST_CASE("RunBatch reports claim then produce then acked then marking then mark with the claim "
          "token and idle when nothing is claimable",
          "[relay]") {
  RelayFixture f;
  std::vector<std::pair<std::string, std::int64_t>> phases;
  std::vector<std::int64_t> published_at_phase;
  f.options.on_phase = [&](std::string_view phase, std::int64_t token) {
    phases.emplace_back(std::string(phase), token);
    published_at_phase.push_back(f.store.Count().published);
  };
  EnqueueAll(f.store, {EventOn(1, "A"), EventOn(2, "B")});
  FakePublisher publisher;
  std::size_t phases_at_publish = 0;
  publisher.on_publish = [&](const std::vector<outbox::OutboundMessage>&) {
    phases_at_publish = phases.size();
  };
  Relay relay(f.store, publisher, f.options);

  const BatchReport report = relay.RunBatch();
  const BatchReport idle = relay.RunBatch();

  CHECK(report.settle.marked == 2);
  CHECK(idle.claimed == 0);
  using Phases = std::vector<std::pair<std::string, std::int64_t>>;
  CHECK(phases == Phases{{"claim", report.token},
                         {"produce", report.token},
                         {"acked", report.token},
                         {"marking", report.token},
                         {"mark", report.token},
                         {"idle", 0}});
  // The produce phase is recorded before the publisher produces, acked after.
  CHECK(phases_at_publish == 2);
  // marking comes before the settle commits and mark after it.
  CHECK(published_at_phase == std::vector<std::int64_t>{0, 0, 0, 0, 2, 2});
}

TEST_CASE("A lock held past the busy timeout fails a relay until empty with SQLITE_BUSY and makes "
          "a relay forever say it waits once and go on when the lock is gone",
          "[relay]") {
  TempDir dir;
  const std::string path = dir.File("locked.db");
  StoreOptions store_options = FastStoreOptions();
  store_options.busy_timeout_ms = 20;
  Store store(path, store_options, OpenMode::kCreate);
  store.ResetSchema();
  EnqueueRange(store, 1, 2);
  FakeClock clock;
  RelayOptions options;
  options.owner = "relay-test";
  options.clock = &clock;
  FakePublisher publisher;
  Relay relay(store, publisher, options);
  // Another process's write transaction: WAL readers go on, the claim cannot.
  outbox::sqlite::Connection holder(path, SQLITE_OPEN_READWRITE);
  holder.Exec("BEGIN IMMEDIATE");
  LoopOptions loop;
  FakeWaiter waiter;
  std::vector<int> retries;
  loop.on_retry = [&](const outbox::DbError& error, int retry_in_ms) {
    CHECK(error.primary_code() == SQLITE_BUSY);
    retries.push_back(retry_in_ms);
  };

  SECTION("until empty") {
    loop.mode = LoopMode::kUntilEmpty;
    const auto error = CaptureThrow<outbox::DbError>(
        [&] { outbox::RunRelayLoop(relay, waiter, loop, nullptr); });
    REQUIRE(error.has_value());
    CHECK(error->primary_code() == SQLITE_BUSY);
    CHECK(publisher.calls.empty());
    CHECK(retries.empty());
  }
  SECTION("forever") {
    loop.mode = LoopMode::kForever;
    waiter.max_waits = 6;
    waiter.on_wait = [&](int) {
      if (waiter.waits == 3) holder.Exec("COMMIT");  // the other process lets go
    };
    const auto report = outbox::RunRelayLoop(relay, waiter, loop, nullptr);
    CHECK(retries == std::vector<int>{loop.idle_min_ms});
    CHECK(report.marked == 2);
    CHECK(waiter.waits == 6);
  }
}

namespace {

// A clock that moves step_ms forward after every EpochMs reading: a question
// that reads it twice sees two instants.
class SteppingClock : public outbox::Clock {
 public:
  std::int64_t EpochMs() override {
    const std::int64_t now = epoch_ms;
    epoch_ms += step_ms;
    return now;
  }
  std::int64_t MonotonicUs() override { return epoch_ms * 1000; }

  std::int64_t epoch_ms = kNowMs;
  std::int64_t step_ms = 0;
};

}  // namespace

TEST_CASE("CanOnlyWaitForever is false while a row's backoff ends between two readings of the "
          "clock",
          "[relay]") {
  const outbox::Coordination coordination =
      GENERATE(outbox::Coordination::kClaims, outbox::Coordination::kLeader);
  TempDir dir;
  SteppingClock clock;
  StoreOptions store_options = FastStoreOptions();
  store_options.clock = &clock;
  Store store(dir.File("lab.db"), store_options, OpenMode::kCreate);
  store.ResetSchema();
  EnqueueRange(store, 1, 1);
  RowFailingPublisher publisher;
  publisher.failing = {1};
  RelayOptions options;
  options.owner = "relay-a";
  options.clock = &clock;
  options.coordination = coordination;
  options.settle.backoff_base_ms = 100;
  options.settle.backoff_max_ms = 100;
  Relay relay(store, publisher, options);
  REQUIRE(relay.RunBatch().settle.retried == 1);
  const std::int64_t due_at = *IntColumn(store, "next_attempt_at", 1);

  // The first reading falls 1 ms before the row is due, any later one 1 ms after.
  clock.epoch_ms = due_at - 1;
  clock.step_ms = 2;
  CHECK_FALSE(relay.CanOnlyWaitForever());
  clock.step_ms = 0;
  clock.epoch_ms = due_at;
  CHECK_FALSE(relay.CanOnlyWaitForever());  // due now: sendable
}

TEST_CASE("Stalls names the parked row that holds back later rows of its aggregate and how many",
          "[store]") {
  TempDir dir;
  FakeClock clock;
  StoreOptions store_options = FastStoreOptions();
  store_options.clock = &clock;
  Store store(dir.File("lab.db"), store_options, OpenMode::kCreate);
  store.ResetSchema();
  EnqueueAll(store, {EventOn(1, "L-a"), EventOn(2, "L-a"), EventOn(3, "L-b"), EventOn(4, "L-a"),
                     EventOn(5, "L-c")});
  CHECK(store.Stalls(10).empty());
  outbox::ClaimRequest request;
  request.owner = "relay-a";
  request.now_ms = kNowMs;
  const outbox::Claim claim = store.ClaimBatch(request);  // 1, 3, 5: one row per aggregate
  REQUIRE(IdsOf(claim.rows) == Ids{1, 3, 5});
  store.SettleBatch(claim.token, {5}, {{1, "poison", true}, {3, "poison", true}},
                    outbox::SettlePolicy{}, kNowMs);

  const std::vector<outbox::Stall> stalls = store.Stalls(10);
  REQUIRE(stalls.size() == 1);  // row 3 is parked too, but nothing of L-b waits behind it
  CHECK(stalls[0].parked_id == 1);
  CHECK(stalls[0].event_id == MakeEvent(1).event_id);
  CHECK(stalls[0].aggregate_id == "L-a");
  CHECK(stalls[0].rows_held == 2);
}

TEST_CASE("SameWait takes a wait whose times moved by less than a second for the one reported",
          "[relay]") {
  outbox::WaitReport a;
  a.leases = {{"relay-1@host", 5, 1'700'000'049'259}};
  a.backoff = {2, 1'700'000'010'000};
  outbox::WaitReport b = a;
  b.leases[0].until_ms += 1;  // PostgreSQL's lease end, read again a poll later
  b.backoff.first_due_ms -= 1;
  CHECK(outbox::SameWait(a, b));
  b.leases[0].until_ms += 1000;  // a new claim
  CHECK_FALSE(outbox::SameWait(a, b));
  b = a;
  b.leases[0].rows = 6;
  CHECK_FALSE(outbox::SameWait(a, b));
  b = a;
  b.leases.push_back({"relay-2@host", 1, 1'700'000'049'259});
  CHECK_FALSE(outbox::SameWait(a, b));
}
