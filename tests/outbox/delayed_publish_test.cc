// Delayed publish on SQLite: the not_before column, the claim and the leader's page that wait for
// it, per-aggregate order behind a delayed row, foreign writers' values, the relay loop in both
// coordination modes, status's counts and the migration of a schema 5 file.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "outbox/error.h"
#include "outbox/relay.h"
#include "outbox/sqlite/connection.h"
#include "outbox/store.h"
#include "relay_test_support.h"
#include "test_support.h"

namespace {

using outbox::Claim;
using outbox::ClaimRequest;
using outbox::Coordination;
using outbox::kMaxDelayMs;
using outbox::OpenMode;
using outbox::OutboxEvent;
using outbox::PageRequest;
using outbox::Store;
using outbox::testing::EventOn;
using outbox::testing::FakeClock;
using outbox::testing::FakePublisher;
using outbox::testing::FakeWaiter;
using outbox::testing::IdsOf;
using outbox::testing::IntColumn;
using outbox::testing::kNowMs;
using outbox::testing::MakeEvent;
using outbox::testing::TempDir;
using Ids = std::vector<std::int64_t>;

ClaimRequest Request(std::int64_t now_ms, bool block_key = true) {
  ClaimRequest request;
  request.owner = "relay-test";
  request.limit = 100;
  request.lease_ms = 30000;
  request.now_ms = now_ms;
  request.block_key = block_key;
  return request;
}

PageRequest Page(std::int64_t now_ms, bool block_key = true) {
  PageRequest request;
  request.now_ms = now_ms;
  request.block_key = block_key;
  return request;
}

OutboxEvent Delayed(OutboxEvent event, std::int64_t not_before_ms) {
  event.not_before_ms = not_before_ms;
  return event;
}

// A fresh store on a clock the test moves.
class Fixture {
 public:
  Fixture() : store(dir.File("lab.db"), Options(clock), OpenMode::kCreate) { store.ResetSchema(); }

  std::int64_t Enqueue(const OutboxEvent& event) {
    auto txn = store.BeginWrite();
    const std::int64_t id = store.Enqueue(txn, event);
    txn.Commit();
    return id;
  }

  // Sets not_before of row id to the SQL literal value, as another program may.
  void SetNotBefore(std::int64_t id, const std::string& value) {
    auto txn = store.BeginWrite();
    txn.connection().Exec("UPDATE outbox SET not_before = " + value +
                          " WHERE id = " + std::to_string(id));
    txn.Commit();
  }

  static outbox::StoreOptions Options(FakeClock& clock) {
    outbox::StoreOptions options = outbox::testing::FastStoreOptions();
    options.clock = &clock;
    return options;
  }

  TempDir dir;
  FakeClock clock;
  Store store;
};

}  // namespace

TEST_CASE("A delayed row is neither claimed nor paged before its not_before and is both once due",
          "[store]") {
  Fixture f;
  const std::int64_t delayed = f.Enqueue(Delayed(MakeEvent(1), kNowMs + 5000));
  const std::int64_t plain = f.Enqueue(MakeEvent(2));
  CHECK(IntColumn(f.store, "not_before", delayed) == kNowMs + 5000);
  CHECK_FALSE(IntColumn(f.store, "not_before", plain).has_value());

  CHECK(IdsOf(f.store.ReadPage(Page(kNowMs + 4999))) == Ids{plain});
  CHECK(f.store.WaitingCount(kNowMs + 4999) == 1);  // time alone will make it claimable
  const Claim early = f.store.ClaimBatch(Request(kNowMs + 4999));
  CHECK(IdsOf(early.rows) == Ids{plain});
  f.store.SettleBatch(early.token, {plain}, {}, outbox::SettlePolicy{}, kNowMs + 4999);
  CHECK_FALSE(f.store.HasClaimable(Request(kNowMs + 4999)));

  CHECK(f.store.HasClaimable(Request(kNowMs + 5000)));
  CHECK(IdsOf(f.store.ReadPage(Page(kNowMs + 5000))) == Ids{delayed});
  CHECK(IdsOf(f.store.ClaimBatch(Request(kNowMs + 5000)).rows) == Ids{delayed});
  CHECK(f.store.WaitingCount(kNowMs + 5000) == 1);  // now under our claim
}

TEST_CASE("Enqueue with a delay writes not_before on the store clock and refuses a bad delay",
          "[store]") {
  Fixture f;
  OutboxEvent event = MakeEvent(1);
  event.delay_ms = 2000;
  const std::int64_t id = f.Enqueue(event);
  CHECK(IntColumn(f.store, "not_before", id) == kNowMs + 2000);

  OutboxEvent negative = MakeEvent(2);
  negative.delay_ms = -1;
  CHECK_THROWS_AS(f.Enqueue(negative), outbox::ConfigError);
  OutboxEvent too_far = MakeEvent(3);
  too_far.delay_ms = kMaxDelayMs + 1;
  CHECK_THROWS_WITH(f.Enqueue(too_far), Catch::Contains("must be between 0 and"));
  OutboxEvent both = Delayed(MakeEvent(4), kNowMs);
  both.delay_ms = 10;
  CHECK_THROWS_WITH(f.Enqueue(both), Catch::Contains("not both"));
  CHECK(f.store.Count().total == 1);
}

TEST_CASE("Under block-key a delayed row holds back the later rows of its aggregate and skip lets "
          "them pass",
          "[store]") {
  Fixture f;
  const std::int64_t a1 = f.Enqueue(Delayed(EventOn(1, "L-A"), kNowMs + 60000));
  const std::int64_t a2 = f.Enqueue(EventOn(2, "L-A"));
  const std::int64_t b1 = f.Enqueue(EventOn(3, "L-B"));

  CHECK(IdsOf(f.store.ReadPage(Page(kNowMs))) == Ids{b1});
  CHECK(IdsOf(f.store.ReadPage(Page(kNowMs, /*block_key=*/false))) == Ids{a2, b1});
  CHECK(IdsOf(f.store.ClaimBatch(Request(kNowMs)).rows) == Ids{b1});
  CHECK_FALSE(f.store.HasClaimable(Request(kNowMs)));
  CHECK(IdsOf(f.store.ClaimBatch(Request(kNowMs, /*block_key=*/false)).rows) == Ids{a2});
  // Once due, the head goes first, alone: a2 follows only after a1 is published.
  f.store.ReleaseClaimsOf("relay-test", 1000);
  CHECK(IdsOf(f.store.ReadPage(Page(kNowMs + 60000))) == Ids{a1, b1});
}

TEST_CASE("Foreign not_before values that are NULL text negative or absurd mean due now", "[store]") {
  Fixture f;
  Ids ids;
  for (int i = 1; i <= 8; ++i) ids.push_back(f.Enqueue(MakeEvent(i)));
  f.SetNotBefore(ids[0], "NULL");
  f.SetNotBefore(ids[1], "'tomorrow'");
  f.SetNotBefore(ids[2], "-5");
  f.SetNotBefore(ids[3], "9223372036854775807");
  f.SetNotBefore(ids[4], "1e300");
  f.SetNotBefore(ids[5], std::to_string(kNowMs + kMaxDelayMs + 1));  // micro- or nanoseconds
  f.SetNotBefore(ids[6], "x'00ff'");
  f.SetNotBefore(ids[7], std::to_string(kNowMs + kMaxDelayMs));  // the furthest believed

  CHECK(IdsOf(f.store.ClaimBatch(Request(kNowMs)).rows) ==
        Ids{ids[0], ids[1], ids[2], ids[3], ids[4], ids[5], ids[6]});
  const outbox::OutboxStatus status = f.store.Status(kNowMs);
  CHECK(status.delayed == 1);
  CHECK(status.pending == 7);
  CHECK(status.unpublished == 8);
}

TEST_CASE("Status counts delayed rows apart and leaves them and the rows behind them out of the "
          "oldest age",
          "[store]") {
  Fixture f;
  // created_at of MakeEvent(i) is kNowMs - 100000 + i: each row was written 100 s ago.
  f.Enqueue(Delayed(EventOn(1, "L-A"), kNowMs + 60000));
  f.Enqueue(EventOn(2, "L-A"));

  outbox::OutboxStatus s = f.store.Status(kNowMs);
  CHECK(s.delayed == 1);
  CHECK(s.pending == 1);
  CHECK(s.behind_delayed == 1);
  CHECK(s.unpublished == 2);
  CHECK(s.oldest_pending_age_ms == 0);  // nothing is late: one row waits for its time, one for it

  // A row delayed until 1 s ago has been due for 1 s, not for the 100 s since it was written.
  f.Enqueue(Delayed(EventOn(3, "L-B"), kNowMs - 1000));
  s = f.store.Status(kNowMs);
  CHECK(s.pending == 2);
  CHECK(s.delayed == 1);
  CHECK(s.oldest_pending_age_ms == 1000);

  // Once L-A's delay has passed, its second row has waited only since then.
  s = f.store.Status(kNowMs + 60000 + 250);
  CHECK(s.delayed == 0);
  CHECK(s.behind_delayed == 0);
  CHECK(s.pending == 3);
  CHECK(s.oldest_pending_age_ms == 61250);  // L-B, due since kNowMs - 1000

  // A plain row's age still runs from its created_at.
  f.Enqueue(EventOn(4, "L-C"));
  CHECK(f.store.Status(kNowMs).oldest_pending_age_ms == 100000 - 4);
}

TEST_CASE("The relay sends a delayed row once due and keeps its aggregate's order in both "
          "coordination modes",
          "[relay]") {
  for (const Coordination coordination : {Coordination::kClaims, Coordination::kLeader}) {
    INFO((coordination == Coordination::kLeader ? "leader" : "claims"));
    Fixture f;
    f.Enqueue(Delayed(EventOn(1, "L-A"), kNowMs + 5000));
    f.Enqueue(EventOn(2, "L-A"));
    f.Enqueue(EventOn(3, "L-B"));

    FakePublisher publisher;
    std::vector<std::int64_t> sent_at;  // the clock at each message sent
    publisher.on_publish = [&](const std::vector<outbox::OutboundMessage>& messages) {
      for (std::size_t i = 0; i < messages.size(); ++i) sent_at.push_back(f.clock.EpochMs());
    };
    outbox::RelayOptions options;
    options.owner = "relay-delay";
    options.clock = &f.clock;
    options.coordination = coordination;
    options.key = outbox::KeyChoice::kAggregateId;
    outbox::Relay relay(f.store, publisher, options);
    FakeWaiter waiter;
    waiter.on_wait = [&](int timeout_ms) { f.clock.AdvanceMs(timeout_ms); };
    outbox::LoopOptions loop;
    loop.mode = outbox::LoopMode::kUntilEmpty;
    outbox::RunRelayLoop(relay, waiter, loop, nullptr);

    // until-empty waited for the delay instead of ending with the row pending.
    CHECK(f.store.Count().unpublished == 0);
    REQUIRE(publisher.SentKeys() == std::vector<std::string>{"L-B", "L-A", "L-A"});
    std::vector<std::string> event_ids;
    for (const auto& call : publisher.calls)
      for (const auto& m : call) event_ids.push_back(m.event_id);
    CHECK(event_ids == std::vector<std::string>{"evt-3", "evt-1", "evt-2"});
    REQUIRE(sent_at.size() == 3);
    CHECK(sent_at[0] < kNowMs + 5000);
    CHECK(sent_at[1] >= kNowMs + 5000);
    CHECK(sent_at[2] >= kNowMs + 5000);
  }
}

TEST_CASE("A schema 5 file gains a NULL not_before on open and its rows stay due", "[store]") {
  TempDir dir;
  const std::string path = dir.File("old.db");
  {
    Store store(path, outbox::testing::FastStoreOptions(), OpenMode::kCreate);
    store.ResetSchema();
    auto txn = store.BeginWrite();
    txn.connection().Exec(
        "ALTER TABLE outbox DROP COLUMN not_before; PRAGMA user_version = 5;"
        "INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at) "
        "VALUES ('evt-1', 'L-1', 'LoanCreated', '{}', 1700000000001)");
    txn.Commit();
  }
  {
    outbox::sqlite::Connection raw(path, SQLITE_OPEN_READWRITE);
    REQUIRE(raw.QueryInt64("SELECT COUNT(*) FROM pragma_table_info('outbox') "
                           "WHERE name = 'not_before'") == 0);
  }
  Store store(path, outbox::testing::FastStoreOptions(), OpenMode::kExisting);
  CHECK(store.BeginRead().connection().QueryInt64("PRAGMA user_version") == outbox::kSchemaVersion);
  CHECK_FALSE(IntColumn(store, "not_before", 1).has_value());
  CHECK(IdsOf(store.ClaimBatch(Request(kNowMs)).rows) == Ids{1});
}
