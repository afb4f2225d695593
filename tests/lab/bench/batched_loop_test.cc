// The bench's hand-written batched loop against librdkafka's in-process mock
// cluster: every row sent once and marked, and a broker that is down ends the
// loop with a KafkaError and nothing marked.
#include <catch2/catch.hpp>

#include "lab/bench/batched_loop.h"
#include "lab/broker/embedded_broker.h"
#include "lab/check/reconciliation.h"
#include "lab/check/topic_reader.h"
#include "outbox/error.h"
#include "outbox/store.h"
#include "test_support.h"

namespace {

using outbox::OpenMode;
using outbox::Store;
using outbox::StoreOptions;
using outbox::lab::BatchedLoopOptions;
using outbox::lab::EmbeddedBroker;
using outbox::testing::MakeEvent;
using outbox::testing::TempDir;

constexpr const char* kTopic = "loop-events";

void Enqueue(Store& store, int n) {
  auto txn = store.BeginWrite();
  for (int i = 1; i <= n; ++i) store.Enqueue(txn, MakeEvent(i));
  txn.Commit();
}

}  // namespace

TEST_CASE("The batched loop sends 2500 rows in pages of 1000 and marks each once", "[lab][kafka]") {
  TempDir dir;
  Store store(dir.File("lab.db"), StoreOptions{}, OpenMode::kCreate);
  store.ResetSchema();
  Enqueue(store, 2500);
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);
  BatchedLoopOptions options;
  options.brokers = broker.BootstrapServers();
  options.topic = kTopic;

  const outbox::lab::BatchedLoopReport report = outbox::lab::RunBatchedLoop(store, options);

  CHECK(report.pages == 3);
  CHECK(report.sent == 2500);
  CHECK(report.marked == 2500);
  CHECK(store.Count().unpublished == 0);
  outbox::lab::TopicReadOptions read;
  read.brokers = broker.BootstrapServers();
  read.topic = kTopic;
  const auto records = outbox::lab::ReadTopic(read);
  std::vector<std::string> ids;
  for (const outbox::SnapshotRow& row : store.Snapshot().rows) ids.push_back(row.event_id);
  const auto reconciliation = outbox::lab::Reconcile(ids, records);
  CHECK(records.size() == 2500);
  CHECK(reconciliation.missing.empty());
  CHECK(reconciliation.duplicates.empty());
}

TEST_CASE("The batched loop throws KafkaError and marks nothing when the broker is down",
          "[lab][kafka]") {
  TempDir dir;
  Store store(dir.File("lab.db"), StoreOptions{}, OpenMode::kCreate);
  store.ResetSchema();
  Enqueue(store, 5);
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);
  rd_kafka_mock_broker_set_down(broker.cluster(), 1);
  BatchedLoopOptions options;
  options.brokers = broker.BootstrapServers();
  options.topic = kTopic;
  options.delivery_timeout_ms = 500;

  CHECK_THROWS_AS(outbox::lab::RunBatchedLoop(store, options), outbox::KafkaError);
  CHECK(store.Count().published == 0);
}

TEST_CASE("The batched loop rejects page size 0 with ConfigError", "[lab]") {
  TempDir dir;
  Store store(dir.File("lab.db"), StoreOptions{}, OpenMode::kCreate);
  store.ResetSchema();
  BatchedLoopOptions options;
  options.page_size = 0;
  CHECK_THROWS_AS(outbox::lab::RunBatchedLoop(store, options), outbox::ConfigError);
}
