// Per-aggregate order of the WAL relay (relay --source wal) when a delivery fails inside a batch,
// against the PostgreSQL server in OUTBOX_PG_URL (wal_level=logical, scripts/postgres.sh).
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <utility>
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

// Commits each (event id, aggregate) in a transaction of its own, in order, and runs the WAL
// relay (keyed by aggregate) until it sends one batch of all of them through publisher.
WalBatchReport SendAsOneBatch(Publisher& publisher,
                              const std::vector<std::pair<std::string, std::string>>& events) {
  WalSchema schema("walorder");
  PgStore store(schema.url());
  WalRelayOptions options;
  options.key = KeyChoice::kAggregateId;
  options.batch_size = static_cast<std::int64_t>(events.size());
  options.linger_ms = 5000;  // one batch of every commit
  options.backoff_base_ms = 1;
  WalRelay relay(schema.url(), store, publisher, options);
  relay.Open();
  for (const auto& [event_id, aggregate] : events) {
    auto txn = store.BeginWrite();
    store.Enqueue(txn, OutboxEvent{event_id, aggregate, "LoanCreated", "{}", 0});
    txn.Commit();
  }
  WalBatchReport report;
  for (int i = 0; i < 50 && report.records == 0; ++i) report = relay.RunBatch();
  return report;
}

}  // namespace

TEST_CASE("The WAL relay never acks a later record of an aggregate before an earlier one that failed", "[postgres][wal]") {
  FailsFirstOnce publisher;
  const WalBatchReport report = SendAsOneBatch(
      publisher, {{"evt-a1", "L-A"}, {"evt-a2", "L-A"}, {"evt-b1", "L-B"}, {"evt-a3", "L-A"}});
  CHECK(report.transactions == 4);
  CHECK(report.records == 4);
  CHECK(report.retries == 1);
  // evt-a1 failed once: evt-b1, of another aggregate, goes on; evt-a2 and evt-a3 wait for it.
  CHECK(publisher.acked == std::vector<std::string>{"evt-b1", "evt-a1", "evt-a2", "evt-a3"});
  // One produce per record of the busiest aggregate, plus the retry.
  CHECK(publisher.produces == 4);
}

TEST_CASE("The WAL relay sends a batch of distinct aggregates in one produce", "[postgres][wal]") {
  FailsFirstOnce publisher;
  const WalBatchReport report = SendAsOneBatch(
      publisher, {{"evt-1001", "L-1001"}, {"evt-1002", "L-1002"}, {"evt-1003", "L-1003"}});
  CHECK(report.records == 3);
  CHECK(publisher.acked == std::vector<std::string>{"evt-1002", "evt-1003", "evt-1001"});
  CHECK(publisher.produces == 2);  // the batch, then the retry of evt-1001
}

}  // namespace outbox
