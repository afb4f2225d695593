// RunRelayLoopReconnecting against a database server that crashes and comes back, modelled on an
// SQLite store: its relay calls throw an error the store calls a lost connection while the
// server is "down", and Reconnect heals the connection only once the server is "up" again (as
// PgStore: a connection broken by a crash stays broken until Reconnect). Real PostgreSQL
// crashes (pg_ctl stop -m immediate) are scenarios/pg-relay-stop-server-down.sh and
// scenarios/pg-server-crash.sh.
#include <catch2/catch.hpp>

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "outbox/error.h"
#include "outbox/relay.h"
#include "outbox/store.h"
#include "relay_test_support.h"
#include "test_support.h"

namespace {

using outbox::LoopMode;
using outbox::LoopOptions;
using outbox::LoopReport;
using outbox::OpenMode;
using outbox::Relay;
using outbox::RelayOptions;
using outbox::testing::EnqueueRange;
using outbox::testing::FakeClock;
using outbox::testing::FakeWaiter;
using outbox::testing::FastStoreOptions;
using outbox::testing::IsPublished;
using outbox::testing::PipelineFakePublisher;
using outbox::testing::TempDir;

// What a lost connection throws here (on PostgreSQL: pg::PgError with connection_lost()).
class ServerGone : public outbox::Error {
 public:
  using outbox::Error::Error;
};

// An SQLite store behind a server that crashes at the crash_at_claim-th ClaimBatch (0: never).
// While the connection is broken, the claim, the look for claimable rows and the settle throw
// ServerGone; Reconnect throws it too while the server is down.
class CrashingServerStore : public outbox::Store {
 public:
  CrashingServerStore(const std::string& path)
      : outbox::Store(path, FastStoreOptions(), OpenMode::kCreate) {
    ResetSchema();
  }

  bool ConnectionLost(const std::exception& e) const noexcept override {
    return dynamic_cast<const ServerGone*>(&e) != nullptr;
  }
  void Reconnect() override {
    ++reconnect_calls;
    if (down) throw ServerGone("connect to the server: Connection refused");
    connected_ = true;
  }

  outbox::Claim ClaimBatch(const outbox::ClaimRequest& request) override {
    if (++claims_ == crash_at_claim) Crash();
    Served("claim a batch");
    return outbox::Store::ClaimBatch(request);
  }
  bool HasClaimable(const outbox::ClaimRequest& request) override {
    Served("look for claimable rows");
    return outbox::Store::HasClaimable(request);
  }
  outbox::SettleReport SettleBatch(std::int64_t token, const std::vector<std::int64_t>& acked,
                                   const std::vector<outbox::FailedDelivery>& failed,
                                   const outbox::SettlePolicy& policy,
                                   std::int64_t now_ms) override {
    Served("settle a batch");
    return outbox::Store::SettleBatch(token, acked, failed, policy, now_ms);
  }

  void Crash() {
    down = true;
    connected_ = false;
  }

  int crash_at_claim = 0;
  bool down = false;  // the server: a Reconnect now fails
  int reconnect_calls = 0;

 private:
  void Served(const std::string& what) const {
    if (!connected_) throw ServerGone(what + ": server closed the connection unexpectedly");
  }
  bool connected_ = true;
  int claims_ = 0;
};

// Nine rows in batches of two on a fresh CrashingServerStore, a relay with a pipeline of
// depth 2, until-empty mode.
struct Fixture {
  Fixture() : store(dir.File("lab.db")) {
    EnqueueRange(store, 1, 9);
    options.owner = "relay-test";
    options.clock = &clock;
    options.batch_size = 2;
    loop.mode = LoopMode::kUntilEmpty;
    loop.pipeline_depth = 2;
  }

  int PublishedRows() {
    int n = 0;
    for (std::int64_t id = 1; id <= 9; ++id) n += IsPublished(store, id) ? 1 : 0;
    return n;
  }

  TempDir dir;
  CrashingServerStore store;
  FakeClock clock;
  RelayOptions options;
  LoopOptions loop;
  PipelineFakePublisher publisher;
  FakeWaiter waiter;
};

}  // namespace

TEST_CASE("RunRelayLoopReconnecting counts the batches of the run that lost its connection",
          "[relay]") {
  Fixture f;
  f.loop.pipeline_depth = GENERATE(1, 2);
  // The third claim meets the crash (depth 2: batch 2 is in flight then); the server is back at
  // the first wait.
  f.store.crash_at_claim = 3;
  f.waiter.on_wait = [&](int) { f.store.down = false; };
  Relay relay(f.store, f.publisher, f.options);

  const LoopReport report = outbox::RunRelayLoopReconnecting(relay, f.waiter, f.loop, nullptr);

  CHECK(report.reconnects == 1);
  CHECK(report.batches == 5);
  CHECK(report.acked == 9);
  CHECK(report.marked == 9);
  CHECK(f.PublishedRows() == 9);
  CHECK_FALSE(report.stopped);
  CHECK(report.server_unreachable.empty());
}

TEST_CASE("A stop request while the server is down ends RunRelayLoopReconnecting after one more "
          "reconnect attempt with the server unreachable",
          "[relay]") {
  Fixture f;
  f.store.crash_at_claim = 3;  // batch 1 settled, batch 2 in flight
  f.waiter.on_wait = [&](int) { f.waiter.stop = true; };  // SIGTERM in the first reconnect wait
  Relay relay(f.store, f.publisher, f.options);

  const LoopReport report = outbox::RunRelayLoopReconnecting(relay, f.waiter, f.loop, nullptr);

  CHECK(report.stopped);
  CHECK(report.server_unreachable == "connect to the server: Connection refused");
  CHECK(f.store.reconnect_calls == 1);
  CHECK(f.waiter.waits == 1);
  CHECK(report.reconnects == 0);
  CHECK(report.batches == 1);
  CHECK(report.marked == 2);
  CHECK(relay.InFlight() == 1);  // batch 2: sent, unsettled, claimed again after its lease
}

TEST_CASE("A stop request once the server is back settles the batches in flight before "
          "RunRelayLoopReconnecting ends",
          "[relay]") {
  Fixture f;
  f.store.crash_at_claim = 3;  // batch 1 settled, batch 2 in flight
  // The server restarts, then SIGTERM comes, both in the first reconnect wait.
  f.waiter.on_wait = [&](int) {
    f.store.down = false;
    f.waiter.stop = true;
  };
  Relay relay(f.store, f.publisher, f.options);

  const LoopReport report = outbox::RunRelayLoopReconnecting(relay, f.waiter, f.loop, nullptr);

  CHECK(report.stopped);
  CHECK(report.server_unreachable.empty());
  CHECK(report.reconnects == 1);
  CHECK(report.batches == 2);
  CHECK(report.marked == 4);
  CHECK(relay.InFlight() == 0);
  CHECK(f.PublishedRows() == 4);
  CHECK(f.publisher.log ==
        std::vector<std::string>{"send 1", "send 3", "ack 1", "ack 3"});  // no batch after stop
}

TEST_CASE("A connection lost after the stop request makes one reconnect attempt without a wait",
          "[relay]") {
  Fixture f;
  f.loop.pipeline_depth = 1;
  // SIGTERM while batch 1 is in flight, then the server crashes before its settle.
  f.publisher.on_send = [&](const std::vector<outbox::OutboundMessage>&) {
    f.waiter.stop = true;
    f.store.Crash();
  };
  Relay relay(f.store, f.publisher, f.options);

  const LoopReport report = outbox::RunRelayLoopReconnecting(relay, f.waiter, f.loop, nullptr);

  CHECK(report.stopped);
  CHECK_FALSE(report.server_unreachable.empty());
  CHECK(f.store.reconnect_calls == 1);
  CHECK(f.waiter.waits == 0);
  CHECK(report.batches == 0);
  CHECK(f.PublishedRows() == 0);
}
