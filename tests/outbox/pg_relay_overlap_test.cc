// The claims-mode relay's mark on a second connection on PostgreSQL (RelayOptions::settle_store,
// issue 25): batch N's settle runs on a worker thread on its own server backend while the relay
// claims and produces batch N+1. The settle store's settle waits, before it writes, until the
// relay's own store has claimed or looked for rows after the hand-off: with an inline settle
// that claim never comes (the wait times out and the test fails), so overlap is shown without
// timing, and every such claim runs while the settling batch's rows still hold their claim.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "outbox/pg/connection.h"
#include "outbox/pg_store.h"
#include "outbox/relay.h"
#include "pg_test_support.h"
#include "relay_test_support.h"
#include "settle_gate.h"

namespace {

using outbox::Claim;
using outbox::ClaimRequest;
using outbox::Coordination;
using outbox::FailedDelivery;
using outbox::FailureMode;
using outbox::PgStore;
using outbox::Relay;
using outbox::RelayOptions;
using outbox::SettlePolicy;
using outbox::SettleReport;
using outbox::testing::EventOn;
using outbox::testing::FakeWaiter;
using outbox::testing::PipelineFakePublisher;
using outbox::testing::SettleGate;
using Ids = std::vector<std::int64_t>;


// The relay's own store: tells the gate about every claim and look.
class ClaimingStore : public PgStore {
 public:
  ClaimingStore(const std::string& url, SettleGate& gate) : PgStore(url), gate_(gate) {}
  using PgStore::ClaimBatch;
  Claim ClaimBatch(const ClaimRequest& request) override {
    Claim claim = PgStore::ClaimBatch(request);
    gate_.NoteRead();
    return claim;
  }
  bool HasClaimable(const ClaimRequest& request) override {
    const bool claimable = PgStore::HasClaimable(request);
    gate_.NoteRead();
    return claimable;
  }

 private:
  SettleGate& gate_;
};

// The settle store: settle n (1, 2, ...) from the second on waits until the relay's store
// claimed or looked after the settle was handed off (its "marking" phase), then settles.
// Constructed on the relay's thread.
class GatedSettleStore : public PgStore {
 public:
  GatedSettleStore(const std::string& url, SettleGate& gate) : PgStore(url), gate_(gate) {}
  using PgStore::SettleBatch;
  SettleReport SettleBatch(std::int64_t token, const std::vector<std::int64_t>& acked,
                           const std::vector<FailedDelivery>& failed, const SettlePolicy& policy,
                           std::int64_t now_ms) override {
    std::unique_lock lock(gate_.mutex);
    const int n = ++settles;
    threads.push_back(std::this_thread::get_id());
    // A settle run on the main thread (FinishBatch with none handed off) would wait for itself.
    if (n >= 2 && std::this_thread::get_id() != main_thread) {
      if (gate_.WaitForReadAfterMarking(lock, n))
        ++overlapped;
      else
        ++timeouts;
    }
    lock.unlock();
    return PgStore::SettleBatch(token, acked, failed, policy, now_ms);
  }

  const std::thread::id main_thread = std::this_thread::get_id();  // the relay's
  // Written under the gate's mutex by the settling thread; read by the test once it is done.
  int settles = 0;
  int overlapped = 0;  // settles that waited for a claim and saw one
  int timeouts = 0;    // settles that waited and saw none
  std::vector<std::thread::id> threads;

 private:
  SettleGate& gate_;
};

bool IsPublished(outbox::pg::Connection& connection, std::int64_t id) {
  return connection.QueryInt("SELECT count(*) FROM outbox WHERE id = $1 AND published",
                             {outbox::pg::Param::Int(id)}, "read a row's state") == 1;
}

}  // namespace

TEST_CASE("PostgreSQL claims mode with a settle store marks batch N on it while it claims and "
          "produces N+1 and sends every row once with each aggregate in id order",
          "[postgres][relay][claims][pipeline][overlap]") {
  outbox::testing::PgSchema schema("overlap");
  SettleGate gate;
  ClaimingStore store(schema.url(), gate);
  GatedSettleStore settle_store(schema.url(), gate);
  outbox::pg::Connection checker(schema.url());
  // 48 rows over 12 aggregates, 4 a piece: row i's aggregate is agg-(i % 12), so row i follows
  // row i - 12. Batches of 4: batch N+1 has heads to claim while batch N is settling.
  constexpr int kAggregates = 12;
  Ids ids;
  for (int i = 1; i <= 48; ++i) {
    auto txn = store.BeginWrite();
    ids.push_back(store.Enqueue(txn, EventOn(i, "agg-" + std::to_string(i % kAggregates))));
    txn.Commit();
  }
  REQUIRE(ids.back() - ids.front() == 47);
  const std::int64_t first = ids.front();

  PipelineFakePublisher publisher;
  std::vector<Ids> sends;
  std::vector<std::string> order_problems;  // a row sent before its aggregate's previous was marked
  publisher.on_send = [&](const std::vector<outbox::OutboundMessage>& messages) {
    Ids batch;
    for (const outbox::OutboundMessage& m : messages) {
      batch.push_back(m.outbox_id);
      if (m.outbox_id >= first + kAggregates && !IsPublished(checker, m.outbox_id - kAggregates))
        order_problems.push_back(std::to_string(m.outbox_id));
    }
    sends.push_back(batch);
  };
  RelayOptions options;
  options.owner = "relay-a";
  options.coordination = Coordination::kClaims;
  options.on_failure = FailureMode::kBlockKey;
  options.batch_size = 4;
  options.settle_store = &settle_store;
  options.on_phase = [&](std::string_view phase, std::int64_t) {
    if (phase == "marking") gate.NoteMarking();
  };
  Relay relay(store, publisher, options);
  FakeWaiter waiter;
  outbox::LoopOptions loop;
  loop.mode = outbox::LoopMode::kUntilEmpty;
  loop.pipeline_depth = 2;

  const outbox::LoopReport report = outbox::RunRelayLoop(relay, waiter, loop, nullptr);

  Ids sent;
  for (const Ids& batch : sends) sent.insert(sent.end(), batch.begin(), batch.end());
  std::sort(sent.begin(), sent.end());
  CHECK(sent == ids);  // each row sent exactly once: none of a batch being marked claimed again
  CHECK(order_problems.empty());
  CHECK(report.marked == 48);
  CHECK(report.fenced == 0);
  CHECK(relay.InFlight() == 0);
  for (std::int64_t id : ids) CHECK(IsPublished(checker, id));
  CHECK(settle_store.settles == report.batches);
  CHECK(settle_store.timeouts == 0);
  CHECK(settle_store.overlapped == settle_store.settles - 1);  // all but the first overlapped
  REQUIRE(settle_store.threads.size() >= 2);
  CHECK(settle_store.threads.at(0) == std::this_thread::get_id());
  for (std::size_t i = 1; i < settle_store.threads.size(); ++i)
    CHECK(settle_store.threads[i] != std::this_thread::get_id());
}
