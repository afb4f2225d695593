// Broker outages on PostgreSQL: the store's outage record (PgStore::NoteOutage, ClearOutage,
// ReadOutage) and a relay that waits out an outage without counting attempts, in both
// coordination modes. Needs OUTBOX_PG_URL (pg_test_support.h).
#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <vector>

#include "outbox/broker_outage.h"
#include "outbox/pg_store.h"
#include "outbox/relay.h"
#include "pg_test_support.h"
#include "test_support.h"

namespace {

using outbox::BrokerOutage;
using outbox::Coordination;
using outbox::DeliveryResult;
using outbox::OutboundMessage;
using outbox::PgStore;

class Schema : public outbox::testing::PgSchema {
 public:
  Schema() : PgSchema("outage", "%20-clock_timeout%3D10000") {}
};

// Every message fails as an outage while down, else is acked.
class DownPublisher : public outbox::testing::FakePublisher {
 public:
  std::vector<DeliveryResult> Publish(const std::vector<OutboundMessage>& messages) override {
    std::vector<DeliveryResult> results = FakePublisher::Publish(messages);
    if (down)
      for (DeliveryResult& r : results)
        r = {r.outbox_id, false, -1, -1, "all brokers down (_ALL_BROKERS_DOWN)", false, true};
    return results;
  }
  bool down = true;
};

}  // namespace

TEST_CASE("PostgreSQL records one broker outage per run keeps its start and clears it",
          "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  store.ResetSchema();
  CHECK_FALSE(store.ReadOutage().has_value());
  CHECK_FALSE(store.ClearOutage());

  store.NoteOutage({1000, "all brokers down (_ALL_BROKERS_DOWN)", "relay-a", 1000, 1200});
  store.NoteOutage({5000, "Local: Message timed out (_MSG_TIMED_OUT)", "relay-b", 5000, 5400});
  const std::optional<BrokerOutage> read = store.ReadOutage();
  REQUIRE(read.has_value());
  CHECK(*read == BrokerOutage{1000, "Local: Message timed out (_MSG_TIMED_OUT)", "relay-b", 5000,
                              5400});
  CHECK(store.ClearOutage());
  CHECK_FALSE(store.ReadOutage().has_value());

  store.NoteOutage({7000, "all brokers down (_ALL_BROKERS_DOWN)", "relay-a", 7000, 7100});
  store.ResetSchema();
  CHECK_FALSE(store.ReadOutage().has_value());
}

TEST_CASE("A relay on PostgreSQL counts no attempt in a broker outage and clears it when "
          "delivery resumes",
          "[postgres][relay]") {
  const Coordination coordination = GENERATE(Coordination::kClaims, Coordination::kLeader);
  INFO((coordination == Coordination::kClaims ? "claims" : "leader"));
  Schema schema;
  outbox::ManualClock clock(1700000100000);
  PgStore store(schema.url());
  store.ResetSchema();
  for (int i = 0; i < 5; ++i) {
    auto txn = store.BeginWrite();
    store.Enqueue(txn, outbox::testing::MakeEvent(i));
    txn.Commit();
  }
  DownPublisher publisher;
  outbox::RelayOptions options;
  options.owner = "relay-pg-outage";
  options.coordination = coordination;
  options.settle.max_attempts = 1;
  options.settle.backoff_base_ms = 1;  // the server's clock judges no outage: the relay's does
  options.clock = &clock;
  outbox::Relay relay(store, publisher, options);

  const outbox::BatchReport down = relay.RunBatch();
  CHECK(down.outage == 5);
  CHECK(down.settle.parked == 0);
  const outbox::TroubledRows troubled = store.ListTroubled(clock.EpochMs(), 10);
  CHECK(troubled.parked == 0);
  CHECK(troubled.failing == 0);  // no row has an attempt
  CHECK(store.Status(clock.EpochMs()).claimed == 0);
  REQUIRE(store.ReadOutage().has_value());
  CHECK(store.ReadOutage()->cause == "all brokers down (_ALL_BROKERS_DOWN)");
  CHECK(store.ReadOutage()->owner == "relay-pg-outage");

  publisher.down = false;
  clock.AdvanceMs(1);
  CHECK(relay.RunBatch().settle.marked == 5);
  CHECK(store.PendingCount() == 0);
  CHECK_FALSE(store.ReadOutage().has_value());
}
