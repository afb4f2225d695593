// Helpers for the tests of the production relay, its store methods, the idle
// wait and the failpoints: events on a chosen aggregate, raw column reads, a
// clock the test moves, a publisher that fails chosen rows, a scripted
// IdleWaiter and a guard that clears the global failpoint registry.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "outbox/clock.h"
#include "outbox/event.h"
#include "outbox/failpoint.h"
#include "outbox/relay.h"
#include "outbox/sqlite/connection.h"
#include "outbox/store.h"
#include "test_support.h"

namespace outbox::testing {

// An epoch-ms instant after every MakeEvent(i).created_at_ms for i < 100,000.
inline constexpr std::int64_t kNowMs = 1700000100000;

// Store options for tests of claim, settle and purge logic, which does not
// depend on durability: WAL with synchronous=NORMAL skips the fsync per
// commit (a commit still survives a process crash).
inline StoreOptions FastStoreOptions() {
  StoreOptions options;
  options.synchronous = Synchronous::kNormal;
  return options;
}

// MakeEvent(i) on aggregate.
inline OutboxEvent EventOn(int i, const std::string& aggregate) {
  OutboxEvent event = MakeEvent(i);
  event.aggregate_id = aggregate;
  return event;
}

// Enqueues each event in its own committed transaction; returns the row ids.
inline std::vector<std::int64_t> EnqueueAll(Store& store, const std::vector<OutboxEvent>& events) {
  std::vector<std::int64_t> ids;
  for (const OutboxEvent& event : events) {
    auto txn = store.BeginWrite();
    ids.push_back(store.Enqueue(txn, event));
    txn.Commit();
  }
  return ids;
}

// Enqueues MakeEvent(from..to); returns the row ids.
inline std::vector<std::int64_t> EnqueueRange(Store& store, int from, int to) {
  std::vector<OutboxEvent> events;
  for (int i = from; i <= to; ++i) events.push_back(MakeEvent(i));
  return EnqueueAll(store, events);
}

// Column `column` of outbox row id read with a raw query; nullopt for NULL.
inline std::optional<std::int64_t> IntColumn(Store& store, const std::string& column,
                                             std::int64_t id) {
  auto txn = store.BeginRead();
  auto select = txn.connection().Prepare("SELECT " + column + " FROM outbox WHERE id = ?1");
  select.Bind(1, id);
  REQUIRE(select.Step());
  if (select.ColumnIsNull(0)) return std::nullopt;
  return select.ColumnInt64(0);
}

inline std::optional<std::string> TextColumn(Store& store, const std::string& column,
                                             std::int64_t id) {
  auto txn = store.BeginRead();
  auto select = txn.connection().Prepare("SELECT " + column + " FROM outbox WHERE id = ?1");
  select.Bind(1, id);
  REQUIRE(select.Step());
  if (select.ColumnIsNull(0)) return std::nullopt;
  return select.ColumnText(0);
}

inline bool IsPublished(Store& store, std::int64_t id) {
  return IntColumn(store, "published", id).value_or(0) != 0;
}

inline std::vector<std::int64_t> IdsOf(const std::vector<OutboxRow>& rows) {
  std::vector<std::int64_t> ids;
  for (const OutboxRow& row : rows) ids.push_back(row.id);
  return ids;
}

inline std::vector<std::int64_t> IdsOf(const std::vector<OutboundMessage>& messages) {
  std::vector<std::int64_t> ids;
  for (const OutboundMessage& message : messages) ids.push_back(message.outbox_id);
  return ids;
}

// A clock the test moves by hand, starting at kNowMs: plugs into
// StoreOptions::clock and RelayOptions::clock.
class FakeClock : public ManualClock {
 public:
  FakeClock() : ManualClock(kNowMs) {}
};

// A FakePublisher that also fails every message whose outbox id is in
// failing, each call, whatever the script says.
class RowFailingPublisher : public FakePublisher {
 public:
  using FakePublisher::FakePublisher;

  std::vector<DeliveryResult> Publish(const std::vector<OutboundMessage>& messages) override {
    std::vector<DeliveryResult> results = FakePublisher::Publish(messages);
    for (DeliveryResult& result : results) {
      if (!failing.count(result.outbox_id)) continue;
      result.ok = false;
      result.partition = -1;
      result.offset = -1;
      result.error = "fake: poison row";
    }
    return results;
  }

  // How many times row id was handed to Publish.
  int TimesSent(std::int64_t id) const {
    int n = 0;
    for (const auto& call : calls)
      for (const OutboundMessage& m : call) n += m.outbox_id == id ? 1 : 0;
    return n;
  }

  std::set<std::int64_t> failing;
};

// An IdleWaiter that never blocks: counts ForgetWakeups and Wait calls, runs on_wait
// (e.g. to move a FakeClock by the timeout), and reports a stop once stop is
// set. After max_waits waits it requests a stop itself, so a loop that would
// wait forever ends and the test can see it (stopped == true).
class FakeWaiter : public IdleWaiter {
 public:
  void ForgetWakeups() override { ++forgets; }
  Wake Wait(int timeout_ms) override {
    ++waits;
    timeouts_ms.push_back(timeout_ms);
    if (on_wait) on_wait(timeout_ms);
    if (waits >= max_waits) stop = true;
    return stop ? Wake::kStop : Wake::kTimeout;
  }
  bool StopRequested() override { return stop; }

  int forgets = 0;
  int waits = 0;
  int max_waits = 1000;
  std::vector<int> timeouts_ms;
  std::function<void(int)> on_wait;
  bool stop = false;
};

// Clears the global failpoint registry when the test ends, even when an
// assertion throws out of it.
struct FailpointReset {
  FailpointReset() = default;
  FailpointReset(const FailpointReset&) = delete;
  FailpointReset& operator=(const FailpointReset&) = delete;
  ~FailpointReset() { ConfigureFailpoints(""); }
};

}  // namespace outbox::testing
