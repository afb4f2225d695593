// Broker outages at the relay: a delivery that failed for the brokers' sake (DeliveryResult::
// outage) counts no attempt, parks nothing, leaves the row pending and makes the relay wait out
// a backoff of its own; the outage is recorded in the store for status and cleared when
// delivery resumes. Against a fake publisher and a clock the test moves, in both coordination
// modes.
#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "outbox/broker_outage.h"
#include "outbox/relay.h"
#include "outbox/store.h"
#include "relay_test_support.h"
#include "test_support.h"

namespace {

using outbox::BatchReport;
using outbox::BrokerOutage;
using outbox::Coordination;
using outbox::DeliveryResult;
using outbox::KeyChoice;
using outbox::LoopMode;
using outbox::LoopOptions;
using outbox::OpenMode;
using outbox::OutageEvent;
using outbox::OutboundMessage;
using outbox::Relay;
using outbox::RelayOptions;
using outbox::Store;
using outbox::testing::EnqueueAll;
using outbox::testing::EventOn;
using outbox::testing::FakeClock;
using outbox::testing::FakePublisher;
using outbox::testing::FakeWaiter;
using outbox::testing::FastStoreOptions;
using outbox::testing::IntColumn;
using outbox::testing::kNowMs;
using outbox::testing::TempDir;
using outbox::testing::TextColumn;

constexpr const char* kAllDown = "all brokers down (_ALL_BROKERS_DOWN)";
// As KafkaPublisher reports it: the cause, then the message's own error.
constexpr const char* kAllDownReport =
    "all brokers down (_ALL_BROKERS_DOWN); the message: Local: Message timed out (_MSG_TIMED_OUT)";

// Acks every message, except: while down, every message fails as an outage; a message whose
// outbox id is in poison always fails as the message's own error.
class OutagePublisher : public FakePublisher {
 public:
  std::vector<DeliveryResult> Publish(const std::vector<OutboundMessage>& messages) override {
    std::vector<DeliveryResult> results = FakePublisher::Publish(messages);
    for (DeliveryResult& result : results) {
      if (down) {
        result = {result.outbox_id, false, -1, -1, kAllDownReport, false, true};
      } else if (poison.count(result.outbox_id) > 0) {
        result = {result.outbox_id, false, -1, -1, "Broker: Message size too large "
                                                   "(MSG_SIZE_TOO_LARGE)"};
      } else {
        delivered.push_back(result.outbox_id);
      }
    }
    return results;
  }

  bool down = false;
  std::set<std::int64_t> poison;
  std::vector<std::int64_t> delivered;  // outbox ids acked, in send order
};

// 12 rows on 3 aggregates (L-0, L-1, L-2, in turn), a relay keyed by aggregate, one counted
// attempt parks a row.
struct OutageFixture {
  explicit OutageFixture(Coordination coordination)
      : store(dir.File("lab.db"), FastStoreOptions(), OpenMode::kCreate) {
    store.ResetSchema();
    std::vector<outbox::OutboxEvent> written;
    for (int i = 0; i < 12; ++i) written.push_back(EventOn(i, "L-" + std::to_string(i % 3)));
    ids = EnqueueAll(store, written);
    options.owner = "relay-outage-test";
    options.clock = &clock;
    options.coordination = coordination;
    options.key = KeyChoice::kAggregateId;
    options.settle.max_attempts = 1;
    options.settle.backoff_base_ms = 100;
    options.settle.backoff_max_ms = 400;
    options.on_outage = [this](const OutageEvent& event) { events.push_back(event); };
  }

  // Each aggregate's acked rows are in id order.
  bool OrderedPerAggregate() const {
    std::map<std::int64_t, std::int64_t> last;  // aggregate (id % 3 of the row index) -> last id
    for (std::int64_t id : publisher.delivered) {
      const std::int64_t aggregate = (id - ids.front()) % 3;
      if (last.count(aggregate) > 0 && last[aggregate] > id) return false;
      last[aggregate] = id;
    }
    return true;
  }

  TempDir dir;
  Store store;
  FakeClock clock;
  OutagePublisher publisher;
  RelayOptions options;
  std::vector<std::int64_t> ids;
  std::vector<OutageEvent> events;
};

}  // namespace

TEST_CASE("Relay counts no attempt and parks nothing while the brokers are down and sends every "
          "row in order once they are back",
          "[relay]") {
  const Coordination coordination = GENERATE(Coordination::kClaims, Coordination::kLeader);
  INFO((coordination == Coordination::kClaims ? "claims" : "leader"));
  OutageFixture f(coordination);
  Relay relay(f.store, f.publisher, f.options);

  f.publisher.down = true;
  const BatchReport down = relay.RunBatch();
  CHECK(down.claimed == 3);  // block-key: the head of each aggregate
  CHECK(down.failed == 3);
  CHECK(down.outage == 3);
  CHECK(down.settle.retried == 0);
  CHECK(down.settle.parked == 0);
  for (std::int64_t id : f.ids) {
    INFO("row " << id);
    CHECK(IntColumn(f.store, "attempts", id) == 0);
    CHECK_FALSE(TextColumn(f.store, "last_error", id).has_value());
  }
  const outbox::OutboxStatus status = f.store.Status(f.clock.EpochMs());
  CHECK(status.parked == 0);
  CHECK(status.pending == 12);
  CHECK(status.claimed == 0);     // released at once: the outage's backoff decides
  CHECK(status.in_backoff == 0);  // no row's own backoff either

  // The relay waits out its own backoff: it sends nothing, and until-empty would not end.
  REQUIRE(relay.Outage().active());
  CHECK(relay.Outage().since_ms == kNowMs);
  CHECK(relay.Outage().cause == kAllDown);
  CHECK(relay.OutageWaitMs() == 100);
  CHECK_FALSE(relay.HasClaimable());
  CHECK_FALSE(relay.CanOnlyWaitForever());
  const std::size_t sends = f.publisher.calls.size();
  CHECK(relay.RunBatch().claimed == 0);
  CHECK(f.publisher.calls.size() == sends);

  // Recorded for status, with its start and the next try.
  std::optional<BrokerOutage> recorded = f.store.ReadOutage();
  REQUIRE(recorded.has_value());
  CHECK(recorded->since_ms == kNowMs);
  CHECK(recorded->cause == kAllDown);
  CHECK(recorded->owner == "relay-outage-test");
  CHECK(recorded->retry_at_ms == kNowMs + 100);

  // A second failed try doubles the wait and keeps the start.
  f.clock.AdvanceMs(100);
  CHECK(relay.RunBatch().outage == 3);
  CHECK(relay.OutageWaitMs() == 200);
  recorded = f.store.ReadOutage();
  REQUIRE(recorded.has_value());
  CHECK(recorded->since_ms == kNowMs);
  CHECK(recorded->noted_at_ms == kNowMs + 100);

  // Back: every row goes out, each aggregate in order, none parked, the record cleared.
  f.publisher.down = false;
  f.clock.AdvanceMs(200);
  for (int i = 0; i < 10 && f.store.PendingCount() > 0; ++i) relay.RunBatch();
  CHECK(f.store.PendingCount() == 0);
  CHECK(f.store.Count().published == 12);
  CHECK(f.publisher.delivered.size() == 12);
  CHECK(f.OrderedPerAggregate());
  CHECK_FALSE(relay.Outage().active());
  CHECK_FALSE(f.store.ReadOutage().has_value());
  for (std::int64_t id : f.ids) CHECK(IntColumn(f.store, "attempts", id) == 0);

  REQUIRE(f.events.size() == 3);
  CHECK(f.events[0].kind == OutageEvent::Kind::kBegun);
  CHECK(f.events[0].rows_waiting == 12);
  CHECK(f.events[0].retry_in_ms == 100);
  CHECK(f.events[1].kind == OutageEvent::Kind::kGoesOn);
  CHECK(f.events[1].retry_in_ms == 200);
  CHECK(f.events[2].kind == OutageEvent::Kind::kOver);
  CHECK(f.events[2].outage.since_ms == kNowMs);
}

TEST_CASE("A message's own delivery error counts an attempt and parks while an outage in the "
          "same batch counts none",
          "[relay]") {
  const Coordination coordination = GENERATE(Coordination::kClaims, Coordination::kLeader);
  INFO((coordination == Coordination::kClaims ? "claims" : "leader"));
  OutageFixture f(coordination);
  // One outage row and one poison row in a batch of the three aggregates' heads.
  class MixedPublisher : public OutagePublisher {
   public:
    std::vector<DeliveryResult> Publish(const std::vector<OutboundMessage>& messages) override {
      std::vector<DeliveryResult> results = OutagePublisher::Publish(messages);
      for (DeliveryResult& result : results)
        if (result.outbox_id == outage_id) result = {result.outbox_id, false, -1, -1, kAllDown, false, true};
      return results;
    }
    std::int64_t outage_id = 0;
  } publisher;
  publisher.poison = {f.ids[1]};
  publisher.outage_id = f.ids[2];
  Relay relay(f.store, publisher, f.options);

  const BatchReport batch = relay.RunBatch();

  CHECK(batch.claimed == 3);
  CHECK(batch.acked == 1);
  CHECK(batch.failed == 2);
  CHECK(batch.outage == 1);
  CHECK(batch.settle.parked == 1);
  CHECK(IntColumn(f.store, "attempts", f.ids[1]) == 1);
  CHECK(TextColumn(f.store, "last_error", f.ids[1]) ==
        std::optional<std::string>("Broker: Message size too large (MSG_SIZE_TOO_LARGE)"));
  CHECK(IntColumn(f.store, "attempts", f.ids[2]) == 0);
  CHECK(f.store.Status(f.clock.EpochMs()).parked == 1);
  CHECK(relay.Outage().active());
}

TEST_CASE("RunRelayLoop until-empty waits out a broker outage and ends with every row published",
          "[relay]") {
  const Coordination coordination = GENERATE(Coordination::kClaims, Coordination::kLeader);
  const int depth = GENERATE(1, 2);
  INFO((coordination == Coordination::kClaims ? "claims" : "leader") << " pipeline " << depth);
  OutageFixture f(coordination);
  f.options.batch_size = 2;
  Relay relay(f.store, f.publisher, f.options);
  f.publisher.down = true;
  FakeWaiter waiter;
  int idle_waits_down = 0;
  waiter.on_wait = [&](int timeout_ms) {
    f.clock.AdvanceMs(timeout_ms);
    // The brokers come back after a few of the relay's waits.
    if (f.publisher.down && ++idle_waits_down == 20) f.publisher.down = false;
  };
  LoopOptions loop_options;
  loop_options.mode = LoopMode::kUntilEmpty;
  loop_options.pipeline_depth = depth;
  loop_options.idle_max_ms = 50;

  const outbox::LoopReport report = outbox::RunRelayLoop(relay, waiter, loop_options, {});

  CHECK(idle_waits_down == 20);
  CHECK_FALSE(report.stopped);
  CHECK(report.parked == 0);
  CHECK(report.marked == 12);
  CHECK(f.store.PendingCount() == 0);
  CHECK(f.OrderedPerAggregate());
  CHECK_FALSE(f.store.ReadOutage().has_value());
  REQUIRE(f.events.size() >= 2);
  CHECK(f.events.front().kind == OutageEvent::Kind::kBegun);
  CHECK(f.events.back().kind == OutageEvent::Kind::kOver);
}

TEST_CASE("Store records one broker outage per run keeps its start and clears it", "[store]") {
  TempDir dir;
  Store store(dir.File("lab.db"), FastStoreOptions(), OpenMode::kCreate);
  store.ResetSchema();
  CHECK_FALSE(store.ReadOutage().has_value());
  CHECK_FALSE(store.ClearOutage());  // no table yet: nothing written

  store.NoteOutage({1000, "all brokers down (_ALL_BROKERS_DOWN)", "relay-a", 1000, 1200});
  store.NoteOutage({5000, "Local: Message timed out (_MSG_TIMED_OUT)", "relay-b", 5000, 5400});
  std::optional<BrokerOutage> read = store.ReadOutage();
  REQUIRE(read.has_value());
  CHECK(*read == BrokerOutage{1000, "Local: Message timed out (_MSG_TIMED_OUT)", "relay-b", 5000,
                              5400});
  {
    Store reader(dir.File("lab.db"), FastStoreOptions(), OpenMode::kReadOnly);
    REQUIRE(reader.ReadOutage().has_value());
    CHECK(reader.ReadOutage()->since_ms == 1000);
  }

  CHECK(store.ClearOutage());
  CHECK_FALSE(store.ReadOutage().has_value());
  CHECK_FALSE(store.ClearOutage());

  // A reset starts a new run: an older run's record is not this run's outage.
  store.NoteOutage({7000, "all brokers down (_ALL_BROKERS_DOWN)", "relay-a", 7000, 7100});
  store.ResetSchema();
  CHECK_FALSE(store.ReadOutage().has_value());
  store.NoteOutage({9000, "all brokers down (_ALL_BROKERS_DOWN)", "relay-a", 9000, 9100});
  REQUIRE(store.ReadOutage().has_value());
  CHECK(store.ReadOutage()->since_ms == 9000);
}
