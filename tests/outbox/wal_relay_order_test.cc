// Per-aggregate order of the WAL relay (relay --source wal) when a delivery fails inside a batch,
// against the PostgreSQL server in OUTBOX_PG_URL (wal_level=logical, scripts/postgres.sh).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "outbox/pg_store.h"
#include "outbox/publisher.h"
#include "outbox/wal_relay.h"
#include "pg_test_support.h"
#include "wal_test_support.h"

namespace outbox {
namespace {

using testing::WalSchema;

// Fails the first message it is given, once, and acks every other; logs the acks in the order
// the "broker" took them. Each Publish is one produce and its delivery reports.
class FailsFirstOnce : public Publisher {
 public:
  std::vector<DeliveryResult> Publish(const std::vector<OutboundMessage>& messages) override {
    std::vector<DeliveryResult> results;
    for (const OutboundMessage& m : messages) {
      DeliveryResult r;
      r.outbox_id = m.outbox_id;
      r.ok = failed_;
      if (r.ok) {
        r.partition = 0;
        r.offset = static_cast<std::int64_t>(acked.size());
        acked.push_back(m.event_id);
      } else {
        r.error = "fake: one delivery failure";
      }
      failed_ = true;
      results.push_back(r);
    }
    ++produces;
    return results;
  }

  std::vector<std::string> acked;
  int produces = 0;

 private:
  bool failed_ = false;
};

void EnqueueOn(PgStore& store, const std::string& event_id, const std::string& aggregate) {
  auto txn = store.BeginWrite();
  store.Enqueue(txn, OutboxEvent{event_id, aggregate, "LoanCreated", "{}", 0});
  txn.Commit();
}

}  // namespace

TEST_CASE("The WAL relay never acks a later record of an aggregate before an earlier one that failed", "[postgres][wal]") {
  WalSchema schema("walorder");
  PgStore store(schema.url());
  FailsFirstOnce publisher;
  WalRelayOptions options;
  options.key = KeyChoice::kAggregateId;
  options.batch_size = 4;
  options.linger_ms = 5000;  // one batch of all four commits
  options.backoff_base_ms = 1;
  WalRelay relay(schema.url(), store, publisher, options);
  relay.Open();
  EnqueueOn(store, "evt-a1", "L-A");
  EnqueueOn(store, "evt-a2", "L-A");
  EnqueueOn(store, "evt-b1", "L-B");
  EnqueueOn(store, "evt-a3", "L-A");
  WalBatchReport report;
  for (int i = 0; i < 50 && report.records == 0; ++i) report = relay.RunBatch();
  CHECK(report.transactions == 4);
  CHECK(report.records == 4);
  CHECK(report.retries == 1);
  // evt-a1 failed once: evt-b1, of another aggregate, goes on; evt-a2 and evt-a3 wait for it.
  CHECK(publisher.acked == std::vector<std::string>{"evt-b1", "evt-a1", "evt-a2", "evt-a3"});
  // One produce per record of the busiest aggregate, plus the retry.
  CHECK(publisher.produces == 4);
}

TEST_CASE("The WAL relay sends a batch of distinct aggregates in one produce", "[postgres][wal]") {
  WalSchema schema("walorder");
  PgStore store(schema.url());
  FailsFirstOnce publisher;
  WalRelayOptions options;
  options.batch_size = 3;
  options.linger_ms = 5000;
  options.backoff_base_ms = 1;
  WalRelay relay(schema.url(), store, publisher, options);
  relay.Open();
  EnqueueOn(store, "evt-1001", "L-1001");
  EnqueueOn(store, "evt-1002", "L-1002");
  EnqueueOn(store, "evt-1003", "L-1003");
  WalBatchReport report;
  for (int i = 0; i < 50 && report.records == 0; ++i) report = relay.RunBatch();
  CHECK(report.records == 3);
  CHECK(publisher.acked == std::vector<std::string>{"evt-1002", "evt-1003", "evt-1001"});
  CHECK(publisher.produces == 2);  // the batch, then the retry of evt-1001
}

}  // namespace outbox
