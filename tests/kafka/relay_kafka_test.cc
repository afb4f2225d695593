// The production relay with the real KafkaPublisher against librdkafka's
// in-process mock cluster: large batches, and a broker that goes down and
// comes back without a single event lost.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "lab/broker/embedded_broker.h"  // rdkafka.h, then rdkafka_mock.h
#include "lab/check/reconciliation.h"
#include "lab/check/topic_reader.h"
#include "outbox/kafka/kafka_publisher.h"
#include "outbox/relay.h"
#include "outbox/sqlite/connection.h"
#include "outbox/store.h"
#include "relay_test_support.h"
#include "test_support.h"

namespace {

using outbox::BatchReport;
using outbox::OpenMode;
using outbox::Relay;
using outbox::RelayOptions;
using outbox::Store;
using outbox::StoreOptions;
using outbox::kafka::KafkaPublisher;
using outbox::kafka::KafkaPublisherOptions;
using outbox::lab::EmbeddedBroker;
using outbox::testing::FakeClock;
using outbox::testing::MakeEvent;
using outbox::testing::TempDir;

constexpr const char* kTopic = "loan-events";

// Enqueues MakeEvent(1..n) in one transaction (the relay does not care how
// rows were committed, and one commit keeps the test fast).
void EnqueueInOneTransaction(Store& store, int n) {
  auto txn = store.BeginWrite();
  for (int i = 1; i <= n; ++i) store.Enqueue(txn, MakeEvent(i));
  txn.Commit();
}

// Every event id in the outbox, in id order.
std::vector<std::string> OutboxEventIds(Store& store) {
  std::vector<std::string> ids;
  for (const outbox::SnapshotRow& row : store.Snapshot().rows) ids.push_back(row.event_id);
  return ids;
}

std::vector<outbox::lab::TopicRecord> ReadAll(const EmbeddedBroker& broker) {
  outbox::lab::TopicReadOptions options;
  options.brokers = broker.BootstrapServers();
  options.topic = kTopic;
  return outbox::lab::ReadTopic(options);
}

}  // namespace

TEST_CASE("Relay with KafkaPublisher publishes 2000 rows in batches of 500 and each record once",
          "[relay][kafka]") {
  TempDir dir;
  Store store(dir.File("lab.db"), StoreOptions{}, OpenMode::kCreate);
  store.ResetSchema();
  EnqueueInOneTransaction(store, 2000);
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 3);
  KafkaPublisherOptions publisher_options;
  publisher_options.brokers = broker.BootstrapServers();
  publisher_options.topic = kTopic;
  KafkaPublisher publisher(publisher_options);
  RelayOptions options;
  options.batch_size = 500;
  options.owner = "relay-kafka-test";
  Relay relay(store, publisher, options);

  std::vector<std::int64_t> claimed;
  for (int i = 0; i < 10; ++i) {
    const BatchReport report = relay.RunBatch();
    if (report.claimed == 0) break;
    CHECK(report.acked == report.claimed);
    CHECK(report.settle.marked == report.claimed);
    claimed.push_back(report.claimed);
  }

  CHECK(claimed == std::vector<std::int64_t>{500, 500, 500, 500});
  const auto counts = store.Count();
  CHECK(counts.published == 2000);
  CHECK(counts.unpublished == 0);
  const auto records = ReadAll(broker);
  CHECK(records.size() == 2000);
  const auto reconciliation = outbox::lab::Reconcile(OutboxEventIds(store), records);
  CHECK(reconciliation.missing.empty());
  CHECK(reconciliation.unexpected.empty());
  CHECK(reconciliation.duplicates.empty());
  CHECK(reconciliation.distinct_event_ids == 2000);
}

TEST_CASE("Relay with KafkaPublisher waits out a broker that is down with no attempt counted and "
          "loses nothing once it is back",
          "[relay][kafka]") {
  TempDir dir;
  Store store(dir.File("lab.db"), StoreOptions{}, OpenMode::kCreate);
  store.ResetSchema();
  EnqueueInOneTransaction(store, 20);
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);
  KafkaPublisherOptions publisher_options;
  publisher_options.brokers = broker.BootstrapServers();
  publisher_options.topic = kTopic;
  publisher_options.delivery_timeout_ms = 1000;
  // Reconnect quickly once the broker is back (librdkafka backs off up to 10 s by default).
  publisher_options.properties = {{"reconnect.backoff.ms", "10"},
                                  {"reconnect.backoff.max.ms", "100"}};
  KafkaPublisher publisher(publisher_options);
  FakeClock clock;
  RelayOptions options;
  options.batch_size = 50;
  options.owner = "relay-kafka-test";
  options.clock = &clock;
  Relay relay(store, publisher, options);

  rd_kafka_mock_broker_set_down(broker.cluster(), 1);
  const BatchReport down = relay.RunBatch();

  // An outage: no attempt counted, no row's own backoff; the relay waits out one of its own.
  CHECK(down.claimed == 20);
  CHECK(down.acked == 0);
  CHECK(down.failed == 20);
  CHECK(down.outage == 20);
  CHECK(down.settle.marked == 0);
  CHECK(down.settle.retried == 0);
  CHECK(store.Count().published == 0);
  CHECK(store.Status(clock.EpochMs()).in_backoff == 0);
  CHECK(store.Status(clock.EpochMs()).parked == 0);
  CHECK(relay.Outage().active());
  CHECK_THAT(relay.Outage().cause, Catch::Contains("(_ALL_BROKERS_DOWN)") ||
                                       Catch::Contains("(_TRANSPORT)"));
  CHECK(relay.RunBatch().claimed == 0);  // still waiting out the outage

  rd_kafka_mock_broker_set_up(broker.cluster(), 1);
  std::int64_t batches_after_up = 0;
  for (int i = 0; i < 10 && store.PendingCount() > 0; ++i) {
    clock.AdvanceMs(options.settle.backoff_max_ms);  // every backoff has run out
    relay.RunBatch();
    ++batches_after_up;
  }

  INFO("batches after the broker came back: " << batches_after_up);
  CHECK(store.PendingCount() == 0);
  CHECK_FALSE(relay.Outage().active());
  CHECK_FALSE(store.ReadOutage().has_value());
  CHECK(store.Count().published == 20);
  const auto records = ReadAll(broker);
  const auto reconciliation = outbox::lab::Reconcile(OutboxEventIds(store), records);
  CHECK(reconciliation.missing.empty());
  CHECK(reconciliation.unexpected.empty());
  CHECK(reconciliation.distinct_event_ids == 20);
  CHECK(records.size() >= 20);
}

TEST_CASE("RunRelayLoop with KafkaPublisher and pipeline depth 2 publishes 2000 rows in batches "
          "of 300 and each record once",
          "[relay][kafka]") {
  TempDir dir;
  Store store(dir.File("lab.db"), StoreOptions{}, OpenMode::kCreate);
  store.ResetSchema();
  EnqueueInOneTransaction(store, 2000);
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);
  KafkaPublisherOptions publisher_options;
  publisher_options.brokers = broker.BootstrapServers();
  publisher_options.topic = kTopic;
  KafkaPublisher publisher(publisher_options);
  RelayOptions options;
  options.batch_size = 300;
  options.owner = "relay-kafka-test";
  Relay relay(store, publisher, options);
  outbox::testing::FakeWaiter waiter;
  outbox::LoopOptions loop;
  loop.mode = outbox::LoopMode::kUntilEmpty;
  loop.pipeline_depth = 2;

  const outbox::LoopReport report = outbox::RunRelayLoop(relay, waiter, loop, nullptr);

  CHECK(report.batches == 7);
  CHECK(report.marked == 2000);
  CHECK(publisher.InFlight() == 0);
  CHECK(store.Count().unpublished == 0);
  const auto records = ReadAll(broker);
  CHECK(records.size() == 2000);
  const auto reconciliation = outbox::lab::Reconcile(OutboxEventIds(store), records);
  CHECK(reconciliation.missing.empty());
  CHECK(reconciliation.duplicates.empty());
  // One partition, one producer: records in outbox order across the pipelined batches.
  std::vector<std::string> sent;
  for (const auto& record : records) sent.push_back(record.event_id);
  CHECK(sent == OutboxEventIds(store));
}

TEST_CASE("A fatal idempotent-producer error stops the relay with no attempt counted and a new "
          "producer sends every row once",
          "[relay][kafka]") {
  const outbox::Coordination coordination =
      GENERATE(outbox::Coordination::kClaims, outbox::Coordination::kLeader);
  TempDir dir;
  Store store(dir.File("lab.db"), outbox::testing::FastStoreOptions(), OpenMode::kCreate);
  store.ResetSchema();
  EnqueueInOneTransaction(store, 50);
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);
  KafkaPublisherOptions publisher_options;
  publisher_options.brokers = broker.BootstrapServers();
  publisher_options.topic = kTopic;
  publisher_options.properties = {{"enable.idempotence", "true"}};
  RelayOptions options;
  options.owner = "relay-fatal";
  options.coordination = coordination;
  options.batch_size = 50;
  options.settle.max_attempts = 1;  // one counted attempt would park the row
  {
    KafkaPublisher publisher(publisher_options);
    // OUT_OF_ORDER_SEQUENCE_NUMBER on an idempotent producer: librdkafka raises a fatal error
    // and fails every message with _FATAL (librdkafka INTRODUCTION.md, "Fatal errors").
    rd_kafka_mock_push_request_errors(broker.cluster(), 0, 1,
                                      RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER);
    Relay relay(store, publisher, options);
    const auto error =
        outbox::testing::CaptureThrow<outbox::KafkaError>([&] { relay.RunBatch(); });
    REQUIRE(error.has_value());
    CHECK(error->code() == outbox::kProducerFatalCode);
    CHECK_THAT(error->what(), Catch::Contains("the producer hit a fatal error") &&
                                 Catch::Contains("no attempt counted"));
  }
  // The messages of the request that met the error, and every later one, failed with _FATAL;
  // how the 50 split into requests varies, and rows acked before the error are marked.
  const outbox::OutboxStatus status = store.Status(store.clock().EpochMs());
  CHECK(status.parked == 0);
  CHECK(status.pending > 0);
  CHECK(status.pending + status.published == 50);
  CHECK(status.claimed == 0);  // released at once, not left to the lease
  for (std::int64_t id = 1; id <= 50; ++id) CHECK(outbox::testing::IntColumn(store, "attempts", id) == 0);

  // The relay process exits here (exit code 19); the next one releases a dead leader's lease
  // at start (lab::ReleaseDeadOwners), as this does.
  if (coordination == outbox::Coordination::kLeader) REQUIRE(store.ReleaseLease(store.ReadLease().token));
  KafkaPublisher fresh(publisher_options);
  Relay relay(store, fresh, options);
  CHECK(relay.RunBatch().settle.marked == status.pending);
  CHECK(store.Count().unpublished == 0);
}
