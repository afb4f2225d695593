// Leader mode (relay --coordination leader): the store's lease row with its
// growing fencing token, the leader's page read without claims, the settle
// fenced by the lease token, and the relay's leader and standby roles. Time
// comes from a FakeClock moved by the test: no sleeps.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "outbox/relay.h"
#include "outbox/store.h"
#include "relay_test_support.h"
#include "test_support.h"

namespace {

using outbox::Coordination;
using outbox::FailedDelivery;
using outbox::FailureMode;
using outbox::LeaderLease;
using outbox::LeaseAcquisition;
using outbox::LeaseEvent;
using outbox::OpenMode;
using outbox::PageRequest;
using outbox::Relay;
using outbox::RelayOptions;
using outbox::SettlePolicy;
using outbox::SettleReport;
using outbox::Store;
using outbox::testing::EnqueueAll;
using outbox::testing::EnqueueRange;
using outbox::testing::EventOn;
using outbox::testing::FakeClock;
using outbox::testing::FakePublisher;
using outbox::testing::FastStoreOptions;
using outbox::testing::IdsOf;
using outbox::testing::IntColumn;
using outbox::testing::IsPublished;
using outbox::testing::kNowMs;
using outbox::testing::PipelineFakePublisher;
using outbox::testing::RowFailingPublisher;
using outbox::testing::TempDir;
using Ids = std::vector<std::int64_t>;

constexpr std::int64_t kLeaseMs = 3000;

class LeaderFixture {
 public:
  LeaderFixture() : store(dir.File("lab.db"), Options(clock), OpenMode::kCreate) {
    store.ResetSchema();
  }

  static outbox::StoreOptions Options(FakeClock& clock) {
    outbox::StoreOptions options = FastStoreOptions();
    options.clock = &clock;
    return options;
  }

  RelayOptions LeaderOptions(const std::string& owner) {
    RelayOptions options;
    options.owner = owner;
    options.clock = &clock;
    options.coordination = Coordination::kLeader;
    options.lease_ms = kLeaseMs;
    options.batch_size = 100;
    options.settle.backoff_base_ms = 100;
    options.settle.backoff_max_ms = 1000;
    return options;
  }

  std::vector<outbox::OutboxRow> Page(std::optional<std::int64_t> after_id = std::nullopt,
                                      std::int64_t limit = 100) {
    PageRequest request;
    request.after_id = after_id;
    request.limit = limit;
    request.now_ms = clock.EpochMs();
    return store.ReadPage(request);
  }

  TempDir dir;
  FakeClock clock;
  Store store;
};

std::vector<std::string> Kinds(const std::vector<LeaseEvent>& events) {
  std::vector<std::string> out;
  for (const LeaseEvent& e : events)
    out.push_back((e.kind == LeaseEvent::Kind::kAcquired ? "acquired "
                   : e.kind == LeaseEvent::Kind::kLost   ? "lost "
                                                         : "released ") +
                  std::to_string(e.lease.token));
  return out;
}

}  // namespace

TEST_CASE("A fresh database has no leader and the first AcquireLease takes token 1 for the lease "
          "duration",
          "[store]") {
  LeaderFixture f;
  CHECK(f.store.ReadLease() == LeaderLease{"", 0, 0, 0});

  const LeaseAcquisition got = f.store.AcquireLease("relay-a", kLeaseMs, kNowMs);

  CHECK(got.acquired);
  CHECK(got.lease == LeaderLease{"relay-a", 1, kNowMs + kLeaseMs, kNowMs});
  CHECK(got.previous.token == 0);
  CHECK(got.previous.owner.empty());
  CHECK(f.store.ReadLease() == got.lease);
  CHECK(f.store.ReadLease().Live(kNowMs + kLeaseMs - 1));
  CHECK_FALSE(f.store.ReadLease().Live(kNowMs + kLeaseMs));
}

TEST_CASE("A live lease is not stolen by another owner nor by a second process with the same "
          "owner name",
          "[store]") {
  LeaderFixture f;
  REQUIRE(f.store.AcquireLease("relay-a", kLeaseMs, kNowMs).acquired);

  for (const std::string owner : {"relay-b", "relay-a"}) {
    INFO(owner);
    const LeaseAcquisition got = f.store.AcquireLease(owner, kLeaseMs, kNowMs + kLeaseMs - 1);
    CHECK_FALSE(got.acquired);
    CHECK(got.lease == LeaderLease{"relay-a", 1, kNowMs + kLeaseMs, kNowMs});
  }
  CHECK(f.store.ReadLease() == LeaderLease{"relay-a", 1, kNowMs + kLeaseMs, kNowMs});
}

TEST_CASE("RenewLease extends the current term and keeps its token and never shortens it",
          "[store]") {
  LeaderFixture f;
  REQUIRE(f.store.AcquireLease("relay-a", kLeaseMs, kNowMs).acquired);

  CHECK(f.store.RenewLease(1, kLeaseMs, kNowMs + 2000));
  CHECK(f.store.ReadLease() == LeaderLease{"relay-a", 1, kNowMs + 5000, kNowMs});
  // A renewal with a shorter horizon (a slower clock reading) keeps the later end.
  CHECK(f.store.RenewLease(1, 1000, kNowMs + 2500));
  CHECK(f.store.ReadLease().until_ms == kNowMs + 5000);
  // A term that ran out with no takeover is still current: renewing it is safe.
  CHECK(f.store.RenewLease(1, kLeaseMs, kNowMs + 9000));
  CHECK(f.store.ReadLease() == LeaderLease{"relay-a", 1, kNowMs + 12000, kNowMs});
  CHECK_FALSE(f.store.RenewLease(2, kLeaseMs, kNowMs + 9000));
}

TEST_CASE("A lapsed lease is taken over with the previous token plus one and the old term can "
          "no longer renew",
          "[store]") {
  LeaderFixture f;
  REQUIRE(f.store.AcquireLease("relay-a", kLeaseMs, kNowMs).acquired);

  const LeaseAcquisition got = f.store.AcquireLease("relay-b", kLeaseMs, kNowMs + kLeaseMs);

  CHECK(got.acquired);
  CHECK(got.lease == LeaderLease{"relay-b", 2, kNowMs + 2 * kLeaseMs, kNowMs + kLeaseMs});
  CHECK(got.previous == LeaderLease{"relay-a", 1, kNowMs + kLeaseMs, kNowMs});
  CHECK_FALSE(f.store.RenewLease(1, kLeaseMs, kNowMs + kLeaseMs + 1));
  CHECK(f.store.ReadLease().owner == "relay-b");

  SECTION("a released lease is taken at once with the next token") {
    CHECK(f.store.ReleaseLease(2));
    CHECK_FALSE(f.store.ReleaseLease(1));
    const LeaseAcquisition again = f.store.AcquireLease("relay-a", kLeaseMs, kNowMs + kLeaseMs + 1);
    CHECK(again.acquired);
    CHECK(again.lease.token == 3);
  }
}

TEST_CASE("AcquireLease and SettleUnderLease refuse a lease duration that is not positive",
          "[store]") {
  LeaderFixture f;
  CHECK_THROWS_AS(f.store.AcquireLease("relay-a", 0, kNowMs), outbox::ConfigError);
  CHECK_THROWS_AS(f.store.RenewLease(1, -5, kNowMs), outbox::ConfigError);
  CHECK_THROWS_AS(f.store.SettleUnderLease(1, {}, {}, SettlePolicy{}, kNowMs, 0),
                  outbox::ConfigError);
}

TEST_CASE("ReadPage returns unpublished rows in id order past the cursor and writes no claim",
          "[store]") {
  LeaderFixture f;
  EnqueueRange(f.store, 1, 5);

  CHECK(IdsOf(f.Page()) == Ids{1, 2, 3, 4, 5});
  CHECK(IdsOf(f.Page(2, 2)) == Ids{3, 4});
  for (std::int64_t id : Ids{1, 2, 3, 4, 5}) {
    INFO("row " << id);
    CHECK_FALSE(IntColumn(f.store, "claim_token", id).has_value());
    CHECK_FALSE(IntColumn(f.store, "claimed_at", id).has_value());
  }
}

TEST_CASE("A stale leader's settle is fenced out and leaves its rows unpublished for the new "
          "leader",
          "[store]") {
  LeaderFixture f;
  EnqueueRange(f.store, 1, 3);
  REQUIRE(f.store.AcquireLease("relay-a", kLeaseMs, kNowMs).acquired);
  REQUIRE(IdsOf(f.Page()) == Ids{1, 2, 3});
  // relay-a stalls past its lease; relay-b takes over and reads the same rows.
  REQUIRE(f.store.AcquireLease("relay-b", kLeaseMs, kNowMs + kLeaseMs + 1).acquired);

  const SettleReport stale = f.store.SettleUnderLease(1, {1, 2}, {{3, "broker said no"}},
                                                      SettlePolicy{}, kNowMs + kLeaseMs + 2,
                                                      kLeaseMs);

  CHECK(stale.fenced_out);
  CHECK(stale.marked == 0);
  CHECK(stale.retried == 0);
  CHECK(stale.fenced == 3);
  CHECK(stale.fenced_ids == Ids{1, 2, 3});
  for (std::int64_t id : Ids{1, 2, 3}) {
    INFO("row " << id);
    CHECK_FALSE(IsPublished(f.store, id));
    CHECK(IntColumn(f.store, "attempts", id) == 0);
  }
  // The stale settle did not renew the new leader's lease either.
  CHECK(f.store.ReadLease() ==
        LeaderLease{"relay-b", 2, kNowMs + 2 * kLeaseMs + 1, kNowMs + kLeaseMs + 1});

  const SettleReport current = f.store.SettleUnderLease(2, {1, 2, 3}, {}, SettlePolicy{},
                                                        kNowMs + kLeaseMs + 3, kLeaseMs);
  CHECK_FALSE(current.fenced_out);
  CHECK(current.marked_ids == Ids{1, 2, 3});
  CHECK(f.store.Count().unpublished == 0);
  // The settle renewed the term: now + lease.
  CHECK(f.store.ReadLease().until_ms == kNowMs + 2 * kLeaseMs + 3);
}

TEST_CASE("SettleUnderLease backs off and then parks a failing row like SettleBatch", "[store]") {
  LeaderFixture f;
  EnqueueRange(f.store, 1, 1);
  REQUIRE(f.store.AcquireLease("relay-a", kLeaseMs, kNowMs).acquired);
  SettlePolicy policy;
  policy.max_attempts = 2;
  policy.backoff_base_ms = 100;

  const SettleReport first =
      f.store.SettleUnderLease(1, {}, {{1, "timed out"}}, policy, kNowMs, kLeaseMs);
  CHECK(first.retried == 1);
  CHECK(IntColumn(f.store, "attempts", 1) == 1);
  CHECK(IntColumn(f.store, "next_attempt_at", 1) == kNowMs + 100);
  CHECK(f.Page().empty());  // in backoff until kNowMs + 100

  f.clock.AdvanceMs(100);
  REQUIRE(IdsOf(f.Page()) == Ids{1});
  const SettleReport second =
      f.store.SettleUnderLease(1, {}, {{1, "timed out"}}, policy, kNowMs + 100, kLeaseMs);
  CHECK(second.parked_ids == Ids{1});
  CHECK(IntColumn(f.store, "parked_at", 1) == kNowMs + 100);
}

TEST_CASE("ReadPage under block-key returns only the oldest unpublished row of each aggregate",
          "[store]") {
  LeaderFixture f;
  EnqueueAll(f.store, {EventOn(1, "L-a"), EventOn(2, "L-a"), EventOn(3, "L-b"), EventOn(4, "L-a"),
                       EventOn(5, "L-b")});
  CHECK(IdsOf(f.Page()) == Ids{1, 3});  // 2 and 4 wait for 1, 5 for 3: never tried or not

  REQUIRE(f.store.AcquireLease("relay-a", kLeaseMs, kNowMs).acquired);
  SettlePolicy policy;
  policy.backoff_base_ms = 100;
  REQUIRE(f.store.SettleUnderLease(1, {3}, {{1, "timed out"}}, policy, kNowMs, kLeaseMs).retried ==
          1);

  CHECK(IdsOf(f.Page()) == Ids{5});  // 1 in backoff holds back 2 and 4
  f.clock.AdvanceMs(100);
  CHECK(IdsOf(f.Page()) == Ids{1, 5});  // row 1 due again; 2 and 4 still wait for it
  CHECK(IdsOf(f.Page(1)) == Ids{5});    // past the cursor: not 2, whose row 1 is unpublished
  PageRequest skip;
  skip.limit = 100;
  skip.now_ms = f.clock.EpochMs();
  skip.block_key = false;
  CHECK(IdsOf(f.store.ReadPage(skip)) == Ids{1, 2, 4, 5});
}

TEST_CASE("In leader mode one relay leads and a second stands by and reports the leader until "
          "the lease lapses",
          "[relay]") {
  LeaderFixture f;
  EnqueueRange(f.store, 1, 4);
  FakePublisher publisher_a;
  FakePublisher publisher_b;
  std::vector<LeaseEvent> events_a;
  std::vector<LeaseEvent> events_b;
  RelayOptions options_a = f.LeaderOptions("relay-a");
  options_a.on_lease = [&](const LeaseEvent& e) { events_a.push_back(e); };
  RelayOptions options_b = f.LeaderOptions("relay-b");
  options_b.on_lease = [&](const LeaseEvent& e) { events_b.push_back(e); };
  Relay a(f.store, publisher_a, options_a);
  Relay b(f.store, publisher_b, options_b);

  const outbox::BatchReport first = a.RunBatch();
  CHECK(first.token == 1);
  CHECK(first.settle.marked == 4);
  CHECK(a.LeaseToken() == 1);

  EnqueueRange(f.store, 5, 6);
  CHECK_FALSE(b.HasClaimable());
  CHECK(b.RunBatch().claimed == 0);
  CHECK(publisher_b.calls.empty());
  const outbox::WaitReport wait = b.Waits();
  CHECK(wait.leader.owner == "relay-a");
  CHECK(wait.leader.token == 1);
  CHECK(wait.leader.until_ms == kNowMs + kLeaseMs);
  CHECK(wait.leader.rows == 2);
  CHECK_FALSE(b.CanOnlyWaitForever());

  // relay-a says nothing for a whole lease: relay-b takes over with token 2.
  f.clock.AdvanceMs(kLeaseMs);
  const outbox::BatchReport taken = b.RunBatch();
  CHECK(taken.token == 2);
  CHECK(taken.settle.marked == 2);
  REQUIRE(publisher_b.calls.size() == 1);
  CHECK(IdsOf(publisher_b.calls[0]) == Ids{5, 6});
  CHECK(Kinds(events_b) == std::vector<std::string>{"acquired 2"});
  REQUIRE(events_b.size() == 1);
  CHECK(events_b[0].previous.owner == "relay-a");

  // relay-a finds out at its next batch that it no longer leads, and sends nothing.
  EnqueueRange(f.store, 7, 7);
  CHECK(a.RunBatch().claimed == 0);
  CHECK(a.LeaseToken() == 0);
  CHECK(publisher_a.calls.size() == 1);
  CHECK(Kinds(events_a) == std::vector<std::string>{"acquired 1", "lost 1"});
}

TEST_CASE("A leader that renews within its lease keeps it while a standby polls", "[relay]") {
  LeaderFixture f;
  FakePublisher publisher_a;
  FakePublisher publisher_b;
  Relay a(f.store, publisher_a, f.LeaderOptions("relay-a"));
  Relay b(f.store, publisher_b, f.LeaderOptions("relay-b"));
  REQUIRE(a.Lead());

  for (int i = 0; i < 10; ++i) {
    f.clock.AdvanceMs(kLeaseMs / 2);  // idle polls: a renews once half its lease is gone
    CHECK(a.Lead());
    CHECK_FALSE(b.Lead());
  }
  CHECK(f.store.ReadLease().token == 1);
  CHECK(f.store.ReadLease().until_ms == kNowMs + 5 * kLeaseMs + kLeaseMs);
}

TEST_CASE("A leader paused past its lease is fenced out at its settle and the new leader sends "
          "its rows again",
          "[relay]") {
  LeaderFixture f;
  EnqueueRange(f.store, 1, 3);
  PipelineFakePublisher publisher_a;
  FakePublisher publisher_b;
  Relay a(f.store, publisher_a, f.LeaderOptions("relay-a"));
  Relay b(f.store, publisher_b, f.LeaderOptions("relay-b"));

  REQUIRE(a.StartBatch());  // rows 1..3 sent; a stops before its settle (SIGSTOP)
  f.clock.AdvanceMs(kLeaseMs + 1);
  const outbox::BatchReport taken = b.RunBatch();
  CHECK(taken.token == 2);
  CHECK(taken.settle.marked_ids == Ids{1, 2, 3});

  const outbox::BatchReport stale = a.FinishBatch();  // SIGCONT
  CHECK(stale.token == 1);
  CHECK(stale.acked == 3);
  CHECK(stale.settle.fenced_out);
  CHECK(stale.settle.marked == 0);
  CHECK(stale.settle.fenced_ids == Ids{1, 2, 3});
  CHECK(a.LeaseToken() == 0);
  CHECK(f.store.ReadLease().owner == "relay-b");
  CHECK(f.store.Count().unpublished == 0);
}

TEST_CASE("In leader mode a new pass of the cursor skips the rows still in flight", "[relay]") {
  LeaderFixture f;
  EnqueueRange(f.store, 1, 3);
  PipelineFakePublisher publisher;
  RelayOptions options = f.LeaderOptions("relay-a");
  options.batch_size = 2;
  Relay relay(f.store, publisher, options);

  CHECK(relay.StartBatch());        // 1, 2
  CHECK(relay.StartBatch());        // 3
  CHECK_FALSE(relay.StartBatch());  // the end: a new pass finds only rows in flight
  EnqueueRange(f.store, 4, 4);
  CHECK(relay.StartBatch());        // 4, found on the new pass past the rows in flight
  CHECK(publisher.log == std::vector<std::string>{"send 1", "send 3", "send 4"});
  for (int i = 0; i < 3; ++i) CHECK(relay.FinishBatch().settle.marked > 0);
  CHECK(f.store.Count().unpublished == 0);
}

TEST_CASE("In leader mode block-key sends one row per aggregate at a time and a retry before "
          "the later rows of its aggregate",
          "[relay]") {
  LeaderFixture f;
  EnqueueAll(f.store, {EventOn(1, "L-a"), EventOn(2, "L-b")});
  RowFailingPublisher publisher;
  publisher.failing = {1};
  RelayOptions options = f.LeaderOptions("relay-a");
  options.on_failure = FailureMode::kBlockKey;
  Relay relay(f.store, publisher, options);

  const outbox::BatchReport first = relay.RunBatch();
  CHECK(first.acked == 1);
  CHECK(first.settle.retried == 1);  // row 1 in backoff for 100 ms

  EnqueueAll(f.store, {EventOn(3, "L-a"), EventOn(4, "L-a"), EventOn(5, "L-b"), EventOn(6, "L-b")});
  const outbox::BatchReport second = relay.RunBatch();
  REQUIRE(publisher.calls.size() == 2);
  CHECK(IdsOf(publisher.calls[1]) == Ids{5});  // one row of L-b; L-a waits behind row 1
  CHECK(relay.RunBatch().settle.marked_ids == Ids{6});

  publisher.failing.clear();
  f.clock.AdvanceMs(100);
  CHECK(relay.RunBatch().settle.marked_ids == Ids{1});  // the retry, alone of its aggregate
  CHECK(relay.RunBatch().settle.marked_ids == Ids{3});
  CHECK(relay.RunBatch().settle.marked_ids == Ids{4});
  CHECK(f.store.Count().unpublished == 0);
  CHECK(second.settle.marked == 1);
}

// The field's report: one transaction writes a1, a2 of L-A, 50 other loans and
// a3 of L-A; a1 failed once before. A leader with two batches in flight read
// past a2 (held back behind a1, in flight) and sent a3 on before a2.
TEST_CASE("In leader mode a row held back behind a retry in flight is sent before the later "
          "rows of its aggregate",
          "[relay]") {
  LeaderFixture f;
  std::vector<outbox::OutboxEvent> events = {EventOn(1, "L-A"), EventOn(2, "L-A")};
  for (int i = 3; i <= 52; ++i) events.push_back(EventOn(i, "L-" + std::to_string(i)));
  events.push_back(EventOn(53, "L-A"));
  EnqueueAll(f.store, events);
  {
    RowFailingPublisher failing_once;
    failing_once.failing = {1};
    RelayOptions once = f.LeaderOptions("relay-a");
    once.batch_size = 1;
    Relay relay(f.store, failing_once, once);
    REQUIRE(relay.RunBatch().settle.retried == 1);
    relay.Resign();
  }
  f.clock.AdvanceMs(100);  // row 1's backoff ends

  PipelineFakePublisher publisher;
  std::vector<std::int64_t> sent_of_a;
  publisher.on_send = [&](const std::vector<outbox::OutboundMessage>& messages) {
    for (const outbox::OutboundMessage& m : messages)
      if (m.outbox_id == 1 || m.outbox_id == 2 || m.outbox_id == 53) sent_of_a.push_back(m.outbox_id);
  };
  RelayOptions options = f.LeaderOptions("relay-b");
  options.batch_size = 10;
  options.key = outbox::KeyChoice::kAggregateId;
  Relay relay(f.store, publisher, options);
  outbox::testing::FakeWaiter waiter;
  outbox::LoopOptions loop;
  loop.mode = outbox::LoopMode::kUntilEmpty;
  loop.pipeline_depth = 2;
  const outbox::LoopReport report = outbox::RunRelayLoop(relay, waiter, loop, nullptr);

  CHECK(sent_of_a == Ids{1, 2, 53});
  CHECK(report.marked == 53);
  CHECK(f.store.Count().unpublished == 0);
}

TEST_CASE("Resign releases the lease so a standby takes over at once with the next token",
          "[relay]") {
  LeaderFixture f;
  FakePublisher publisher_a;
  FakePublisher publisher_b;
  std::vector<LeaseEvent> events;
  RelayOptions options_a = f.LeaderOptions("relay-a");
  options_a.on_lease = [&](const LeaseEvent& e) { events.push_back(e); };
  Relay a(f.store, publisher_a, options_a);
  Relay b(f.store, publisher_b, f.LeaderOptions("relay-b"));
  REQUIRE(a.Lead());
  REQUIRE_FALSE(b.Lead());

  a.Resign();

  CHECK(Kinds(events) == std::vector<std::string>{"acquired 1", "released 1"});
  CHECK(b.Lead());
  CHECK(b.LeaseToken() == 2);
}

TEST_CASE("In claims mode Lead is false and the lease row is never touched", "[relay]") {
  LeaderFixture f;
  EnqueueRange(f.store, 1, 2);
  FakePublisher publisher;
  RelayOptions options = f.LeaderOptions("relay-a");
  options.coordination = Coordination::kClaims;
  Relay relay(f.store, publisher, options);

  CHECK_FALSE(relay.Lead());
  CHECK(relay.RunBatch().settle.marked == 2);
  CHECK(f.store.ReadLease() == LeaderLease{"", 0, 0, 0});
  CHECK(outbox::ParseCoordination("leader") == Coordination::kLeader);
  CHECK(outbox::ParseCoordination("claims") == Coordination::kClaims);
  CHECK_THROWS_AS(outbox::ParseCoordination("elected"), outbox::ConfigError);
}

TEST_CASE("In leader mode the loop drains with two batches in flight and sends each row once",
          "[relay]") {
  LeaderFixture f;
  EnqueueRange(f.store, 1, 7);
  PipelineFakePublisher publisher;
  RelayOptions options = f.LeaderOptions("relay-a");
  options.batch_size = 2;
  Relay relay(f.store, publisher, options);
  outbox::testing::FakeWaiter waiter;
  outbox::LoopOptions loop;
  loop.mode = outbox::LoopMode::kUntilEmpty;
  loop.pipeline_depth = 2;

  const outbox::LoopReport report = outbox::RunRelayLoop(relay, waiter, loop, nullptr);

  CHECK(report.batches == 4);
  CHECK(report.marked == 7);
  CHECK(report.fenced == 0);
  CHECK(publisher.max_in_flight == 2);
  CHECK(publisher.log == std::vector<std::string>{"send 1", "send 3", "ack 1", "send 5", "ack 3",
                                                  "send 7", "ack 5", "ack 7"});
  CHECK(f.store.Count().unpublished == 0);
}

TEST_CASE("A standby loop reports the leader once and takes over when the lease lapses",
          "[relay]") {
  LeaderFixture f;
  EnqueueRange(f.store, 1, 3);
  FakePublisher publisher_a;
  FakePublisher publisher_b;
  Relay a(f.store, publisher_a, f.LeaderOptions("relay-a"));
  REQUIRE(a.Lead());  // relay-a leads, then dies without a word
  std::vector<LeaseEvent> events;
  RelayOptions options_b = f.LeaderOptions("relay-b");
  options_b.on_lease = [&](const LeaseEvent& e) { events.push_back(e); };
  Relay b(f.store, publisher_b, options_b);
  outbox::testing::FakeWaiter waiter;
  waiter.on_wait = [&](int) { f.clock.AdvanceMs(1000); };
  std::vector<outbox::WaitReport> waits;
  outbox::LoopOptions loop;
  loop.mode = outbox::LoopMode::kUntilEmpty;
  loop.on_wait = [&](const outbox::WaitReport& wait) { waits.push_back(wait); };

  const outbox::LoopReport report = outbox::RunRelayLoop(b, waiter, loop, nullptr);

  CHECK(report.marked == 3);
  CHECK(waiter.waits == 3);  // at 1000, 2000 and 3000 ms past relay-a's acquisition
  REQUIRE(waits.size() == 1);
  CHECK(waits[0].leader.owner == "relay-a");
  CHECK(waits[0].leader.token == 1);
  CHECK(waits[0].leader.rows == 3);
  CHECK(Kinds(events) == std::vector<std::string>{"acquired 2"});
  REQUIRE(publisher_b.calls.size() == 1);
  CHECK(IdsOf(publisher_b.calls[0]) == Ids{1, 2, 3});
}

TEST_CASE("SettleUnderLease marks runs of acked ids and counts a row already published as fenced",
          "[store]") {
  LeaderFixture f;
  EnqueueRange(f.store, 1, 7);
  REQUIRE(f.store.AcquireLease("relay-a", kLeaseMs, kNowMs).acquired);
  REQUIRE(f.store.MarkPublished(Ids{3}) == 1);  // published meanwhile by another relay's term
  const std::int64_t settled_at = kNowMs + 5;

  // Runs 1-4 and 6-7, in acked's own order, with 1 acked twice; row 5 was not acked.
  const SettleReport report =
      f.store.SettleUnderLease(1, {4, 1, 2, 3, 7, 6, 1}, {}, SettlePolicy{}, settled_at, kLeaseMs);

  CHECK_FALSE(report.fenced_out);
  CHECK(report.marked_ids == Ids{4, 1, 2, 7, 6});
  CHECK(report.marked == 5);
  CHECK(report.fenced_ids == Ids{3, 1});
  CHECK(report.fenced == 2);
  CHECK_FALSE(IsPublished(f.store, 5));
  for (std::int64_t id : Ids{1, 2, 4, 6, 7}) {
    INFO("row " << id);
    CHECK(IsPublished(f.store, id));
    CHECK(IntColumn(f.store, "published_at", id) == settled_at);
  }
  CHECK(IntColumn(f.store, "published_at", 3) != settled_at);
}

TEST_CASE("SettleUnderLease marks a batch of consecutive ids all at once", "[store]") {
  LeaderFixture f;
  EnqueueRange(f.store, 1, 1000);
  REQUIRE(f.store.AcquireLease("relay-a", kLeaseMs, kNowMs).acquired);
  Ids acked;
  for (std::int64_t id = 1; id <= 1000; ++id) acked.push_back(id);

  const SettleReport report =
      f.store.SettleUnderLease(1, acked, {}, SettlePolicy{}, kNowMs + 1, kLeaseMs);

  CHECK(report.marked == 1000);
  CHECK(report.marked_ids == acked);
  CHECK(report.fenced == 0);
  CHECK(f.store.Count().unpublished == 0);
}

TEST_CASE("SettleUnderLease settles again when a run falls short and records each failure once",
          "[store]") {
  LeaderFixture f;
  EnqueueRange(f.store, 1, 5);
  REQUIRE(f.store.AcquireLease("relay-a", kLeaseMs, kNowMs).acquired);
  REQUIRE(f.store.MarkPublished(Ids{2}) == 1);  // the run 1-3 falls short: the first try rolls back
  SettlePolicy policy;
  policy.backoff_base_ms = 100;

  // Row 4's failure is recorded after the mark: only the second try's may stay.
  const SettleReport report =
      f.store.SettleUnderLease(1, {1, 2, 3}, {{4, "timed out"}}, policy, kNowMs + 5, kLeaseMs);

  CHECK(report.marked_ids == Ids{1, 3});
  CHECK(report.fenced_ids == Ids{2});
  CHECK(report.retried == 1);
  CHECK(IntColumn(f.store, "attempts", 4) == 1);
  CHECK(IntColumn(f.store, "next_attempt_at", 4) == kNowMs + 5 + 100);
  CHECK_FALSE(IsPublished(f.store, 4));
  CHECK_FALSE(IsPublished(f.store, 5));
  CHECK(IntColumn(f.store, "published_at", 1) == kNowMs + 5);
}

namespace {

// One row's state for the hold-back model below.
enum class RowState { kPending, kPublished, kParked, kBackoff, kFailedDue, kDelayed, kClaimed };

// Puts row id in state (raw SQL, as another relay, an operator or a writer would leave it).
void SetState(Store& store, std::int64_t id, RowState state) {
  const std::int64_t later = kNowMs + 60'000;
  std::string sql;
  switch (state) {
    case RowState::kPending: return;
    case RowState::kPublished: sql = "published = 1, published_at = 1"; break;
    case RowState::kParked: sql = "attempts = 3, parked_at = 1, last_error = 'x'"; break;
    case RowState::kBackoff:
      sql = "attempts = 1, next_attempt_at = " + std::to_string(later);
      break;
    case RowState::kFailedDue: sql = "attempts = 2, next_attempt_at = 1"; break;
    case RowState::kDelayed: sql = "not_before = " + std::to_string(later); break;
    case RowState::kClaimed:
      sql = "claim_token = 7, claim_owner = 'other', claim_until = " + std::to_string(later);
      break;
  }
  auto txn = store.BeginWrite();
  txn.connection().Exec("UPDATE outbox SET " + sql + " WHERE id = " + std::to_string(id));
  txn.Commit();
}

}  // namespace

namespace {

// The rows ReadPage must return, from the rule itself: in id order past after_id, each row that
// is pending or failed and due, with no earlier row of its aggregate unpublished (any state but
// published, in flight included), at most limit.
Ids ExpectedPage(const std::vector<std::string>& aggregates, const std::vector<RowState>& states,
                 std::int64_t after_id, std::int64_t limit) {
  Ids page;
  for (std::size_t i = 0; i < states.size(); ++i) {
    if (static_cast<std::int64_t>(page.size()) == limit) break;
    const auto id = static_cast<std::int64_t>(i) + 1;
    if (id <= after_id) continue;
    if (states[i] != RowState::kPending && states[i] != RowState::kFailedDue) continue;
    bool held = false;
    for (std::size_t j = 0; j < i; ++j)
      held = held || (aggregates[j] == aggregates[i] && states[j] != RowState::kPublished);
    if (!held) page.push_back(id);
  }
  return page;
}

}  // namespace

TEST_CASE("ReadPage decides the hold-back once per page only when every unpublished row below "
          "the cursor is in flight and returns the rows of the per-row rule",
          "[store][ordering]") {
  // 400 random tables of 40 rows on 5 aggregates, each row in one state; the rows in flight are
  // either every unpublished row up to the cursor (the once-per-page path, unless their runs of
  // ids leave more than 8 gaps) or a random part of them (a row below the cursor not in flight:
  // the per-row path).
  std::mt19937 random(20261202);
  const std::vector<RowState> kStates = {
      RowState::kPending,   RowState::kPublished, RowState::kParked, RowState::kBackoff,
      RowState::kFailedDue, RowState::kDelayed,   RowState::kClaimed};
  int once = 0;
  int per_row = 0;
  std::int64_t by_heads = 0;
  for (int round = 0; round < 400; ++round) {
    LeaderFixture f;
    std::vector<std::string> aggregates;
    std::vector<outbox::OutboxEvent> events;
    for (int i = 1; i <= 40; ++i) {
      aggregates.push_back("L-" + std::to_string(random() % 5));
      events.push_back(EventOn(i, aggregates.back()));
    }
    EnqueueAll(f.store, events);
    std::vector<RowState> states;
    for (int i = 1; i <= 40; ++i) {
      // Mostly published or pending, as in a drain; now and then a failed or held row.
      const unsigned pick = random() % 20;
      states.push_back(pick < 8    ? RowState::kPublished
                       : pick < 14 ? RowState::kPending
                                   : kStates[pick % 7]);
      SetState(f.store, i, states.back());
    }
    const std::int64_t after_id = random() % 41;
    const bool all_in_flight = round % 2 == 0;
    PageRequest request;
    request.after_id = after_id;
    request.limit = 1 + random() % 12;
    request.now_ms = f.clock.EpochMs();
    bool some_left_out = false;
    for (std::int64_t id = 1; id <= 40; ++id) {
      if (states[id - 1] == RowState::kPublished) continue;
      const bool below = id <= after_id;
      if (below && !all_in_flight && random() % 2 == 0) {
        some_left_out = true;
        continue;
      }
      // Rows past the cursor join the rows in flight at random too: the page reads past them.
      if (below || random() % 3 == 0) request.in_flight.push_back({id, aggregates[id - 1]});
    }
    // One round in three with a scan budget of 1 to 8 rows: past it the page comes from each
    // aggregate's oldest unpublished row when at most that many aggregates have some.
    if (round % 3 == 1) request.scan_budget = 1 + static_cast<std::int64_t>(random() % 8);
    const std::int64_t before = f.store.pages_held_back_once();
    const std::int64_t heads_before = f.store.pages_by_heads();
    const Ids page = IdsOf(f.store.ReadPage(request));
    const bool was_once = f.store.pages_held_back_once() == before + 1;
    INFO("round " << round << ", after id " << after_id << ", limit " << request.limit
                  << ", scan budget " << request.scan_budget);
    CHECK(page == ExpectedPage(aggregates, states, after_id, request.limit));
    CHECK_FALSE((was_once && some_left_out));  // a row left out below the cursor: per row
    (was_once ? once : per_row) += 1;
    by_heads += f.store.pages_by_heads() - heads_before;
  }
  CHECK(once >= 150);
  CHECK(per_row >= 50);
  CHECK(by_heads >= 30);
}

TEST_CASE("ReadPage holds back an aggregate behind an earlier parked or backing-off or failed or "
          "in-flight row below the cursor",
          "[store][ordering]") {
  for (RowState earlier : {RowState::kParked, RowState::kBackoff, RowState::kFailedDue,
                           RowState::kDelayed, RowState::kClaimed, RowState::kPending}) {
    LeaderFixture f;
    // Rows 1-3 were a batch (row 2 on L-a); row 4 on L-a comes after row 2; row 5 on L-b.
    EnqueueAll(f.store, {EventOn(1, "L-x"), EventOn(2, "L-a"), EventOn(3, "L-y"),
                         EventOn(4, "L-a"), EventOn(5, "L-b")});
    SetState(f.store, 1, RowState::kPublished);
    SetState(f.store, 3, RowState::kPublished);
    SetState(f.store, 2, earlier);
    PageRequest request;
    request.after_id = 3;
    request.now_ms = f.clock.EpochMs();
    INFO("row 2 in state " << static_cast<int>(earlier));

    // Row 2 not in flight: found below the cursor, each row checked in SQL.
    std::int64_t before = f.store.pages_held_back_once();
    CHECK(IdsOf(f.store.ReadPage(request)) == Ids{5});
    CHECK(f.store.pages_held_back_once() == before);

    // Row 2 in flight (pending: the relay sent it): held back once for the page, same rows.
    if (earlier == RowState::kPending) {
      request.in_flight = {{2, "L-a"}};
      before = f.store.pages_held_back_once();
      CHECK(IdsOf(f.store.ReadPage(request)) == Ids{5});
      CHECK(f.store.pages_held_back_once() == before + 1);
      // Once row 2 is published nothing holds row 4 back.
      SetState(f.store, 2, RowState::kPublished);
      request.in_flight.clear();
      CHECK(IdsOf(f.store.ReadPage(request)) == Ids{4, 5});
      CHECK(f.store.pages_held_back_once() == before + 2);
    }
  }
}

TEST_CASE("ReadPage reads an unpublished row a foreign writer gave id 0 or a negative id first "
          "and holds its aggregate back behind it",
          "[store][ordering]") {
  // A page from the start of a pass begins at the lowest id, not past 0: such a row is read
  // first and holds back row 3 of its aggregate. Below a cursor, the once-per-page look starts
  // at the lowest id too, so it finds the row when it is not in flight (before, pages began past
  // 0 and never returned the row, which held row 3 back forever).
  for (std::int64_t foreign_id : {std::int64_t{0}, std::int64_t{-5},
                                  std::numeric_limits<std::int64_t>::min()}) {
    LeaderFixture f;
    EnqueueAll(f.store, {EventOn(1, "L-x"), EventOn(2, "L-y"), EventOn(3, "L-a")});
    {
      auto txn = f.store.BeginWrite();
      txn.connection().Exec(
          "INSERT INTO outbox(id, event_id, aggregate_id, event_type, payload) VALUES (" +
          std::to_string(foreign_id) + ", 'evt-foreign', 'L-a', 'LoanRenewed', '{}')");
      txn.Commit();
    }
    INFO("foreign row id " << foreign_id);
    PageRequest request;
    request.now_ms = f.clock.EpochMs();
    const std::int64_t before = f.store.pages_held_back_once();
    CHECK(IdsOf(f.store.ReadPage(request)) == Ids{foreign_id, 1, 2});
    CHECK(f.store.pages_held_back_once() == before + 1);  // nothing below the first row
    // Rows 1-2 in flight and the cursor past them: the foreign row is below it and not in
    // flight (its batch failed, say), found by the look below the cursor: per row, row 3 waits.
    request.after_id = 2;
    request.in_flight = {{1, "L-x"}, {2, "L-y"}};
    CHECK(IdsOf(f.store.ReadPage(request)).empty());
    CHECK(f.store.pages_held_back_once() == before + 1);
    // The foreign row in flight too: once for the page, and row 3 still waits behind it.
    request.in_flight.push_back({foreign_id, "L-a"});
    CHECK(IdsOf(f.store.ReadPage(request)).empty());
    CHECK(f.store.pages_held_back_once() == before + 2);
  }
}

TEST_CASE("ReadAtOneInstant reads the page and the waiting rows at one snapshot so another "
          "relay's settle between them cannot make a pending row look neither sendable nor "
          "waiting",
          "[store][ordering]") {
  // Rows 1 and 2 on L-a; row 1 under another relay's live claim (a claims-mode relay beside a
  // leader, or another claims relay): the page is empty (row 1 claimed, row 2 held back) and
  // row 1 waits. The other relay's settle (row 1 published, its claim gone) commits between
  // the two reads. Seen by the second read, row 1 no longer waits, while the first saw row 2
  // held back: "nothing sendable, nothing waiting", and relay --until-empty (CanOnlyWaitForever)
  // stopped with row 2 pending.
  LeaderFixture f;
  EnqueueAll(f.store, {EventOn(1, "L-a"), EventOn(2, "L-a")});
  SetState(f.store, 1, RowState::kClaimed);
  Store other(f.dir.File("lab.db"), LeaderFixture::Options(f.clock), OpenMode::kExisting);
  std::vector<outbox::OutboxRow> page;
  std::int64_t waiting = -1;
  f.store.ReadAtOneInstant([&] {
    page = f.Page();
    auto settle = other.BeginWrite();
    settle.connection().Exec(
        "UPDATE outbox SET published = 1, published_at = 1, claim_token = NULL, "
        "claim_owner = NULL, claim_until = NULL WHERE id = 1");
    settle.Commit();
    waiting = f.store.WaitingCount(f.clock.EpochMs());
  });
  CHECK(IdsOf(page).empty());
  CHECK(waiting == 1);  // row 1's claim, as the page saw it
  // Afterwards row 2 is sendable and nothing waits.
  CHECK(IdsOf(f.Page()) == Ids{2});
  CHECK(f.store.WaitingCount(f.clock.EpochMs()) == 0);
}

TEST_CASE("A leader's settle of a page read before a reset is fenced out and marks no new row of "
          "the same id on SQLite",
          "[store][ordering]") {
  LeaderFixture f;
  EnqueueAll(f.store, {EventOn(1, "L-a")});
  REQUIRE(f.store.AcquireLease("relay-a", kLeaseMs, kNowMs).acquired);
  REQUIRE(IdsOf(f.Page()) == Ids{1});
  // The page is in Kafka's hands when another process resets and writes a new row: its id is
  // the old row's.
  Store other(f.dir.File("lab.db"), LeaderFixture::Options(f.clock), OpenMode::kExisting);
  other.ResetSchema();
  EnqueueAll(other, {EventOn(2001, "L-b")});
  REQUIRE(IdsOf(f.Page()) == Ids{1});
  // The reset ended the term and stepped its token; a relay takes the next term at once (the
  // relay does so when it finds the new run): its token is past every term before the reset.
  CHECK(f.store.ReadLease().owner == outbox::kResetLeaseOwner);
  const LeaseAcquisition next = other.AcquireLease("relay-b", kLeaseMs, kNowMs + 1);
  REQUIRE(next.acquired);
  CHECK(next.lease.token == 3);

  // The old term's late settle: with the token started again at 1 it would have been the new
  // term's and marked the new row 1, never sent.
  const SettleReport late =
      f.store.SettleUnderLease(1, {1}, {}, SettlePolicy{}, kNowMs + 2, kLeaseMs);
  CHECK(late.fenced_out);
  CHECK(late.marked == 0);
  CHECK_FALSE(IsPublished(f.store, 1));  // the new row was never sent: it stays unpublished
}
