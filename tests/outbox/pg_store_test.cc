// The outbox on a real PostgreSQL server (issue 12). scripts/test.sh starts one with
// scripts/postgres.sh and passes its URL in OUTBOX_PG_URL; without it these tests FAIL and say
// how to start one, so a run without a server never passes them vacuously. Each test works in
// its own schema, so tests running in parallel under ctest never see each other's rows.
#include <catch2/catch.hpp>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <latch>
#include <limits>
#include <optional>
#include <memory>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include "outbox/failpoint.h"
#include "outbox/pg/connection.h"
#include "outbox/pg_store.h"
#include "outbox/pg_store/internal.h"
#include "outbox/relay.h"
#include "pg_test_support.h"
#include "test_support.h"

using namespace outbox;

namespace {

// A fresh schema of its own per test; lock_timeout: a claim that waits on a lock (no SKIP
// LOCKED) fails the test in 10 s instead of hanging it.
class Schema : public testing::PgSchema {
 public:
  Schema() : PgSchema("t", "%20-clock_timeout%3D10000") {}
};

OutboxEvent Event(const std::string& id, const std::string& aggregate = "") {
  return OutboxEvent{id, aggregate.empty() ? "L-" + id : aggregate, "LoanCreated", "{\"id\":\"" + id + "\"}", 0};
}

std::int64_t EnqueueOne(PgStore& store, const OutboxEvent& event) {
  auto txn = store.BeginWrite();
  const std::int64_t id = store.Enqueue(txn, event);
  txn.Commit();
  return id;
}

ClaimRequest Request(const std::string& owner, std::int64_t limit = 100, std::int64_t lease_ms = 30000) {
  ClaimRequest request;
  request.owner = owner;
  request.limit = limit;
  request.lease_ms = lease_ms;
  return request;
}

std::vector<std::string> EventIds(const Claim& claim) {
  std::vector<std::string> ids;
  for (const auto& row : claim.rows) ids.push_back(row.event.event_id);
  return ids;
}

}  // namespace

TEST_CASE("PostgreSQL outbox rows commit and roll back with their transaction", "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  EnqueueOne(store, Event("evt-1001"));
  {
    auto txn = store.BeginWrite();
    store.Enqueue(txn, Event("evt-1002"));
  }  // no commit: rolled back
  const OutboxCounts counts = store.Count();
  CHECK(counts.total == 1);
  CHECK(counts.unpublished == 1);
  CHECK(counts.published == 0);
}

TEST_CASE("PostgreSQL enqueue of an existing event id fails with SQLSTATE 23505", "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  EnqueueOne(store, Event("evt-1001"));
  auto txn = store.BeginWrite();
  try {
    store.Enqueue(txn, Event("evt-1001"));
    FAIL("a duplicate event id was accepted");
  } catch (const pg::PgError& error) {
    CHECK(error.sqlstate() == "23505");
    CHECK(std::string(error.what()).find("enqueue event 'evt-1001'") == 0);
    CHECK(std::string(error.what()).find('\n') == std::string::npos);
  }
}

TEST_CASE("PostgreSQL payload bytes that are not UTF-8 reach the relay unchanged", "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  OutboxEvent event = Event("evt-1001");
  event.payload = std::string("\xC3\x28\x00\xFF", 4);
  EnqueueOne(store, event);
  const Claim claim = store.ClaimBatch(Request("relay-a"));
  REQUIRE(claim.rows.size() == 1);
  CHECK(claim.rows[0].event.payload == event.payload);
}

TEST_CASE("PostgreSQL claims skip rows another transaction has locked instead of waiting", "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  for (int i = 1; i <= 4; ++i) EnqueueOne(store, Event("evt-100" + std::to_string(i)));
  // Another relay is in the middle of its claim: it holds row 1 and row 2 locked.
  pg::Connection other(schema.url());
  pg::Transaction held(other);
  other.Query("SELECT id FROM outbox WHERE id <= 2 FOR UPDATE", {}, "lock two rows");

  const Claim claim = store.ClaimBatch(Request("relay-b"));
  CHECK(EventIds(claim) == std::vector<std::string>{"evt-1003", "evt-1004"});
}

TEST_CASE("PostgreSQL claims by two relays at once share the rows without overlap", "[postgres]") {
  Schema schema;
  {
    PgStore writer(schema.url());
    auto txn = writer.BeginWrite();
    for (int i = 0; i < 400; ++i) writer.Enqueue(txn, Event("evt-" + std::to_string(10000 + i)));
    txn.Commit();
  }
  std::vector<std::int64_t> claimed_a, claimed_b;
  auto drain = [&](const std::string& owner, std::vector<std::int64_t>& claimed) {
    PgStore store(schema.url());
    for (;;) {
      const Claim claim = store.ClaimBatch(Request(owner, 7));
      if (claim.rows.empty()) return;
      std::vector<std::int64_t> acked;
      for (const auto& row : claim.rows) acked.push_back(row.id);
      claimed.insert(claimed.end(), acked.begin(), acked.end());
      store.SettleBatch(claim.token, acked, {}, SettlePolicy{});
    }
  };
  std::thread a(drain, "relay-a", std::ref(claimed_a));
  std::thread b(drain, "relay-b", std::ref(claimed_b));
  a.join();
  b.join();
  std::vector<std::int64_t> all = claimed_a;
  all.insert(all.end(), claimed_b.begin(), claimed_b.end());
  std::sort(all.begin(), all.end());
  CHECK(all.size() == 400);
  CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());
  PgStore check(schema.url());
  CHECK(check.Count().published == 400);
}

TEST_CASE("PostgreSQL settle of a claim taken over by another relay is fenced", "[postgres]") {
  Schema schema;
  PgStore relay_a(schema.url());
  PgStore relay_b(schema.url());
  EnqueueOne(relay_a, Event("evt-1001"));
  // A lease of 0 ms has run out at once (claim_until = now()), so relay b may take the row over.
  const Claim first = relay_a.ClaimBatch(Request("relay-a", 10, 0));
  REQUIRE(first.rows.size() == 1);
  const Claim second = relay_b.ClaimBatch(Request("relay-b", 10, 30000));
  REQUIRE(second.rows.size() == 1);
  CHECK(second.token > first.token);

  const SettleReport late = relay_a.SettleBatch(first.token, {first.rows[0].id}, {}, SettlePolicy{});
  CHECK(late.fenced == 1);
  CHECK(late.marked == 0);
  const SettleReport owner = relay_b.SettleBatch(second.token, {second.rows[0].id}, {}, SettlePolicy{});
  CHECK(owner.marked == 1);
  CHECK(relay_a.Count().published == 1);
}

TEST_CASE("PostgreSQL settle after another relay took over part of the batch marks only the rows still owned", "[postgres]") {
  Schema schema;
  PgStore relay_a(schema.url());
  PgStore relay_b(schema.url());
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(EnqueueOne(relay_a, Event("evt-" + std::to_string(2001 + i))));
  // A lease of 0 ms has run out at once, so relay b's claim of 2 takes over the 2 lowest ids.
  const Claim first = relay_a.ClaimBatch(Request("relay-a", 10, 0));
  REQUIRE(first.rows.size() == 5);
  const Claim second = relay_b.ClaimBatch(Request("relay-b", 2, 30000));
  REQUIRE(second.rows.size() == 2);
  CHECK(second.rows[0].id == ids[0]);
  CHECK(second.rows[1].id == ids[1]);

  // The late settle acks all five, one id twice: only the three still carrying a's token are
  // marked, each once; b's two and the repeated id are reported fenced.
  std::vector<std::int64_t> acked = ids;
  acked.push_back(ids[4]);
  const SettleReport late = relay_a.SettleBatch(first.token, acked, {}, SettlePolicy{});
  CHECK(late.marked == 3);
  CHECK(late.marked_ids == std::vector<std::int64_t>{ids[2], ids[3], ids[4]});
  CHECK(late.fenced == 3);
  CHECK(late.fenced_ids == std::vector<std::int64_t>{ids[0], ids[1], ids[4]});
  CHECK(relay_a.Count().published == 3);

  // b's rows are still unpublished and claimed by b, so b's settle marks them.
  const SettleReport owner = relay_b.SettleBatch(second.token, {ids[0], ids[1]}, {}, SettlePolicy{});
  CHECK(owner.marked == 2);
  CHECK(owner.fenced == 0);
  CHECK(relay_b.Count().published == 5);
}

TEST_CASE("PostgreSQL leases follow the server clock so a relay whose clock runs ahead steals nothing", "[postgres]") {
  Schema schema;
  PgStore relay_a(schema.url());
  PgStore relay_b(schema.url());
  EnqueueOne(relay_a, Event("evt-1001"));
  REQUIRE(relay_a.ClaimBatch(Request("relay-a", 10, 30000)).rows.size() == 1);
  // Relay b's own clock says it is an hour later: on SQLite that would expire the lease.
  ClaimRequest ahead = Request("relay-b");
  ahead.now_ms = 4102444800000 - 1;
  CHECK(relay_b.ClaimBatch(ahead).rows.empty());
}

TEST_CASE("PostgreSQL failed deliveries back off on the server clock and park at max attempts", "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  const std::int64_t id = EnqueueOne(store, Event("evt-1001"));
  SettlePolicy policy;
  policy.max_attempts = 2;
  policy.backoff_base_ms = 0;  // retry at once: no test waits on a clock
  policy.backoff_max_ms = 0;

  Claim claim = store.ClaimBatch(Request("relay-a"));
  REQUIRE(claim.rows.size() == 1);
  SettleReport report = store.SettleBatch(claim.token, {}, {{id, "Broker: Not enough in-sync replicas"}}, policy);
  CHECK(report.retried == 1);
  claim = store.ClaimBatch(Request("relay-a"));
  REQUIRE(claim.rows.size() == 1);
  CHECK(claim.attempts[0] == 1);
  report = store.SettleBatch(claim.token, {}, {{id, "Broker: Not enough in-sync replicas"}}, policy);
  CHECK(report.parked == 1);
  CHECK(store.ClaimBatch(Request("relay-a")).rows.empty());
  CHECK(store.Count().unpublished == 1);

  SECTION("a backoff in the future keeps the row from the next claim") {
    const std::int64_t later = EnqueueOne(store, Event("evt-1002"));
    SettlePolicy slow;
    slow.backoff_base_ms = 60000;
    const Claim next = store.ClaimBatch(Request("relay-a"));
    REQUIRE(EventIds(next) == std::vector<std::string>{"evt-1002"});
    store.SettleBatch(next.token, {}, {{later, "timed out"}}, slow);
    CHECK(store.ClaimBatch(Request("relay-a")).rows.empty());
  }
}

TEST_CASE("PostgreSQL commits out of id order never lose a row but a naive keyset cursor does", "[postgres]") {
  Schema schema;
  PgStore writer_a(schema.url());
  PgStore writer_b(schema.url());
  // Writer a takes the smaller id and holds its transaction open; writer b commits a larger one.
  auto held = writer_a.BeginWrite();
  const std::int64_t early = writer_a.Enqueue(held, Event("evt-1001"));
  const std::int64_t late = EnqueueOne(writer_b, Event("evt-1002"));
  REQUIRE(early < late);

  PgStore naive(schema.url());
  PgStore scanning(schema.url());
  const Claim naive_first = naive.ClaimBatch(Request("naive"), PgClaimMode::kNaiveCursor);
  REQUIRE(EventIds(naive_first) == std::vector<std::string>{"evt-1002"});
  naive.SettleBatch(naive_first.token, {naive_first.rows[0].id}, {}, SettlePolicy{});

  held.Commit();  // evt-1001 is committed now, behind the naive cursor

  CHECK(naive.ClaimBatch(Request("naive"), PgClaimMode::kNaiveCursor).rows.empty());
  const Claim scan = scanning.ClaimBatch(Request("scan"));
  CHECK(EventIds(scan) == std::vector<std::string>{"evt-1001"});
}

TEST_CASE("PostgreSQL block key claims only the oldest unpublished row of each aggregate", "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  EnqueueOne(store, Event("evt-1001", "L-1"));
  EnqueueOne(store, Event("evt-1002", "L-1"));
  EnqueueOne(store, Event("evt-1003", "L-2"));
  const Claim claim = store.ClaimBatch(Request("relay-a"));
  CHECK(EventIds(claim) == std::vector<std::string>{"evt-1001", "evt-1003"});
}

TEST_CASE("PostgreSQL stores created at the same time both migrate the schema once", "[postgres]") {
  Schema schema;
  std::atomic<int> opened{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      PgStore store(schema.url());
      ++opened;
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(opened == 4);
  PgStore store(schema.url());
  CHECK(store.Count().total == 0);
}

TEST_CASE("PostgreSQL connect errors are one line naming the server without its password", "[postgres]") {
  try {
    pg::Connection connection("postgresql://outbox:secret@127.0.0.1:1/outbox_lab?connect_timeout=2");
    FAIL("connected to port 1");
  } catch (const pg::PgError& error) {
    const std::string message = error.what();
    CHECK(message.find("connect to 'postgresql://outbox@127.0.0.1:1/outbox_lab") == 0);
    CHECK(message.find("secret") == std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
    CHECK(error.connection_lost());
  }
}

TEST_CASE("PostgreSQL URLs are told apart from SQLite paths", "[postgres]") {
  CHECK(pg::IsPostgresUrl("postgresql://u@h/db"));
  CHECK(pg::IsPostgresUrl("postgres://u@h/db"));
  CHECK_FALSE(pg::IsPostgresUrl("outbox.db"));
  CHECK_FALSE(pg::IsPostgresUrl("/tmp/postgresql://x"));
  CHECK(pg::RedactPassword("postgresql://u:pw@h:5432/db") == "postgresql://u@h:5432/db");
  CHECK(pg::RedactPassword("postgresql://u@h/db") == "postgresql://u@h/db");
}

TEST_CASE("PostgreSQL naive offset survives a new store and makes the skipped row look published", "[postgres]") {
  Schema schema;
  PgStore writer_a(schema.url());
  PgStore writer_b(schema.url());
  auto held = writer_a.BeginWrite();
  writer_a.Enqueue(held, Event("evt-1001"));
  EnqueueOne(writer_b, Event("evt-1002"));
  {
    PgStore naive(schema.url(), nullptr, PgClaimMode::kNaiveCursor);
    const Claim first = naive.ClaimBatch(Request("naive"));
    REQUIRE(EventIds(first) == std::vector<std::string>{"evt-1002"});
    naive.SettleBatch(first.token, {first.rows[0].id}, {}, SettlePolicy{});
  }
  held.Commit();
  // A relay restarted in naive mode reads the stored offset: the late row stays behind it.
  PgStore restarted(schema.url(), nullptr, PgClaimMode::kNaiveCursor);
  CHECK_FALSE(restarted.HasClaimable(Request("naive")));
  CHECK(restarted.ClaimBatch(Request("naive")).rows.empty());
  const OutboxSnapshot snapshot = restarted.Snapshot();
  REQUIRE(snapshot.rows.size() == 2);
  CHECK(snapshot.rows[0].event_id == "evt-1001");
  CHECK(snapshot.rows[0].published);  // by the offset's word, never sent
  CHECK(restarted.Count().unpublished == 1);  // the row's own flag says otherwise
  // The scan mode still sees it.
  PgStore scanning(schema.url());
  CHECK(scanning.HasClaimable(Request("scan")));
}

TEST_CASE("PostgreSQL reset starts a run whose id is epoch ms and 32 random bits", "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  CHECK(store.RunId().empty());
  store.ResetSchema();
  const std::string first = store.RunId();
  REQUIRE(first.size() == 13 + 1 + 8);
  CHECK(first[13] == '-');
  CHECK(std::stoll(first.substr(0, 13)) > 1700000000000);
  store.ResetSchema();
  CHECK(store.RunId() != first);
}

TEST_CASE("PostgreSQL reset counts the outbox and archive rows it drops", "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  const ResetCounts empty = store.ResetSchema();
  CHECK(empty.outbox_rows == 0);
  CHECK(empty.published == 0);
  CHECK(empty.archived == 0);
  CHECK(empty.lab_table);
  const std::int64_t first = EnqueueOne(store, Event("evt-1001"));
  EnqueueOne(store, Event("evt-1002"));
  EnqueueOne(store, Event("evt-1003"));
  REQUIRE(store.MarkPublished(first));
  const ResetCounts counts = store.ResetSchema();
  CHECK(counts.outbox_rows == 3);
  CHECK(counts.published == 1);
  CHECK(counts.archived == 0);
  CHECK(counts.lab_table);
  CHECK(store.Count().total == 0);
}

TEST_CASE("PostgreSQL has no WAL file of the lab's to checkpoint or measure", "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  OutboxStore& outbox = store;
  const CheckpointReport checkpoint = outbox.CheckpointPassive();
  CHECK_FALSE(checkpoint.busy);
  CHECK(checkpoint.wal_frames == -1);
  CHECK(outbox.WalSizeBytes() == 0);
}

namespace {

constexpr std::int64_t kHourMs = 3'600'000;

std::int64_t WallMs() { return SystemClock().EpochMs(); }

}  // namespace

TEST_CASE("PostgreSQL leader lease is taken with token 1 and refused to every other relay while it is live", "[postgres]") {
  Schema schema;
  PgStore relay_a(schema.url());
  PgStore relay_b(schema.url());
  CHECK(relay_a.ReadLease() == LeaderLease{});

  const std::int64_t now_ms = WallMs();
  const LeaseAcquisition got = relay_a.AcquireLease("relay-a", 30000, now_ms);
  REQUIRE(got.acquired);
  CHECK(got.lease == LeaderLease{"relay-a", 1, now_ms + 30000, now_ms});
  CHECK(got.previous == LeaderLease{});

  for (const std::string owner : {"relay-b", "relay-a"}) {
    INFO(owner);
    const LeaseAcquisition refused = relay_b.AcquireLease(owner, 30000, WallMs());
    CHECK_FALSE(refused.acquired);
    CHECK(refused.lease.owner == "relay-a");
    CHECK(refused.lease.token == 1);
  }
  const LeaderLease seen = relay_b.ReadLease();
  CHECK(seen.owner == "relay-a");
  CHECK(seen.token == 1);
  CHECK(seen.Live(WallMs()));
  CHECK(seen.until_ms - WallMs() > 25000);
  CHECK(seen.until_ms - WallMs() <= 30000);
  CHECK_THROWS_AS(relay_b.AcquireLease("relay-b", 0, WallMs()), ConfigError);
}

TEST_CASE("PostgreSQL leader lease is judged on the server clock so a relay whose clock runs an hour ahead cannot take it", "[postgres]") {
  Schema schema;
  PgStore relay_a(schema.url());
  // Relay b's own clock says it is an hour later: on SQLite that would make the lease lapse.
  ManualClock ahead(WallMs() + kHourMs);
  PgStore relay_b(schema.url(), &ahead);
  REQUIRE(relay_a.AcquireLease("relay-a", 30000, WallMs()).acquired);

  const LeaseAcquisition refused = relay_b.AcquireLease("relay-b", 30000, ahead.EpochMs());
  CHECK_FALSE(refused.acquired);
  CHECK(refused.lease.token == 1);
  // The lease comes back in relay b's own clock: live, with the server's time left.
  CHECK(refused.lease.Live(ahead.EpochMs()));
  CHECK(refused.lease.until_ms - ahead.EpochMs() > 25000);
  const LeaderLease read = relay_b.ReadLease();
  CHECK(read.Live(ahead.EpochMs()));
  CHECK(read.until_ms > ahead.EpochMs() + 25000);
  CHECK(read.acquired_at_ms <= ahead.EpochMs());
  CHECK(read.acquired_at_ms > ahead.EpochMs() - 5000);
  CHECK(relay_a.ReadLease().token == 1);
}

TEST_CASE("PostgreSQL relays racing for a free leader lease never both take one term", "[postgres]") {
  Schema schema;
  constexpr int kRelays = 4;
  constexpr int kRounds = 10;
  std::vector<std::unique_ptr<PgStore>> relays;
  for (int i = 0; i < kRelays; ++i) relays.push_back(std::make_unique<PgStore>(schema.url()));
  for (int round = 1; round <= kRounds; ++round) {
    std::atomic<int> acquired{0};
    std::atomic<std::int64_t> token{0};
    std::latch start(kRelays);
    std::vector<std::thread> threads;
    for (int i = 0; i < kRelays; ++i) {
      threads.emplace_back([&, i] {
        start.arrive_and_wait();  // all at once, so the lease is free for every first read
        const LeaseAcquisition got = relays[i]->AcquireLease("relay-" + std::to_string(i), 30000, WallMs());
        if (got.acquired) {
          ++acquired;
          token = got.lease.token;
        }
      });
    }
    for (auto& thread : threads) thread.join();
    INFO("round " << round);
    REQUIRE(acquired == 1);
    CHECK(token == round);  // one term per round, token + 1 each
    REQUIRE(relays[0]->ReleaseLease(token));
  }
}

TEST_CASE("PostgreSQL leader relay sends every row while a standby whose clock runs an hour ahead sends nothing", "[postgres]") {
  Schema schema;
  ManualClock ahead(WallMs() + kHourMs);
  PgStore store_a(schema.url());
  PgStore store_b(schema.url(), &ahead);  // relay b reads this clock: the store's
  for (const char* id : {"evt-1001", "evt-1002", "evt-1003"}) EnqueueOne(store_a, Event(id));
  testing::FakePublisher publisher_a;
  testing::FakePublisher publisher_b;
  const auto leader_options = [](const std::string& owner) {
    RelayOptions options;
    options.owner = owner;
    options.coordination = Coordination::kLeader;
    options.lease_ms = 30000;
    return options;
  };
  Relay a(store_a, publisher_a, leader_options("relay-a"));
  Relay b(store_b, publisher_b, leader_options("relay-b"));

  const BatchReport first = a.RunBatch();
  CHECK(first.token == 1);
  CHECK(first.settle.marked == 3);
  CHECK(store_a.Status(0).claimed == 0);  // the leader wrote no claims onto rows

  EnqueueOne(store_a, Event("evt-1004"));
  EnqueueOne(store_a, Event("evt-1005"));
  CHECK(b.RunBatch().claimed == 0);
  CHECK(publisher_b.calls.empty());
  const WaitReport wait = b.Waits();
  CHECK(wait.leader.owner == "relay-a");
  CHECK(wait.leader.token == 1);
  CHECK(wait.leader.rows == 2);
  CHECK(wait.leader.until_ms - ahead.EpochMs() > 25000);  // the server's time left, in b's clock
  CHECK(wait.leader.until_ms - ahead.EpochMs() <= 30000);

  // Relay a stops cleanly: relay b takes over at once, with the next token.
  a.Resign();
  const BatchReport taken = b.RunBatch();
  CHECK(taken.token == 2);
  CHECK(taken.settle.marked == 2);
  CHECK(store_a.Count().published == 5);
}

TEST_CASE("PostgreSQL leader lease renewal extends the term of the current token only", "[postgres]") {
  Schema schema;
  PgStore relay_a(schema.url());
  PgStore relay_b(schema.url());
  REQUIRE(relay_a.AcquireLease("relay-a", 1000, WallMs()).acquired);
  CHECK(relay_a.RenewLease(1, 60000, WallMs()));
  CHECK(relay_b.ReadLease().until_ms - WallMs() > 55000);
  CHECK(relay_a.RenewLease(1, 1000, WallMs()));  // never shortens
  CHECK(relay_b.ReadLease().until_ms - WallMs() > 55000);
  CHECK_FALSE(relay_a.RenewLease(2, 60000, WallMs()));  // not the lease's token
  CHECK_THROWS_AS(relay_a.RenewLease(1, -1, WallMs()), ConfigError);

  REQUIRE(relay_a.ReleaseLease(1));
  CHECK_FALSE(relay_a.ReleaseLease(2));
  const LeaderLease released = relay_b.ReadLease();
  CHECK(released.token == 1);
  CHECK(released.until_ms == 0);
  CHECK_FALSE(released.Live(WallMs()));
}

TEST_CASE("PostgreSQL leader token grows by one per term through releases lapses and resets", "[postgres]") {
  Schema schema;
  PgStore relay_a(schema.url());
  PgStore relay_b(schema.url());
  REQUIRE(relay_a.AcquireLease("relay-a", 30000, WallMs()).acquired);
  REQUIRE(relay_a.ReleaseLease(1));
  const LeaseAcquisition second = relay_b.AcquireLease("relay-b", 30000, WallMs());
  REQUIRE(second.acquired);
  CHECK(second.lease.token == 2);
  CHECK(second.previous.owner == "relay-a");
  CHECK(second.previous.token == 1);

  // A 1 ms term runs out on the server's clock: relay b polls as a standby does (a poll of a live
  // lease writes nothing) until the server lets it take the next term (no sleep). Judging
  // ReadLease().Live(WallMs()) instead mixed two instants: the store reads its clock before the
  // test's WallMs(), so on a loaded machine the lease looked lapsed with a millisecond still left
  // on the server, and the acquisition after it was refused.
  REQUIRE(relay_b.ReleaseLease(2));
  REQUIRE(relay_a.AcquireLease("relay-a", 1, WallMs()).acquired);
  const std::int64_t give_up_ms = WallMs() + 5000;
  LeaseAcquisition third = relay_b.AcquireLease("relay-b", 30000, WallMs());
  while (!third.acquired && WallMs() < give_up_ms)
    third = relay_b.AcquireLease("relay-b", 30000, WallMs());
  REQUIRE(third.acquired);
  CHECK(third.lease.token == 4);
  CHECK(third.previous.token == 3);

  // A reset keeps the lease row and ends the term held with its token (4 -> 5, held by nobody):
  // the next term's token is still greater than every earlier one.
  relay_a.ResetSchema();
  CHECK_FALSE(relay_a.ReadLease().Live(WallMs()));
  CHECK(relay_a.ReadLease().token == 5);
  CHECK_FALSE(relay_b.RenewLease(4, 30000, WallMs()));
  const LeaseAcquisition after_reset = relay_a.AcquireLease("relay-a", 30000, WallMs());
  REQUIRE(after_reset.acquired);
  CHECK(after_reset.lease.token == 6);
}

TEST_CASE("PostgreSQL settle of a page read before a reset is fenced out and marks no new row of the same id", "[postgres]") {
  Schema schema;
  PgStore relay(schema.url());
  PgStore writer(schema.url());
  relay.ResetSchema();
  const std::int64_t old_id = EnqueueOne(writer, Event("evt-1001"));
  REQUIRE(relay.AcquireLease("relay-a", 30000, WallMs()).acquired);
  REQUIRE(relay.ReadPage(PageRequest{}).size() == 1);
  // The page is in Kafka's hands when another process resets and writes a new row: its id is
  // the old row's.
  writer.ResetSchema();
  const std::int64_t new_id = EnqueueOne(writer, Event("evt-2001"));
  REQUIRE(new_id == old_id);

  const SettleReport late = relay.SettleUnderLease(1, {old_id}, {}, SettlePolicy{}, 0, 30000);
  CHECK(late.fenced_out);
  CHECK(late.marked == 0);
  CHECK(writer.Count().published == 0);  // the new row was never sent: it must stay unpublished
  // The relay's next term reads the new outbox.
  const LeaseAcquisition next = relay.AcquireLease("relay-a", 30000, WallMs());
  REQUIRE(next.acquired);
  CHECK(next.lease.token == 3);
  const std::vector<OutboxRow> page = relay.ReadPage(PageRequest{});
  REQUIRE(page.size() == 1);
  CHECK(page[0].event.event_id == "evt-2001");
}

TEST_CASE("PostgreSQL claim tokens given before a reset are never given again", "[postgres]") {
  Schema schema;
  PgStore relay_a(schema.url());
  PgStore relay_b(schema.url());
  relay_a.ResetSchema();
  const std::int64_t old_id = EnqueueOne(relay_a, Event("evt-1001"));
  const Claim old_claim = relay_a.ClaimBatch(Request("relay-a"));
  REQUIRE(old_claim.rows.size() == 1);
  // Reset while relay a's batch is in flight; relay b claims the new row of the same id.
  relay_b.ResetSchema();
  const std::int64_t new_id = EnqueueOne(relay_b, Event("evt-2001"));
  REQUIRE(new_id == old_id);
  const Claim new_claim = relay_b.ClaimBatch(Request("relay-b"));
  REQUIRE(new_claim.rows.size() == 1);
  CHECK(new_claim.token > old_claim.token);

  // Relay a's late settle matches nothing: relay b's row stays claimed by b, unpublished.
  const SettleReport late = relay_a.SettleBatch(old_claim.token, {old_id}, {}, SettlePolicy{});
  CHECK(late.marked == 0);
  CHECK(late.fenced == 1);
  CHECK(relay_b.Count().published == 0);
  const SettleReport owner = relay_b.SettleBatch(new_claim.token, {new_id}, {}, SettlePolicy{});
  CHECK(owner.marked == 1);
}

TEST_CASE("PostgreSQL settle under a lease another relay took over is fenced out and writes nothing", "[postgres]") {
  Schema schema;
  PgStore relay_a(schema.url());
  PgStore relay_b(schema.url());
  const std::int64_t first = EnqueueOne(relay_a, Event("evt-1001"));
  const std::int64_t second = EnqueueOne(relay_a, Event("evt-1002"));
  REQUIRE(relay_a.AcquireLease("relay-a", 30000, WallMs()).acquired);
  const std::vector<OutboxRow> page = relay_a.ReadPage(PageRequest{});
  REQUIRE(page.size() == 2);
  // Relay a stalls (SIGSTOP, a long GC pause); its term ends and relay b takes over.
  REQUIRE(relay_a.ReleaseLease(1));
  REQUIRE(relay_b.AcquireLease("relay-b", 30000, WallMs()).acquired);

  const SettleReport late =
      relay_a.SettleUnderLease(1, {first}, {{second, "timed out"}}, SettlePolicy{}, 0, 30000);
  CHECK(late.fenced_out);
  CHECK(late.fenced == 2);
  CHECK(late.fenced_ids == std::vector<std::int64_t>{first, second});
  CHECK(late.marked == 0);
  CHECK(relay_a.Count().published == 0);
  CHECK(relay_b.ReadLease().token == 2);  // the late settle renewed nothing
  CHECK(relay_b.ReadPage(PageRequest{}).size() == 2);  // no attempt recorded either

  const SettleReport owner = relay_b.SettleUnderLease(2, {first, second}, {}, SettlePolicy{}, 0, 30000);
  CHECK_FALSE(owner.fenced_out);
  CHECK(owner.marked == 2);
  CHECK(owner.marked_ids == std::vector<std::int64_t>{first, second});
  CHECK(relay_b.Count().published == 2);
  // Acked again (a duplicate send): already published, counted fenced.
  const SettleReport again = relay_b.SettleUnderLease(2, {first}, {}, SettlePolicy{}, 0, 30000);
  CHECK(again.marked == 0);
  CHECK(again.fenced == 1);
}

TEST_CASE("PostgreSQL settle under the lease records failures on the server clock and renews the lease", "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  const std::int64_t retried = EnqueueOne(store, Event("evt-1001", "L-1"));
  const std::int64_t parked = EnqueueOne(store, Event("evt-1002", "L-2"));
  const std::int64_t behind = EnqueueOne(store, Event("evt-1003", "L-1"));
  REQUIRE(store.AcquireLease("relay-a", 1000, WallMs()).acquired);
  SettlePolicy policy;
  policy.backoff_base_ms = 60000;

  const SettleReport report = store.SettleUnderLease(
      1, {}, {{retried, "Broker: Not enough in-sync replicas"}, {parked, "bad headers", true}}, policy, 0, 60000);
  CHECK(report.retried == 1);
  CHECK(report.parked == 1);
  CHECK(report.parked_ids == std::vector<std::int64_t>{parked});
  CHECK(store.ReadLease().until_ms - WallMs() > 55000);  // renewed by the settle
  const OutboxStatus status = store.Status(0);
  CHECK(status.in_backoff == 1);
  CHECK(status.parked == 1);
  // The first retry is due in about a minute on the server's clock, said in the caller's clock
  // even when that runs an hour ahead.
  const std::int64_t ahead_ms = WallMs() + kHourMs;
  const BackoffWait wait = store.Backoffs(ahead_ms);
  CHECK(wait.rows == 1);
  CHECK(wait.first_due_ms - ahead_ms > 55000);
  CHECK(wait.first_due_ms - ahead_ms <= 60000);

  PageRequest request;
  CHECK(store.ReadPage(request).empty());  // evt-1003 waits behind evt-1001 of its aggregate
  request.block_key = false;
  const std::vector<OutboxRow> flowing = store.ReadPage(request);
  REQUIRE(flowing.size() == 1);
  CHECK(flowing[0].id == behind);
}

// Another relay's settle between the two reads of relay --until-empty's last look: at READ
// COMMITTED each statement of the transaction had its own snapshot (one now(), but not one
// instant of the rows), and a standby beside a claims-mode relay stopped with 5,475 rows pending
// while the leader was still sending them.
TEST_CASE("PostgreSQL ReadAtOneInstant reads the page and the waiting rows at one snapshot so "
          "another relay's settle between them cannot make a pending row look neither sendable "
          "nor waiting",
          "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  PgStore other(schema.url());
  const std::int64_t a1 = EnqueueOne(store, Event("evt-1001", "L-1"));
  const std::int64_t a2 = EnqueueOne(store, Event("evt-1002", "L-1"));
  ClaimRequest claim_request = Request("relay-b", 1);
  claim_request.block_key = true;
  const Claim claim = other.ClaimBatch(claim_request);
  REQUIRE(claim.rows.size() == 1);
  REQUIRE(claim.rows[0].id == a1);
  PageRequest request;
  request.block_key = true;
  std::vector<OutboxRow> page;
  bool claimable = true;
  std::int64_t waiting = -1;
  store.ReadAtOneInstant([&] {
    page = store.ReadPage(request);  // a1 claimed by relay-b, a2 held back behind it
    claimable = store.HasClaimable(Request("relay-a"));
    other.SettleBatch(claim.token, {a1}, {}, SettlePolicy{});  // relay-b's settle commits
    waiting = store.WaitingCount(0);
  });
  CHECK(page.empty());
  CHECK_FALSE(claimable);
  CHECK(waiting == 1);  // a1 under relay-b's claim, as the page saw it
  // Afterwards a2 is sendable and nothing waits.
  const std::vector<OutboxRow> after = store.ReadPage(request);
  REQUIRE(after.size() == 1);
  CHECK(after[0].id == a2);
  CHECK(store.WaitingCount(0) == 0);
}

TEST_CASE("PostgreSQL leader page under block-key holds only each aggregate's oldest unpublished row",
          "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  const std::int64_t a1 = EnqueueOne(store, Event("evt-1001", "L-1"));
  EnqueueOne(store, Event("evt-1002", "L-1"));
  const std::int64_t b1 = EnqueueOne(store, Event("evt-1003", "L-2"));
  PageRequest request;
  std::vector<std::int64_t> ids;
  for (const OutboxRow& row : store.ReadPage(request)) ids.push_back(row.id);
  CHECK(ids == std::vector<std::int64_t>{a1, b1});  // evt-1002 never tried, still held back
  request.after_id = a1;
  ids.clear();
  for (const OutboxRow& row : store.ReadPage(request)) ids.push_back(row.id);
  CHECK(ids == std::vector<std::int64_t>{b1});  // past the cursor too
}

TEST_CASE("PostgreSQL Stalls names the parked row that holds back later rows of its aggregate",
          "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  const std::int64_t a1 = EnqueueOne(store, Event("evt-1001", "L-1"));
  EnqueueOne(store, Event("evt-1002", "L-1"));
  EnqueueOne(store, Event("evt-1003", "L-1"));
  const std::int64_t b1 = EnqueueOne(store, Event("evt-1004", "L-2"));
  CHECK(store.Stalls(10).empty());
  const Claim claim = store.ClaimBatch(Request("relay-a"));  // a1 and b1: one row per aggregate
  store.SettleBatch(claim.token, {}, {{a1, "poison", true}, {b1, "poison", true}}, SettlePolicy{});
  const std::vector<outbox::Stall> stalls = store.Stalls(10);
  REQUIRE(stalls.size() == 1);  // b1 is parked too, but nothing of L-2 waits behind it
  CHECK(stalls[0].parked_id == a1);
  CHECK(stalls[0].event_id == "evt-1001");
  CHECK(stalls[0].aggregate_id == "L-1");
  CHECK(stalls[0].rows_held == 2);
}

TEST_CASE("PostgreSQL leader page reads past the cursor in id order and skips rows a claims relay holds", "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  std::vector<std::int64_t> ids;
  for (const char* id : {"evt-1001", "evt-1002", "evt-1003", "evt-1004"}) ids.push_back(EnqueueOne(store, Event(id)));
  PageRequest request;
  request.limit = 2;
  std::vector<OutboxRow> page = store.ReadPage(request);
  REQUIRE(page.size() == 2);
  CHECK(page[0].id == ids[0]);
  CHECK(page[1].id == ids[1]);
  CHECK(page[1].event.payload == "{\"id\":\"evt-1002\"}");
  request.after_id = ids[1];
  request.limit = 10;
  page = store.ReadPage(request);
  REQUIRE(page.size() == 2);
  CHECK(page[0].id == ids[2]);
  request.up_to_id = ids[2];
  CHECK(store.ReadPage(request).size() == 1);

  REQUIRE(store.ClaimBatch(Request("relay-c", 1)).rows.size() == 1);  // evt-1001, live claim
  page = store.ReadPage(PageRequest{});
  REQUIRE(page.size() == 3);
  CHECK(page[0].id == ids[1]);
}

TEST_CASE("PostgreSQL next id continues after rolled back inserts and never goes back", "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  CHECK(store.NextId() == 1);
  EnqueueOne(store, Event("evt-1001"));
  CHECK(store.NextId() == 2);
  {
    auto txn = store.BeginWrite();
    CHECK(store.Enqueue(txn, Event("evt-1002")) == 2);
  }  // rolled back: the sequence keeps its value
  CHECK(store.NextId() == 3);
  CHECK(EnqueueOne(store, Event("evt-1003")) == 3);
}

TEST_CASE("PostgreSQL status counts pending claimed parked and published rows on the server clock", "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  for (const char* id : {"evt-1001", "evt-1002", "evt-1003", "evt-1004"}) EnqueueOne(store, Event(id));
  SettlePolicy park_at_once;
  park_at_once.max_attempts = 1;
  const Claim claim = store.ClaimBatch(Request("relay-a", 2));
  REQUIRE(claim.rows.size() == 2);
  store.SettleBatch(claim.token, {claim.rows[0].id}, {{claim.rows[1].id, "bad row", true}}, park_at_once);
  const Claim held = store.ClaimBatch(Request("relay-b", 1));
  REQUIRE(held.rows.size() == 1);

  const OutboxStatus status = store.Status(0);
  CHECK(status.published == 1);
  CHECK(status.parked == 1);
  CHECK(status.unpublished == 3);
  CHECK(status.pending == 2);
  CHECK(status.claimed == 1);
  CHECK(status.archived == 0);
  CHECK(status.in_backoff == 0);  // the parked row waits on an unpark, not a backoff
  CHECK(status.oldest_pending_age_ms >= 0);
  CHECK(store.PendingCount() == 2);
  CHECK(store.WaitingCount(0) == 1);  // under relay-b's live lease

  const std::vector<ClaimOwner> owners = store.ClaimOwners(0);
  REQUIRE(owners.size() == 1);
  CHECK(owners[0].owner == "relay-b");
  CHECK(owners[0].rows == 1);
  CHECK(owners[0].expires_in_ms > 25000);
  CHECK(owners[0].expires_in_ms <= 30000);
  CHECK(store.ReleaseClaimsOf("relay-b", owners[0].max_token - 1) == 0);  // not seen: kept
  CHECK(store.ReleaseClaimsOf("relay-b", owners[0].max_token) == 1);
  CHECK(store.ClaimOwners(0).empty());
}

// CI stop 31: relay --until-empty on PostgreSQL stopped with 2 rows pending in backoff. It asked
// "claimable?" and "waiting?" in two statements, each with its own now(); a backoff ending between
// them made the rows neither. ReadAtOneInstant answers both at one now().
TEST_CASE("PostgreSQL ReadAtOneInstant judges a backoff ending between two reads at one now()", "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  EnqueueOne(store, Event("evt-1001"));
  // The first read must come before the backoff's end, which takes two round trips here, and a
  // loaded CI machine has made single round trips take hundreds of ms. So a round whose first
  // read ended after the backoff's end proves nothing and the next round tries again: the
  // backoff doubles with each failed attempt (1, 2, 4, 8 s; the fifth attempt would park the
  // row). A round judges only when its first read surely saw an instant before the end.
  SettlePolicy short_backoff;
  short_backoff.backoff_base_ms = 1000;
  bool judged = false;
  for (int attempt = 1; attempt < short_backoff.max_attempts && !judged; ++attempt) {
    const std::int64_t backoff_ms = BackoffMs(attempt, short_backoff);
    const Claim claim = store.ClaimBatch(Request("relay-a", 1));
    REQUIRE(claim.rows.size() == 1);
    // next_attempt_at is the server's now() during the settle plus the backoff: after
    // before_settle + backoff, and before after_settle + backoff.
    const auto before_settle = std::chrono::steady_clock::now();
    store.SettleBatch(claim.token, {}, {{claim.rows[0].id, "broker said no", false}}, short_backoff);
    const auto after_settle = std::chrono::steady_clock::now();

    bool claimable = true;
    std::int64_t waiting = -1;
    std::chrono::steady_clock::time_point first_read_done;
    store.ReadAtOneInstant([&] {
      claimable = store.HasClaimable(Request("relay-a"));
      first_read_done = std::chrono::steady_clock::now();
      // Past the backoff's end on the wall clock, still before it on the transaction's now().
      std::this_thread::sleep_until(after_settle + std::chrono::milliseconds(backoff_ms + 100));
      waiting = store.WaitingCount(0);
    });
    INFO("attempt " << attempt << ": first read done "
                    << std::chrono::duration_cast<std::chrono::milliseconds>(first_read_done -
                                                                            before_settle)
                           .count()
                    << " ms after the settle began, backoff " << backoff_ms << " ms");
    // The transaction's now() is no later than the first read's return.
    if (first_read_done >= before_settle + std::chrono::milliseconds(backoff_ms)) continue;
    judged = true;
    CHECK_FALSE(claimable);
    CHECK(waiting == 1);
  }
  REQUIRE(judged);
  // Outside the scope each read has its own now(): the backoff is over.
  CHECK(store.WaitingCount(0) == 0);
  CHECK(store.HasClaimable(Request("relay-a")));
}

TEST_CASE("PostgreSQL fetch and mark serve the chapter's per-row relay in id order", "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  const std::int64_t first = EnqueueOne(store, Event("evt-1001"));
  const std::int64_t second = EnqueueOne(store, Event("evt-1002"));
  std::vector<OutboxRow> rows = store.FetchUnpublished(0, 10);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].id == first);
  CHECK(rows[1].event.event_id == "evt-1002");
  CHECK(store.MarkPublished(first));
  CHECK_FALSE(store.MarkPublished(first));  // already published
  rows = store.FetchUnpublished(0, 10);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].id == second);
  CHECK(store.FetchUnpublished(second, 10).empty());
}

TEST_CASE("PostgreSQL fetch and snapshot count an unpublished row a foreign writer gave a negative "
          "id as unpublished and first",
          "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  const std::int64_t own = EnqueueOne(store, Event("evt-1001"));
  pg::Connection writer(schema.url());
  writer.Exec("INSERT INTO outbox(id, event_id, aggregate_id, event_type, payload) "
              "VALUES (-5, 'evt-foreign', 'L-foreign', 'LoanRenewed', convert_to('{}', 'UTF8'))",
              "insert a foreign row");
  const std::vector<OutboxRow> rows = store.FetchUnpublished(std::nullopt, 10);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].id == -5);
  CHECK(rows[1].id == own);
  CHECK(store.FetchUnpublished(std::numeric_limits<std::int64_t>::max(), 10).empty());
  // Without a naive relay's offset nothing counts as published by it (before, every row at or
  // below id 0 did: the checker would have called this unsent row published).
  const OutboxSnapshot snapshot = store.Snapshot();
  REQUIRE(snapshot.rows.size() == 2);
  CHECK(snapshot.rows[0].id == -5);
  CHECK_FALSE(snapshot.rows[0].published);
  CHECK_FALSE(snapshot.rows[1].published);
  // The naive relay's first claim starts below every id too (its offset is no row, not 0).
  PgStore naive(schema.url(), nullptr, PgClaimMode::kNaiveCursor);
  CHECK(EventIds(naive.ClaimBatch(Request("naive"))) ==
        std::vector<std::string>{"evt-foreign", "evt-1001"});
}

TEST_CASE("PostgreSQL a terminated connection counts as lost and reconnect heals it", "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  EnqueueOne(store, Event("evt-1001"));
  // The server ends the store's backend, as a server crash or restart would.
  pg::Connection admin(schema.url());
  REQUIRE(admin.QueryInt("SELECT pg_terminate_backend($1)::int", {pg::Param::Int(store.backend_pid())},
                         "terminate the store's backend") == 1);
  bool lost = false;
  try {
    store.Count();
  } catch (const pg::PgError& e) {
    lost = store.ConnectionLost(e);
  }
  CHECK(lost);
  store.Reconnect();
  CHECK(store.Count().total == 1);
  CHECK_FALSE(store.ConnectionLost(std::runtime_error("not a database error")));
}

namespace {

// Ends backend pid as a server's idle_session_timeout does (a FATAL message, then the socket's
// end) and returns once its process is gone, its socket closed: with a timeout,
// pg_terminate_backend waits for that (PostgreSQL 14 and later,
// https://www.postgresql.org/docs/15/functions-admin.html).
void EndSession(pg::Connection& admin, int pid) {
  REQUIRE(admin.QueryInt("SELECT pg_terminate_backend($1, 10000)::int", {pg::Param::Int(pid)},
                         "end a session") == 1);
}

}  // namespace

TEST_CASE("PostgreSQL ClosedWhileIdle sees a session the server ended only outside a transaction",
          "[postgres]") {
  Schema schema;
  pg::Connection admin(schema.url());
  pg::Connection idle(schema.url());
  CHECK_FALSE(idle.ClosedWhileIdle());  // alive: nothing to read, nothing closed
  CHECK(idle.QueryInt("SELECT 1", {}, "run a statement") == 1);
  EndSession(admin, PQbackendPID(idle.get()));
  CHECK(idle.ClosedWhileIdle());
  CHECK(idle.ClosedWhileIdle());  // and stays so

  pg::Connection busy(schema.url());
  {
    pg::Transaction txn(busy);
    EndSession(admin, PQbackendPID(busy.get()));
    // Inside a transaction nothing is read: its next statement fails, as it did before, and the
    // broken session is still not reported while the transaction object lives (its caller would
    // reopen it under the transaction).
    CHECK_FALSE(busy.ClosedWhileIdle());
    CHECK_THROWS_AS(busy.QueryInt("SELECT 1", {}, "run a statement"), pg::PgError);
    CHECK_FALSE(busy.ClosedWhileIdle());
  }
  CHECK(busy.ClosedWhileIdle());
}

TEST_CASE("PostgreSQL ClosedWhileIdle sees the end idle_session_timeout gives a session",
          "[postgres]") {
  Schema schema;
  pg::Connection timed(schema.url());
  timed.Exec("SET idle_session_timeout = 200", "end this session after 200 ms idle");
  CHECK_FALSE(timed.ClosedWhileIdle());
  // The server's timer (SQLSTATE 57P05), not an administrator's: wait for it to fire.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!timed.ClosedWhileIdle()) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK_THROWS_AS(timed.QueryInt("SELECT 1", {}, "run a statement"), pg::PgError);
}

TEST_CASE("PostgreSQL ClosedWhileIdle leaves a notification that arrived for its reader",
          "[postgres]") {
  Schema schema;
  pg::Connection listener(schema.url());
  listener.Exec("LISTEN outbox_closed_while_idle_test", "listen");
  pg::Connection sender(schema.url());
  sender.Exec("NOTIFY outbox_closed_while_idle_test", "notify");
  pollfd fd{PQsocket(listener.get()), POLLIN, 0};
  REQUIRE(poll(&fd, 1, 10000) == 1);  // the notification's bytes are there, unread
  CHECK_FALSE(listener.ClosedWhileIdle());
  PGnotify* notify = PQnotifies(listener.get());
  REQUIRE(notify != nullptr);
  CHECK(std::string(notify->relname) == "outbox_closed_while_idle_test");
  PQfreemem(notify);
  CHECK(listener.QueryInt("SELECT 1", {}, "run a statement") == 1);
}

TEST_CASE("PostgreSQL sessions the server ended while idle are reopened by the relay's claim "
          "settle page and lease calls",
          "[postgres]") {
  Schema schema;
  pg::Connection admin(schema.url());
  PgStore writer(schema.url());
  PgStore relay(schema.url());
  PgStore settle(schema.url());  // the relay's second connection, idle between marks
  const std::int64_t first = EnqueueOne(writer, Event("evt-1001"));
  const std::int64_t second = EnqueueOne(writer, Event("evt-1002"));

  EndSession(admin, relay.backend_pid());
  const Claim claim = relay.ClaimBatch(Request("relay-a"));
  REQUIRE(claim.rows.size() == 2);
  int ended = settle.backend_pid();
  EndSession(admin, ended);
  const SettleReport settled = settle.SettleBatch(claim.token, {first, second}, {}, SettlePolicy{});
  CHECK(settled.marked == 2);
  CHECK(settled.fenced == 0);
  CHECK(settle.backend_pid() != ended);
  EndSession(admin, relay.backend_pid());
  CHECK_FALSE(relay.HasClaimable(Request("relay-a")));

  // Leader mode: the lease, the page, the settle under the lease.
  const std::int64_t third = EnqueueOne(writer, Event("evt-1003"));
  EndSession(admin, relay.backend_pid());
  const LeaseAcquisition lease = relay.AcquireLease("relay-a", 30000, 0);
  REQUIRE(lease.acquired);
  EndSession(admin, relay.backend_pid());
  CHECK(relay.RenewLease(lease.lease.token, 30000, 0));
  EndSession(admin, relay.backend_pid());
  PageRequest page;
  const std::vector<OutboxRow> rows = relay.ReadPage(page);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].id == third);
  ended = settle.backend_pid();
  EndSession(admin, ended);
  const SettleReport led =
      settle.SettleUnderLease(lease.lease.token, {third}, {}, SettlePolicy{}, 0, 30000);
  CHECK(led.marked == 1);
  CHECK_FALSE(led.fenced_out);
  CHECK(settle.backend_pid() != ended);
  EndSession(admin, relay.backend_pid());
  CHECK(relay.ReleaseLease(lease.lease.token));
  // Each ended session was opened again once: the relay's six, the settle connection's two.
  CHECK(relay.SessionsReopened() == 6);
  CHECK(settle.SessionsReopened() == 2);
  CHECK(writer.SessionsReopened() == 0);
  const OutboxCounts counts = writer.Count();
  CHECK(counts.published == 3);
  CHECK(counts.unpublished == 0);
}

namespace {

// Claims every claimable row and settles it: acked rows published, failed ones failed with error
// (parked at once when park is true, else into a backoff of backoff_ms); the claim of any other
// row is released.
void SettleAll(PgStore& store, const std::vector<std::int64_t>& acked,
               const std::vector<std::int64_t>& failed, const std::string& error, bool park,
               std::int64_t backoff_ms = 0) {
  const Claim claim = store.ClaimBatch(Request("relay-a"));
  std::vector<FailedDelivery> failures;
  for (std::int64_t id : failed) failures.push_back({id, error, park});
  SettlePolicy policy;
  policy.backoff_base_ms = backoff_ms;
  policy.backoff_max_ms = backoff_ms;
  store.SettleBatch(claim.token, acked, failures, policy);
  store.ReleaseClaimsOf("relay-a", claim.token);
}

}  // namespace

TEST_CASE("PostgreSQL parked lists parked rows first then failing rows with attempts error age and wait", "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  for (const char* id : {"evt-1001", "evt-1002", "evt-1003", "evt-1004", "evt-1005"})
    EnqueueOne(store, Event(id));
  // 1 published, 2 retried with a minute's backoff, 3 parked, 4 and 5 untouched.
  const Claim claim = store.ClaimBatch(Request("relay-a", 3));
  REQUIRE(claim.rows.size() == 3);
  SettlePolicy minute;
  minute.backoff_base_ms = 60000;
  store.SettleBatch(claim.token, {1}, {{2, "Local: Message timed out"}, {3, "Broker: Message size too large", true}},
                    minute);

  const std::int64_t caller_now_ms = 5000;  // any caller clock: the wait is the server's
  const TroubledRows troubled = store.ListTroubled(caller_now_ms, 10);
  CHECK(troubled.parked == 1);
  CHECK(troubled.failing == 1);
  REQUIRE(troubled.rows.size() == 2);
  const TroubledRow& parked = troubled.rows[0];
  CHECK(parked.id == 3);
  CHECK(parked.event_id == "evt-1003");
  CHECK(parked.aggregate_id == "L-evt-1003");
  CHECK(parked.event_type == "LoanCreated");
  CHECK(parked.parked);
  CHECK(parked.attempts == 1);
  CHECK(parked.last_error == "Broker: Message size too large");
  CHECK(parked.age_ms >= 0);
  CHECK(parked.age_ms < 60000);
  const TroubledRow& failing = troubled.rows[1];
  CHECK(failing.id == 2);
  CHECK_FALSE(failing.parked);
  CHECK(failing.attempts == 1);
  CHECK(failing.last_error == "Local: Message timed out");
  CHECK(failing.next_attempt_at_ms - caller_now_ms > 50000);
  CHECK(failing.next_attempt_at_ms - caller_now_ms <= 60000);

  SECTION("a limit lists fewer rows and still counts all") {
    const TroubledRows first = store.ListTroubled(caller_now_ms, 1);
    REQUIRE(first.rows.size() == 1);
    CHECK(first.rows[0].id == 3);
    CHECK(first.parked == 1);
    CHECK(first.failing == 1);
  }
  SECTION("a limit below 1 is refused") {
    CHECK_THROWS_AS(store.ListTroubled(caller_now_ms, 0), ConfigError);
  }
}

TEST_CASE("PostgreSQL ParkedCount counts the unpublished parked rows as Status does", "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  OutboxStore& outbox = store;  // through the interface the relay uses
  for (const char* id : {"evt-1001", "evt-1002", "evt-1003", "evt-1004", "evt-1005"})
    EnqueueOne(store, Event(id));
  CHECK(outbox.ParkedCount() == 0);
  SettleAll(store, {1}, {2, 3, 4}, "Broker: Message size too large", /*park=*/true);
  CHECK(outbox.ParkedCount() == 3);
  CHECK(outbox.ParkedCount() == store.Status(0).parked);
  REQUIRE(outbox.Unpark(3));
  CHECK(outbox.ParkedCount() == 2);
}

TEST_CASE("PostgreSQL unpark makes one parked row claimable with attempts reset and unpark all counts the rest", "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  OutboxStore& outbox = store;  // through the interface the CLI uses
  for (const char* id : {"evt-1001", "evt-1002", "evt-1003", "evt-1004", "evt-1005"})
    EnqueueOne(store, Event(id));
  SettleAll(store, {1}, {2, 3, 4}, "Broker: Message size too large", /*park=*/true);
  REQUIRE(store.Status(0).parked == 3);
  REQUIRE(EventIds(store.ClaimBatch(Request("relay-a"))) == std::vector<std::string>{"evt-1005"});

  CHECK(outbox.Unpark(2));
  CHECK_FALSE(outbox.Unpark(2));   // no longer parked
  CHECK_FALSE(outbox.Unpark(99));  // no such row
  CHECK_FALSE(outbox.Unpark(1));   // published
  CHECK_FALSE(outbox.Unpark(5));   // unpublished, never parked
  const Claim again = store.ClaimBatch(Request("relay-b"));
  REQUIRE(EventIds(again) == std::vector<std::string>{"evt-1002"});
  CHECK(again.attempts[0] == 0);
  CHECK(store.Status(0).parked == 2);

  CHECK(outbox.UnparkAll() == 2);
  CHECK(outbox.UnparkAll() == 0);
  CHECK(store.Status(0).parked == 0);
  CHECK(EventIds(store.ClaimBatch(Request("relay-c"))) == std::vector<std::string>{"evt-1003", "evt-1004"});
  CHECK(outbox.ListTroubled(0, 10).rows.empty());
}

TEST_CASE("PostgreSQL purge deletes or archives only published rows older than the cutoff in batches", "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  OutboxStore& outbox = store;
  for (const char* id : {"evt-1001", "evt-1002", "evt-1003", "evt-1004", "evt-1005", "evt-1006"})
    EnqueueOne(store, Event(id));
  SettleAll(store, {1, 2, 3, 4}, {5}, "Broker: Message size too large", /*park=*/true);
  // Rows 1-3 were published two hours ago (the test moves their stamp back; nothing in the lab
  // writes published_at but the store), row 4 just now; 5 is parked, 6 pending.
  pg::Connection fixture(schema.url());
  REQUIRE(fixture.Query("UPDATE outbox SET published_at = published_at - 7200000 WHERE id <= 3", {},
                        "backdate published rows")
              .Affected() == 3);

  const PurgeReport first = outbox.PurgeOlderThan(3'600'000, 2, /*archive=*/true);
  CHECK(first.deleted == 3);
  CHECK(first.archived == 3);
  CHECK(first.batches == 2);  // ceil(3 / 2)
  const OutboxStatus status = store.Status(0);
  CHECK(status.published == 1);
  CHECK(status.parked == 1);
  CHECK(status.pending == 1);
  CHECK(status.archived == 3);
  // The archive keeps each row as published, so the checker still counts it.
  const OutboxSnapshot snapshot = store.Snapshot();
  REQUIRE(snapshot.rows.size() == 6);
  CHECK(snapshot.rows[0].event_id == "evt-1001");
  CHECK(snapshot.rows[0].archived);
  CHECK(snapshot.rows[0].published);
  CHECK_FALSE(snapshot.rows[3].archived);
  CHECK(fixture.QueryInt("SELECT COUNT(*) FROM outbox_archive WHERE published AND archived_at > 0 "
                         "AND payload = convert_to('{\"id\":\"evt-1002\"}', 'UTF8') AND event_id = 'evt-1002'",
                         {}, "read the archive") == 1);

  const PurgeReport none = outbox.PurgeOlderThan(3'600'000, 2, true);
  CHECK(none.deleted == 0);
  CHECK(none.batches == 0);

  SECTION("without archive the rows are only deleted and zero age purges every published row") {
    // A cutoff of now keeps a row stamped in that very millisecond (as SQLite's does): row 4 is
    // moved one ms back so that the test does not depend on the clock ticking.
    fixture.Exec("UPDATE outbox SET published_at = published_at - 1 WHERE id = 4", "backdate row 4");
    const PurgeReport dropped = outbox.PurgeOlderThan(0, 10, /*archive=*/false);
    CHECK(dropped.deleted == 1);
    CHECK(dropped.archived == 0);
    CHECK(dropped.batches == 1);
    CHECK(store.Status(0).archived == 3);
    CHECK(store.Count().total == 2);
    CHECK(store.Status(0).parked == 1);
    CHECK(store.Status(0).pending == 1);
    // The purged row stays in the snapshot as a published event (outbox_purged), so a checker
    // never calls its record a phantom.
    const OutboxSnapshot after = store.Snapshot();
    REQUIRE(after.rows.size() == 6);
    CHECK(after.rows[3].event_id == "evt-1004");
    CHECK(after.rows[3].published);
    CHECK(after.rows[3].archived);
    CHECK(after.rows[3].purged);
    CHECK_FALSE(after.rows[0].purged);
  }
  SECTION("a negative age or a batch size below 1 is refused before anything is deleted") {
    CHECK_THROWS_AS(outbox.PurgeOlderThan(-1, 10, false), ConfigError);
    CHECK_THROWS_AS(outbox.PurgeOlderThan(0, 0, false), ConfigError);
    CHECK(store.Count().total == 3);
  }
}

TEST_CASE("PostgreSQL an error at purge.mid_batch rolls back only the purge batch in progress", "[postgres][failpoint]") {
  Schema schema;
  PgStore store(schema.url());
  for (const char* id : {"evt-1001", "evt-1002", "evt-1003", "evt-1004", "evt-1005"})
    EnqueueOne(store, Event(id));
  SettleAll(store, {1, 2, 3, 4, 5}, {}, "", false);
  pg::Connection fixture(schema.url());
  fixture.Exec("UPDATE outbox SET published_at = published_at - 7200000", "backdate published rows");
  struct Reset {
    ~Reset() { ConfigureFailpoints(""); }
  } reset;
  ConfigureFailpoints("purge.mid_batch=1*off->error");
  CHECK_THROWS_AS(store.PurgeOlderThan(3'600'000, 2, true), FailpointError);
  // The first batch (rows 1, 2) committed; the second (3, 4) rolled back.
  CHECK(store.Count().total == 3);
  CHECK(store.Status(0).archived == 2);

  ConfigureFailpoints("");
  const PurgeReport rest = store.PurgeOlderThan(3'600'000, 2, true);
  CHECK(rest.deleted == 3);
  CHECK(rest.batches == 2);
  CHECK(store.Count().total == 0);
  CHECK(store.Status(0).archived == 5);
}

TEST_CASE("PostgreSQL keeps the broker incarnations noted by publishers once each until a reset",
          "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  CHECK(store.BrokerIncarnations().empty());
  store.NoteBrokerIncarnation("embedded:00000000000000a1");
  store.NoteBrokerIncarnation("cluster:AbCdEf");
  store.NoteBrokerIncarnation("embedded:00000000000000a1");
  const std::vector<std::string> noted = store.BrokerIncarnations();
  CHECK(noted.size() == 2);
  CHECK(std::count(noted.begin(), noted.end(), "embedded:00000000000000a1") == 1);
  CHECK(std::count(noted.begin(), noted.end(), "cluster:AbCdEf") == 1);
  store.ResetSchema();
  CHECK(store.BrokerIncarnations().empty());
}

TEST_CASE("PostgreSQL ends a relay transaction that idles past its limit and its row locks go "
          "with it",
          "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  const std::int64_t id = EnqueueOne(store, Event("evt-1001"));
  pg::Connection frozen(schema.url());
  pg::Connection other(schema.url());
  pg::Transaction held(frozen);
  pg_store::LimitIdleInTransaction(frozen, 300);  // the floor, 5 s, applies
  frozen.Query("SELECT id FROM outbox WHERE id = $1 FOR UPDATE", {pg::Param::Int(id)}, "lock");
  // The holder now idles (a SIGSTOP): the other waits on its lock until the server ends the idle
  // session after the 5 s floor, below its own lock_timeout of 20 s.
  pg::Transaction waiting(other);
  other.Query("SET LOCAL lock_timeout = 20000", {}, "lock timeout");
  const auto started = std::chrono::steady_clock::now();
  other.Query("SELECT id FROM outbox WHERE id = $1 FOR UPDATE", {pg::Param::Int(id)}, "lock");
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - started)
                          .count();
  CHECK(waited >= 4500);
  CHECK(waited < 15000);
  waiting.Commit();
  // The frozen relay, woken: its session is gone, as a lost connection.
  try {
    frozen.Query("SELECT 1", {}, "after the freeze");
    FAIL("the idle transaction's session survived its limit");
  } catch (const pg::PgError& e) {
    CHECK(e.connection_lost());
  }
}

TEST_CASE("PostgreSQL QueryPrepared prepares a statement once per connection and runs it again after its table is dropped and created",
          "[postgres]") {
  Schema schema;
  pg::Connection connection(schema.url());
  connection.Exec("CREATE TABLE prepared_t (v INTEGER NOT NULL); INSERT INTO prepared_t VALUES (1), (2)",
                  "create a table");
  const std::string sum = "SELECT COALESCE(sum(v), 0) FROM prepared_t WHERE v >= $1";
  const auto prepared_count = [&connection] {
    return connection.QueryInt("SELECT count(*) FROM pg_prepared_statements", {},
                               "count the prepared statements");
  };
  CHECK(connection.QueryPrepared(sum, {pg::Param::Int(0)}, "sum").Int(0, 0) == 3);
  CHECK(connection.QueryPrepared(sum, {pg::Param::Int(2)}, "sum").Int(0, 0) == 2);
  CHECK(prepared_count() == 1);
  // A statement that fails to prepare throws and is not remembered.
  CHECK_THROWS_AS(connection.QueryPrepared("SELECT nope FROM prepared_t", {}, "bad"), pg::PgError);
  CHECK(prepared_count() == 1);
  // What reset does to the outbox's tables: the server analyses the statement again.
  connection.Exec("DROP TABLE prepared_t; CREATE TABLE prepared_t (v INTEGER NOT NULL); "
                  "INSERT INTO prepared_t VALUES (5)",
                  "create the table again");
  CHECK(connection.QueryPrepared(sum, {pg::Param::Int(0)}, "sum").Int(0, 0) == 5);
  CHECK(prepared_count() == 1);
  // A new connection prepares its own.
  pg::Connection other(schema.url());
  CHECK(other.QueryPrepared(sum, {pg::Param::Int(6)}, "sum").Int(0, 0) == 0);
  CHECK(other.QueryInt("SELECT count(*) FROM pg_prepared_statements", {}, "count") == 1);
}

TEST_CASE("PostgreSQL QueryPrepared prepares a statement again after a column it returns changed type or the session dropped it",
          "[postgres]") {
  Schema schema;
  pg::Connection connection(schema.url());
  connection.Exec("CREATE TABLE retyped_t (id BIGINT NOT NULL, v TEXT NOT NULL); "
                  "INSERT INTO retyped_t VALUES (1, 'a')",
                  "create a table");
  const std::string read = "SELECT id, v FROM retyped_t WHERE id >= $1 ORDER BY id";
  const auto prepared_count = [&connection] {
    return connection.QueryInt("SELECT count(*) FROM pg_prepared_statements", {},
                               "count the prepared statements");
  };
  CHECK(connection.QueryPrepared(read, {pg::Param::Int(0)}, "read").Text(0, 1) == "a");
  // An operator's migration while a relay runs: the statement's result type changes. Before,
  // every later call failed with 0A000 "cached plan must not change result type".
  connection.Exec("ALTER TABLE retyped_t ALTER COLUMN v TYPE VARCHAR(20); "
                  "INSERT INTO retyped_t VALUES (2, 'b')",
                  "widen the column");
  const pg::Result after = connection.QueryPrepared(read, {pg::Param::Int(0)}, "read");
  REQUIRE(after.rows() == 2);
  CHECK(after.Text(1, 1) == "b");
  CHECK(prepared_count() == 1);
  // Inside a transaction the statement is not run again (the transaction is aborted): it throws.
  connection.Exec("ALTER TABLE retyped_t ALTER COLUMN v TYPE TEXT", "narrow the column back");
  {
    pg::Transaction txn(connection);
    try {
      connection.QueryPrepared(read, {pg::Param::Int(0)}, "read");
      FAIL("the stale statement ran inside a transaction");
    } catch (const pg::PgError& e) {
      CHECK(e.sqlstate() == "0A000");
    }
  }
  // Outside one, the next call prepares it again.
  CHECK(connection.QueryPrepared(read, {pg::Param::Int(2)}, "read").Text(0, 1) == "b");
  // A session whose statements were dropped (DEALLOCATE ALL, as a pooler's DISCARD ALL does).
  connection.Exec("DEALLOCATE ALL", "drop the prepared statements");
  CHECK(prepared_count() == 0);
  CHECK(connection.QueryPrepared(read, {pg::Param::Int(1)}, "read").rows() == 2);
  CHECK(prepared_count() == 1);
}
