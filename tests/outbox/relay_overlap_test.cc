// The leader's mark on a second connection (RelayOptions::settle_store, issue 25): batch N's
// settle runs in a worker thread on its own store while the relay reads and produces batch N+1.
// The settle store here is an SQLite Store of the same file whose settle waits, before it
// writes, until the relay's own store has read a page: with an inline settle that read never
// comes (the wait times out and the test fails), so overlap is shown without timing, and every
// such read comes from a snapshot before the settle's commit. Time comes from a FakeClock.
#include <catch2/catch.hpp>

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "outbox/error.h"
#include "outbox/relay.h"
#include "outbox/store.h"
#include "relay_test_support.h"
#include "settle_gate.h"
#include "test_support.h"

namespace {

using outbox::Coordination;
using outbox::DbError;
using outbox::FailedDelivery;
using outbox::LeaseEvent;
using outbox::OpenMode;
using outbox::OutboxRow;
using outbox::PageRequest;
using outbox::Relay;
using outbox::RelayOptions;
using outbox::SettlePolicy;
using outbox::SettleReport;
using outbox::Store;
using outbox::StoreOptions;
using outbox::testing::EnqueueAll;
using outbox::testing::EventOn;
using outbox::testing::FakeClock;
using outbox::testing::FakeWaiter;
using outbox::testing::FastStoreOptions;
using outbox::testing::IsPublished;
using outbox::testing::PipelineFakePublisher;
using outbox::testing::SettleGate;
using outbox::testing::TempDir;
using Ids = std::vector<std::int64_t>;

constexpr std::int64_t kLeaseMs = 3000;


// The relay's own store: tells the gate about every page it reads.
class ReadingStore : public Store {
 public:
  ReadingStore(const std::string& path, const StoreOptions& options, OpenMode mode,
               SettleGate& gate)
      : Store(path, options, mode), gate_(gate) {}
  std::vector<OutboxRow> ReadPage(const PageRequest& request) override {
    std::vector<OutboxRow> rows = Store::ReadPage(request);
    gate_.NoteRead();
    return rows;
  }

 private:
  SettleGate& gate_;
};

// The settle store: settle number n (1, 2, ...) first runs before_settle(n) (which may throw),
// then, from settle wait_from on, waits until the relay's store read a page after the settle was
// handed off (its "marking" phase), then settles.
class GatedSettleStore : public Store {
 public:
  GatedSettleStore(const std::string& path, const StoreOptions& options, SettleGate& gate)
      : Store(path, options, OpenMode::kExisting), gate_(gate) {}
  SettleReport SettleUnderLease(std::int64_t token, const std::vector<std::int64_t>& acked,
                                const std::vector<FailedDelivery>& failed,
                                const SettlePolicy& policy, std::int64_t now_ms,
                                std::int64_t lease_ms) override {
    int n = 0;
    {
      std::lock_guard lock(gate_.mutex);
      n = ++settles;
      threads.push_back(std::this_thread::get_id());
    }
    if (before_settle) before_settle(n);
    if (n >= wait_from) {
      std::unique_lock lock(gate_.mutex);
      if (gate_.WaitForReadAfterMarking(lock, n))
        ++overlapped;
      else
        ++timeouts;
    }
    SettleReport report = Store::SettleUnderLease(token, acked, failed, policy, now_ms, lease_ms);
    if (after_settle) after_settle(n);
    return report;
  }

  // Claims mode's settle: only counted (claims mode on SQLite never hands one to this store).
  SettleReport SettleBatch(std::int64_t token, const std::vector<std::int64_t>& acked,
                           const std::vector<FailedDelivery>& failed, const SettlePolicy& policy,
                           std::int64_t now_ms) override {
    {
      std::lock_guard lock(gate_.mutex);
      ++claim_settles;
    }
    return Store::SettleBatch(token, acked, failed, policy, now_ms);
  }

  int wait_from = 1 << 30;  // no settle waits unless a test says so
  std::function<void(int n)> before_settle;
  std::function<void(int n)> after_settle;  // once settle n committed, before it returns
  // Written under the gate's mutex by the settling thread; read by the test once it is done.
  int settles = 0;
  int claim_settles = 0;  // SettleBatch calls
  int overlapped = 0;  // settles that waited for a read and saw one
  int timeouts = 0;    // settles that waited and saw none
  std::vector<std::thread::id> threads;

 private:
  SettleGate& gate_;
};

class OverlapFixture {
 public:
  OverlapFixture()
      : store(dir.File("lab.db"), Options(clock), OpenMode::kCreate, gate),
        settle_store((store.ResetSchema(), dir.File("lab.db")), Options(clock), gate),
        checker(dir.File("lab.db"), Options(clock), OpenMode::kExisting) {}

  static StoreOptions Options(FakeClock& clock) {
    StoreOptions options = FastStoreOptions();
    options.clock = &clock;
    return options;
  }

  RelayOptions LeaderOptions(std::int64_t batch_size) {
    RelayOptions options;
    options.owner = "relay-a";
    options.clock = &clock;
    options.coordination = Coordination::kLeader;
    options.lease_ms = kLeaseMs;
    options.batch_size = batch_size;
    options.settle_store = &settle_store;
    options.on_phase = [this](std::string_view phase, std::int64_t) {
      if (phase == "marking") gate.NoteMarking();
    };
    options.on_lease = [this](const LeaseEvent& event) {
      leases.push_back((event.kind == LeaseEvent::Kind::kAcquired ? "acquired "
                        : event.kind == LeaseEvent::Kind::kLost   ? "lost "
                                                                  : "released ") +
                       std::to_string(event.lease.token));
    };
    return options;
  }

  TempDir dir;
  FakeClock clock;
  SettleGate gate;
  ReadingStore store;          // the relay's
  GatedSettleStore settle_store;
  Store checker;               // a third connection, for the test's own reads
  std::vector<std::string> leases;
};

// RunRelayLoop until empty at pipeline depth 2, `relay --until-empty`'s default.
outbox::LoopReport DrainAtDepth2(Relay& relay) {
  FakeWaiter waiter;
  outbox::LoopOptions loop;
  loop.mode = outbox::LoopMode::kUntilEmpty;
  loop.pipeline_depth = 2;
  return outbox::RunRelayLoop(relay, waiter, loop, nullptr);
}

Ids Flatten(const std::vector<Ids>& sends) {
  Ids ids;
  for (const Ids& batch : sends) ids.insert(ids.end(), batch.begin(), batch.end());
  return ids;
}

}  // namespace

TEST_CASE("A leader with a settle store marks batch N on it while it reads and produces N+1 "
          "and sends the rows being marked once with their aggregates in id order",
          "[relay][leader][pipeline][overlap]") {
  OverlapFixture f;
  // 16 rows over 4 aggregates: row i's aggregate is agg-(i % 4), so row i follows row i - 4.
  std::vector<outbox::OutboxEvent> events;
  for (int i = 1; i <= 16; ++i) events.push_back(EventOn(i, "agg-" + std::to_string(i % 4)));
  const Ids ids = EnqueueAll(f.store, events);
  REQUIRE(ids.front() == 1);
  REQUIRE(ids.back() == 16);
  // Every settle after the first (which runs on this thread: nothing was settling) waits for a
  // page read on the relay's store.
  f.settle_store.wait_from = 2;

  PipelineFakePublisher publisher;
  std::vector<Ids> sends;
  std::vector<std::string> order_problems;  // a row sent before its aggregate's previous was marked
  publisher.on_send = [&](const std::vector<outbox::OutboundMessage>& messages) {
    Ids batch;
    for (const outbox::OutboundMessage& m : messages) {
      batch.push_back(m.outbox_id);
      if (m.outbox_id > 4 && !IsPublished(f.checker, m.outbox_id - 4))
        order_problems.push_back(std::to_string(m.outbox_id));
    }
    sends.push_back(batch);
  };
  Relay relay(f.store, publisher, f.LeaderOptions(2));

  const outbox::LoopReport report = DrainAtDepth2(relay);

  const Ids sent = Flatten(sends);
  Ids sorted = sent;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == ids);  // each row sent exactly once: none of a batch being marked sent again
  CHECK(order_problems.empty());
  CHECK(report.batches == 8);
  CHECK(report.marked == 16);
  CHECK(report.fenced == 0);
  CHECK(relay.InFlight() == 0);
  for (std::int64_t id : ids) CHECK(IsPublished(f.checker, id));
  CHECK(f.settle_store.settles == 8);
  CHECK(f.settle_store.timeouts == 0);
  CHECK(f.settle_store.overlapped == 7);  // settles 2..8 each saw a page read before they wrote
  CHECK(f.settle_store.threads.at(0) == std::this_thread::get_id());
  for (std::size_t i = 1; i < f.settle_store.threads.size(); ++i)
    CHECK(f.settle_store.threads[i] != std::this_thread::get_id());
  CHECK(f.leases == std::vector<std::string>{"acquired 1"});
}

TEST_CASE("While a leader marks a batch on the settle store a depth-2 pipeline sends the next "
          "two batches and no third",
          "[relay][leader][pipeline][overlap]") {
  OverlapFixture f;
  std::vector<outbox::OutboxEvent> events;  // distinct aggregates: no row is held back
  for (int i = 1; i <= 12; ++i) events.push_back(EventOn(i, "agg-" + std::to_string(i)));
  EnqueueAll(f.store, events);

  std::mutex mutex;
  std::condition_variable sent_more;
  int sent = 0;  // batches handed to the publisher, under mutex
  PipelineFakePublisher publisher;
  publisher.on_send = [&](const std::vector<outbox::OutboundMessage>&) {
    {
      std::lock_guard lock(mutex);
      ++sent;
    }
    sent_more.notify_all();
  };
  // Settle 1 runs on this thread (nothing was settling); settle 2 is the first on the worker. It
  // waits until batches 3 and 4 were sent: the batch being marked takes no pipeline slot. Until
  // it returns, the relay's thread waits for it, so the count at its end is what was sent meanwhile.
  bool batch_4_sent_while_marking = false;
  int sent_when_mark_2_ended = -1;
  f.settle_store.before_settle = [&](int n) {
    if (n != 2) return;
    std::unique_lock lock(mutex);
    batch_4_sent_while_marking =
        sent_more.wait_for(lock, std::chrono::seconds(10), [&] { return sent >= 4; });
  };
  f.settle_store.after_settle = [&](int n) {
    if (n != 2) return;
    std::lock_guard lock(mutex);
    sent_when_mark_2_ended = sent;
  };
  Relay relay(f.store, publisher, f.LeaderOptions(2));

  const outbox::LoopReport report = DrainAtDepth2(relay);

  CHECK(batch_4_sent_while_marking);
  // Batches 2 (acked, being marked), 3 and 4 unmarked at once: what a kill -9 there re-sends,
  // depth + 1 batches.
  CHECK(sent_when_mark_2_ended == 4);
  CHECK(report.batches == 6);
  CHECK(report.marked == 12);
  CHECK(f.settle_store.settles == 6);
  CHECK(relay.InFlight() == 0);
}

TEST_CASE("A leader's settle fenced out on the settle store makes it lose the lease when the "
          "settle is collected",
          "[relay][leader][pipeline][overlap]") {
  OverlapFixture f;
  std::vector<outbox::OutboxEvent> events;
  for (int i = 1; i <= 4; ++i) events.push_back(EventOn(i, "agg-" + std::to_string(i)));
  EnqueueAll(f.store, events);
  Store other(f.dir.File("lab.db"), OverlapFixture::Options(f.clock), OpenMode::kExisting);
  // Settle 2 (rows 3, 4): relay-a's lease runs out meanwhile and relay-b takes over.
  f.settle_store.before_settle = [&](int n) {
    if (n != 2) return;
    f.clock.AdvanceMs(kLeaseMs + 1);
    REQUIRE(other.AcquireLease("relay-b", kLeaseMs, f.clock.EpochMs()).acquired);
  };
  PipelineFakePublisher publisher;
  Relay relay(f.store, publisher, f.LeaderOptions(2));

  REQUIRE(relay.StartBatch());  // rows 1, 2
  REQUIRE(relay.StartBatch());  // rows 3, 4
  const outbox::BatchReport first = relay.FinishBatch();  // settles 1, 2 here
  CHECK(first.settle.marked_ids == Ids{1, 2});
  REQUIRE(relay.StartSettle());  // 3, 4 on the worker
  CHECK_FALSE(relay.StartSettle());  // one settle at a time
  CHECK(relay.InFlight() == 1);  // rows 3, 4 being settled
  CHECK(relay.LeaseToken() == 1);  // not known yet: the settle has not been collected

  const outbox::BatchReport second = relay.FinishBatch();  // collects it

  CHECK(second.settle.fenced_out);
  CHECK(second.settle.marked == 0);
  CHECK(second.settle.fenced_ids == Ids{3, 4});
  CHECK(relay.LeaseToken() == 0);
  CHECK(relay.InFlight() == 0);
  CHECK(f.leases == std::vector<std::string>{"acquired 1", "lost 1"});
  CHECK_FALSE(IsPublished(f.checker, 3));
  CHECK_FALSE(IsPublished(f.checker, 4));
  CHECK_FALSE(relay.StartBatch());  // a standby now: relay-b leads
  CHECK(f.settle_store.settles == 2);
}

TEST_CASE("An error in a settle on the settle store is thrown by the FinishBatch that collects "
          "it and the batch in flight is settled by the next call and the failed one sent again",
          "[relay][leader][pipeline][overlap]") {
  OverlapFixture f;
  std::vector<outbox::OutboxEvent> events;
  for (int i = 1; i <= 6; ++i) events.push_back(EventOn(i, "agg-" + std::to_string(i)));
  EnqueueAll(f.store, events);
  f.settle_store.before_settle = [](int n) {
    if (n == 2) throw DbError("settle batch: disk I/O error", SQLITE_IOERR);
  };
  PipelineFakePublisher publisher;
  std::vector<Ids> sends;
  publisher.on_send = [&](const std::vector<outbox::OutboundMessage>& messages) {
    Ids batch;
    for (const outbox::OutboundMessage& m : messages) batch.push_back(m.outbox_id);
    sends.push_back(batch);
  };
  Relay relay(f.store, publisher, f.LeaderOptions(2));

  REQUIRE(relay.StartBatch());                          // 1, 2
  REQUIRE(relay.StartBatch());                          // 3, 4
  CHECK(relay.FinishBatch().settle.marked_ids == Ids{1, 2});
  REQUIRE(relay.StartSettle());  // 3, 4 on the worker: their settle fails
  REQUIRE(relay.StartBatch());                          // 5, 6: 3, 4 are still in flight
  CHECK(sends == std::vector<Ids>{{1, 2}, {3, 4}, {5, 6}});

  try {
    relay.FinishBatch();  // collects 3, 4's settle
    FAIL("the settle's error was not thrown");
  } catch (const DbError& e) {
    CHECK(e.primary_code() == SQLITE_IOERR);
    CHECK(std::string(e.what()) == "settle batch: disk I/O error");
  }
  CHECK(relay.InFlight() == 1);  // 5, 6: in flight, untouched
  CHECK_FALSE(IsPublished(f.checker, 3));
  CHECK_FALSE(IsPublished(f.checker, 5));

  const outbox::BatchReport third = relay.FinishBatch();  // nothing settling: 5, 6 here
  CHECK(third.settle.marked_ids == Ids{5, 6});
  CHECK(f.settle_store.threads.at(2) == std::this_thread::get_id());
  CHECK(relay.InFlight() == 0);

  REQUIRE(relay.StartBatch());  // 3, 4 again: dropped unsettled, so unpublished
  CHECK(sends.back() == Ids{3, 4});
  CHECK(relay.FinishBatch().settle.marked_ids == Ids{3, 4});
  for (std::int64_t id = 1; id <= 6; ++id) CHECK(IsPublished(f.checker, id));
  CHECK(f.settle_store.settles == 4);
}

TEST_CASE("In claims mode on SQLite a settle store is ignored: each batch is settled inline on "
          "the relay's store (a claim is a write and would wait for the settle's lock)",
          "[relay][claims][pipeline][overlap]") {
  OverlapFixture f;
  std::vector<outbox::OutboxEvent> events;
  for (int i = 1; i <= 4; ++i) events.push_back(EventOn(i, "agg-" + std::to_string(i)));
  EnqueueAll(f.store, events);
  RelayOptions options = f.LeaderOptions(2);
  options.coordination = Coordination::kClaims;
  PipelineFakePublisher publisher;
  Relay relay(f.store, publisher, options);

  REQUIRE(relay.StartBatch());  // 1, 2
  REQUIRE(relay.StartBatch());  // 3, 4
  CHECK_FALSE(relay.StartSettle());
  CHECK(relay.FinishBatch().settle.marked_ids == Ids{1, 2});
  CHECK_FALSE(relay.StartSettle());
  CHECK(relay.FinishBatch().settle.marked_ids == Ids{3, 4});
  CHECK(relay.InFlight() == 0);
  for (std::int64_t id = 1; id <= 4; ++id) CHECK(IsPublished(f.checker, id));
  CHECK(f.settle_store.claim_settles == 0);
  CHECK(f.settle_store.settles == 0);
}
