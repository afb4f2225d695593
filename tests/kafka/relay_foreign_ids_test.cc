// Rows a foreign writer inserted with ids the outbox never assigns itself: 0, negative ids and
// both ends of a 64-bit id (SQLite's INTEGER PRIMARY KEY and PostgreSQL's BIGINT take any of
// them in an explicit INSERT). The production relay with the real KafkaPublisher against the
// embedded mock broker, until-empty, in leader and in claims mode, on SQLite and on PostgreSQL:
// every row is published once, each aggregate in id order, and the loop ends with none pending
// (a keyset cursor that started at 0 never read them, and under block-key they held back every
// later row of their aggregate).
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "lab/broker/embedded_broker.h"
#include "lab/check/topic_reader.h"
#include "outbox/kafka/kafka_publisher.h"
#include "outbox/pg/connection.h"
#include "outbox/pg_store.h"
#include "outbox/relay.h"
#include "outbox/store.h"
#include "pg_test_support.h"
#include "relay_test_support.h"
#include "test_support.h"

namespace {

using outbox::Coordination;
using outbox::OutboxStore;
using outbox::lab::EmbeddedBroker;

constexpr const char* kTopic = "foreign-ids";
constexpr std::int64_t kMinId = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kMaxId = std::numeric_limits<std::int64_t>::max();

struct ForeignRow {
  std::int64_t id;
  std::string aggregate_id;
};

// In the order they are inserted: the positive rows first, as a foreign writer that came later
// would leave them. agg-a: min, -3, 2, 5; agg-b: 0, 3, max; agg-c: 1, 4, 6.
const std::vector<ForeignRow>& Rows() {
  static const std::vector<ForeignRow> rows = {
      {1, "agg-c"}, {2, "agg-a"},  {3, "agg-b"},  {4, "agg-c"},      {5, "agg-a"},
      {6, "agg-c"}, {-3, "agg-a"}, {0, "agg-b"},  {kMinId, "agg-a"}, {kMaxId, "agg-b"}};
  return rows;
}

std::string EventIdOf(std::int64_t id) { return "evt-" + std::to_string(id); }

// Runs the relay until-empty in coordination mode (batches of 2, two in flight), then checks the
// topic: every row once, each aggregate in id order, none pending.
void RelayAndCheck(OutboxStore& store, const EmbeddedBroker& broker, Coordination coordination) {
  outbox::kafka::KafkaPublisherOptions publisher_options;
  publisher_options.brokers = broker.BootstrapServers();
  publisher_options.topic = kTopic;
  outbox::kafka::KafkaPublisher publisher(publisher_options);
  outbox::RelayOptions options;
  options.owner = "relay-foreign-ids";
  options.coordination = coordination;
  options.batch_size = 2;
  outbox::Relay relay(store, publisher, options);
  outbox::testing::FakeWaiter waiter;
  outbox::LoopOptions loop;
  loop.mode = outbox::LoopMode::kUntilEmpty;
  loop.pipeline_depth = 2;

  const outbox::LoopReport report = outbox::RunRelayLoop(relay, waiter, loop, nullptr);

  CHECK_FALSE(report.stopped);  // ended by itself: nothing left that waiting could send
  CHECK(report.marked == static_cast<std::int64_t>(Rows().size()));
  CHECK(store.PendingCount() == 0);
  outbox::lab::TopicReadOptions read;
  read.brokers = broker.BootstrapServers();
  read.topic = kTopic;
  std::map<std::string, int> copies;
  std::map<std::string, std::vector<std::int64_t>> sent_by_aggregate;  // in topic order
  std::map<std::string, ForeignRow> row_of;  // by event id
  for (const ForeignRow& row : Rows()) row_of.emplace(EventIdOf(row.id), row);
  for (const outbox::lab::TopicRecord& record : outbox::lab::ReadTopic(read)) {
    ++copies[record.event_id];
    const auto found = row_of.find(record.event_id);
    REQUIRE(found != row_of.end());
    sent_by_aggregate[found->second.aggregate_id].push_back(found->second.id);
  }
  for (const ForeignRow& row : Rows()) {
    INFO("row " << row.id);
    CHECK(copies[EventIdOf(row.id)] == 1);
  }
  CHECK(copies.size() == Rows().size());
  CHECK(sent_by_aggregate["agg-a"] == std::vector<std::int64_t>{kMinId, -3, 2, 5});
  CHECK(sent_by_aggregate["agg-b"] == std::vector<std::int64_t>{0, 3, kMaxId});
  CHECK(sent_by_aggregate["agg-c"] == std::vector<std::int64_t>{1, 4, 6});
}

}  // namespace

TEST_CASE("Relay until-empty on SQLite publishes rows a foreign writer inserted with ids 0 and "
          "below and at both ends of the id range once each and each aggregate in id order",
          "[relay][kafka][leader][claims]") {
  const Coordination coordination = GENERATE(Coordination::kLeader, Coordination::kClaims);
  INFO((coordination == Coordination::kLeader ? "leader" : "claims"));
  outbox::testing::TempDir dir;
  outbox::Store store(dir.File("lab.db"), outbox::testing::FastStoreOptions(),
                      outbox::OpenMode::kCreate);
  store.ResetSchema();
  {
    auto txn = store.BeginWrite();
    auto insert = txn.connection().Prepare(
        "INSERT INTO outbox(id, event_id, aggregate_id, event_type, payload, created_at) "
        "VALUES (?1, ?2, ?3, 'ForeignEvent', '{}', ?4)");
    for (const ForeignRow& row : Rows()) {
      insert.Reset();
      insert.Bind(1, row.id).Bind(2, EventIdOf(row.id)).Bind(3, row.aggregate_id);
      insert.Bind(4, outbox::testing::kNowMs - 1000);
      insert.Run();
    }
    txn.Commit();
  }
  REQUIRE(store.PendingCount() == static_cast<std::int64_t>(Rows().size()));
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);

  RelayAndCheck(store, broker, coordination);
}

TEST_CASE("Relay until-empty on PostgreSQL publishes rows a foreign writer inserted with ids 0 "
          "and below and at both ends of the id range once each and each aggregate in id order",
          "[postgres][relay][kafka][leader][claims]") {
  const Coordination coordination = GENERATE(Coordination::kLeader, Coordination::kClaims);
  INFO((coordination == Coordination::kLeader ? "leader" : "claims"));
  outbox::testing::PgSchema schema("foreign_ids");
  outbox::PgStore store(schema.url());
  {
    outbox::pg::Connection writer(schema.url());
    for (const ForeignRow& row : Rows())
      writer.Query(
          "INSERT INTO outbox(id, event_id, aggregate_id, event_type, payload) "
          "VALUES ($1, $2, $3, 'ForeignEvent', convert_to('{}', 'UTF8'))",
          {outbox::pg::Param::Int(row.id), outbox::pg::Param::Text(EventIdOf(row.id)),
           outbox::pg::Param::Text(row.aggregate_id)},
          "insert a foreign row");
  }
  REQUIRE(store.PendingCount() == static_cast<std::int64_t>(Rows().size()));
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);

  RelayAndCheck(store, broker, coordination);
}
