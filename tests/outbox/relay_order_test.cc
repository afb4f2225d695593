// Per-aggregate order under random delivery failures: many aggregates, both
// coordination modes, pipelines of 1 to 4 batches. A seeded sweep: the seed is
// printed, and OUTBOX_ORDER_SEED=N replays one run. On SQLite and on the PostgreSQL server in
// OUTBOX_PG_URL.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "outbox/pg_store.h"
#include "outbox/relay.h"
#include "outbox/store.h"
#include "pg_test_support.h"
#include "relay_test_support.h"
#include "test_support.h"

namespace {

using outbox::Coordination;
using outbox::DeliveryResult;
using outbox::OutboundMessage;
using outbox::testing::EventOn;
using outbox::testing::FakeClock;
using outbox::testing::FakeWaiter;
using outbox::testing::TempDir;

// Sends queue a batch; AwaitOldest fails each message of the oldest batch with
// probability fail_rate and acks the others, logging every ack in order.
class FlakyPipelinePublisher : public outbox::Publisher {
 public:
  FlakyPipelinePublisher(std::mt19937_64& random, double fail_rate)
      : random_(random), fail_rate_(fail_rate) {}

  std::vector<DeliveryResult> Publish(const std::vector<OutboundMessage>& messages) override {
    Send(messages);
    return AwaitOldest();
  }
  void Send(const std::vector<OutboundMessage>& messages) override {
    queue_.push_back(messages);
    if (on_send) on_send();
  }
  std::vector<DeliveryResult> AwaitOldest() override {
    const std::vector<OutboundMessage> messages = queue_.front();
    queue_.pop_front();
    std::bernoulli_distribution fails(fail_rate_);
    std::vector<DeliveryResult> results;
    for (const OutboundMessage& m : messages) {
      DeliveryResult r;
      r.outbox_id = m.outbox_id;
      r.ok = !fails(random_);
      if (r.ok) {
        r.partition = 0;
        r.offset = static_cast<std::int64_t>(acked.size());
        acked.push_back(m);
      } else {
        r.error = "fake: random delivery failure";
      }
      results.push_back(r);
    }
    return results;
  }
  std::size_t InFlight() const override { return queue_.size(); }

  std::vector<OutboundMessage> acked;  // in the order the "broker" took them
  std::function<void()> on_send;

 private:
  std::mt19937_64& random_;
  double fail_rate_;
  std::deque<std::vector<OutboundMessage>> queue_;
};

std::uint64_t BaseSeed() {
  if (const char* text = std::getenv("OUTBOX_ORDER_SEED")) return std::strtoull(text, nullptr, 10);
  return 20261202;
}

struct OrderRun {
  int acked = 0;
  int violations = 0;  // an event acked after a later event of its aggregate
  int duplicates = 0;
  std::int64_t unpublished = 0;
  std::string first_violation;
};

// Events on kAggregates aggregates in random order, written in random-sized
// transactions, some while batches are in flight; drained until empty. store:
// a fresh outbox (Store or PgStore) whose clock is clock; settle_store: a second
// connection to it for the marks (relay --overlap-mark), or null.
template <typename AnyStore>
OrderRun RunOnce(AnyStore& store, FakeClock& clock, Coordination coordination, int pipeline,
                 std::uint64_t seed, outbox::OutboxStore* settle_store = nullptr) {
  constexpr int kEvents = 240;
  constexpr int kAggregates = 12;
  std::mt19937_64 random(seed);
  int written = 0;
  const auto write_some = [&](int n) {
    auto txn = store.BeginWrite();
    for (int i = 0; i < n && written < kEvents; ++i, ++written) {
      const int aggregate = std::uniform_int_distribution<int>(0, kAggregates - 1)(random);
      store.Enqueue(txn, EventOn(written + 1, "L-" + std::to_string(aggregate)));
    }
    txn.Commit();
  };
  write_some(kEvents / 2);

  FlakyPipelinePublisher publisher(random, 0.2);
  publisher.on_send = [&] {
    if (written < kEvents && std::bernoulli_distribution(0.5)(random))
      write_some(std::uniform_int_distribution<int>(1, 15)(random));
  };
  outbox::RelayOptions options;
  options.owner = "relay-order";
  options.clock = &clock;
  options.coordination = coordination;
  options.key = outbox::KeyChoice::kAggregateId;
  options.batch_size = std::uniform_int_distribution<int>(1, 16)(random);
  options.settle.max_attempts = 1000;  // nothing parks: every event gets through
  options.settle.backoff_base_ms = 10;
  options.settle.backoff_max_ms = 40;
  options.settle_store = settle_store;
  outbox::Relay relay(store, publisher, options);
  FakeWaiter waiter;
  waiter.max_waits = 100000;
  waiter.on_wait = [&](int timeout_ms) { clock.AdvanceMs(timeout_ms); };
  outbox::LoopOptions loop;
  loop.mode = outbox::LoopMode::kUntilEmpty;
  loop.pipeline_depth = pipeline;
  // The rows written after the loop found nothing to do are drained by a second loop.
  while (true) {
    outbox::RunRelayLoop(relay, waiter, loop, nullptr);
    if (written == kEvents) break;
    write_some(kEvents);
  }
  outbox::RunRelayLoop(relay, waiter, loop, nullptr);

  OrderRun run;
  std::map<std::string, int> last_of_aggregate;  // the highest event number acked so far
  std::map<int, int> times_acked;
  for (const OutboundMessage& m : publisher.acked) {
    const int n = std::stoi(m.event_id.substr(4));  // "evt-N"
    ++run.acked;
    if (++times_acked[n] > 1) ++run.duplicates;
    int& last = last_of_aggregate[m.key];
    if (n < last) {
      if (run.violations++ == 0)
        run.first_violation = m.key + ": evt-" + std::to_string(n) + " after evt-" +
                              std::to_string(last);
    }
    last = std::max(last, n);
  }
  run.unpublished = store.Count().unpublished;
  return run;
}

// mark_apart: a leader marking on a second connection, on its worker thread (relay
// --overlap-mark).
OrderRun RunOnSqlite(Coordination coordination, int pipeline, std::uint64_t seed,
                     bool mark_apart) {
  TempDir dir;
  FakeClock clock;
  outbox::StoreOptions store_options = outbox::testing::FastStoreOptions();
  store_options.clock = &clock;
  outbox::Store store(dir.File("lab.db"), store_options, outbox::OpenMode::kCreate);
  store.ResetSchema();
  std::optional<outbox::Store> settle_store;
  if (mark_apart)
    settle_store.emplace(dir.File("lab.db"), store_options, outbox::OpenMode::kExisting);
  return RunOnce(store, clock, coordination, pipeline, seed,
                 settle_store ? &*settle_store : nullptr);
}

// The server's clock times the backoffs here (PgStore): the fake clock only moves the relay's.
// mark_apart: the settles on a second connection (a second backend), on the relay's worker
// thread, as `relay` does by default.
OrderRun RunOnPostgres(Coordination coordination, int pipeline, std::uint64_t seed,
                       bool mark_apart) {
  outbox::testing::PgSchema schema("order");
  FakeClock clock;
  outbox::PgStore store(schema.url(), &clock);
  store.ResetSchema();
  std::optional<outbox::PgStore> settle_store;
  if (mark_apart) settle_store.emplace(schema.url(), &clock);
  return RunOnce(store, clock, coordination, pipeline, seed,
                 settle_store ? &*settle_store : nullptr);
}

// The coordination modes and pipeline depths given, rounds seeds each.
void Sweep(OrderRun (*run_once)(Coordination, int, std::uint64_t), std::uint64_t rounds,
           std::vector<Coordination> coordinations = {Coordination::kLeader, Coordination::kClaims},
           int first_pipeline = 1) {
  const std::uint64_t base = BaseSeed();
  std::printf("relay order sweep: OUTBOX_ORDER_SEED=%llu\n", static_cast<unsigned long long>(base));
  for (const Coordination coordination : coordinations) {
    for (int pipeline = first_pipeline; pipeline <= 4; ++pipeline) {
      for (std::uint64_t round = 0; round < rounds; ++round) {
        const std::uint64_t seed = base * 1000 + round * 10 + static_cast<std::uint64_t>(pipeline);
        INFO((coordination == Coordination::kLeader ? "leader" : "claims")
             << " pipeline " << pipeline << " seed " << seed);
        const OrderRun run = run_once(coordination, pipeline, seed);
        INFO("first violation: " << run.first_violation);
        CHECK(run.violations == 0);
        CHECK(run.duplicates == 0);
        CHECK(run.acked == 240);
        CHECK(run.unpublished == 0);
      }
    }
  }
}

}  // namespace

TEST_CASE("Under random delivery failures each aggregate's events are acked in order in both "
          "coordination modes and every pipeline depth",
          "[relay]") {
  Sweep([](Coordination c, int pipeline, std::uint64_t seed) {
    return RunOnSqlite(c, pipeline, seed, false);
  }, 3);
}

TEST_CASE("On PostgreSQL each aggregate's events are acked in order under random delivery "
          "failures in both coordination modes and every pipeline depth",
          "[relay][postgres]") {
  Sweep([](Coordination c, int pipeline, std::uint64_t seed) {
    return RunOnPostgres(c, pipeline, seed, false);
  }, 3);
}

TEST_CASE("On PostgreSQL a relay settling on a second connection acks each aggregate's events "
          "in order under random delivery failures in both modes at pipelines 2 to 4",
          "[relay][postgres]") {
  Sweep([](Coordination c, int pipeline, std::uint64_t seed) {
    return RunOnPostgres(c, pipeline, seed, true);
  }, 3, {Coordination::kLeader, Coordination::kClaims}, 2);
}

TEST_CASE("A leader marking on a second connection acks each aggregate's events in order under "
          "random delivery failures at pipelines 2 to 4",
          "[relay]") {
  Sweep([](Coordination c, int pipeline, std::uint64_t seed) {
    return RunOnSqlite(c, pipeline, seed, true);
  }, 3, {Coordination::kLeader}, 2);
}
