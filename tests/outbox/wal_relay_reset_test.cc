// The WAL relay across a PostgreSQL `reset` (PgStore::ResetSchema), against the server in
// OUTBOX_PG_URL (wal_level=logical, scripts/postgres.sh): a slot and a publication per test schema,
// dropped at the end. The end-to-end run with processes is scenarios/pg-wal-reset.sh.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "outbox/pg/connection.h"
#include "outbox/pg_store.h"
#include "outbox/wal_relay.h"
#include "pg_test_support.h"
#include "test_support.h"
#include "wal_test_support.h"

namespace outbox {
namespace {

using testing::FakePublisher;
using testing::WalSchema;
constexpr int kPollTries = testing::kWalPollTries;

void Enqueue(PgStore& store, int first, int count) {
  for (int i = first; i < first + count; ++i) {
    auto txn = store.BeginWrite();
    store.Enqueue(txn, OutboxEvent{"evt-" + std::to_string(i), "L-" + std::to_string(i),
                                   "LoanCreated", "{}", 0});
    txn.Commit();
  }
}

struct NewRun {
  std::string previous, run;
  std::int64_t dropped = 0;
};

std::vector<OutboundMessage> Sent(const FakePublisher& publisher) {
  std::vector<OutboundMessage> sent;
  for (const auto& call : publisher.calls) sent.insert(sent.end(), call.begin(), call.end());
  return sent;
}

WalOpenReport OpenOnceFree(WalRelay& relay) {
  for (int i = 0;; ++i) {
    try {
      return relay.Open();
    } catch (const WalRelayError& e) {
      if (e.kind() != WalRelayError::Kind::kSlotActive || i + 1 >= kPollTries) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

}  // namespace

TEST_CASE("A WAL relay streaming across a reset sends each row under the run it was written in", "[postgres][wal]") {
  WalSchema schema("walreset");
  PgStore store(schema.url());
  FakePublisher publisher;
  std::vector<NewRun> runs;
  WalRelayOptions options;
  // One batch holds the old rows, the reset and the new rows: it closes at the 5th record, and
  // the linger is only a bound for a failing test.
  options.batch_size = 5;
  options.linger_ms = 20000;
  options.on_new_run = [&runs](const std::string& previous, const std::string& run,
                               std::int64_t dropped) { runs.push_back({previous, run, dropped}); };
  WalRelay relay(schema.url(), store, publisher, options);
  relay.Open();
  const std::string old_run = store.RunId();
  Enqueue(store, 1001, 2);
  store.ResetSchema();
  const std::string new_run = store.RunId();
  REQUIRE(new_run != old_run);
  // The reset listed the new tables in the relay's publication, in its own transaction.
  pg::Connection sql(schema.url());
  CHECK(sql.QueryInt("SELECT count(*) FROM pg_publication_tables WHERE schemaname = "
                     "current_schema() AND tablename IN ('outbox', 'outbox_run')",
                     {}, "count") == 2);
  Enqueue(store, 2001, 3);
  const WalBatchReport batch = relay.RunBatch();
  CHECK(batch.records == 5);
  const std::vector<OutboundMessage> sent = Sent(publisher);
  REQUIRE(sent.size() == 5);
  for (std::size_t i = 0; i < sent.size(); ++i) {
    INFO(sent[i].event_id);
    CHECK(sent[i].run_id == (i < 2 ? old_run : new_run));
    CHECK(sent[i].event_id == (i < 2 ? "evt-100" + std::to_string(i + 1)
                                     : "evt-200" + std::to_string(i - 1)));
  }
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].previous == old_run);
  CHECK(runs[0].run == new_run);
  CHECK(runs[0].dropped == 0);
}

TEST_CASE("A WAL relay started after a reset does not send the dropped outbox's rows and sends the new run's", "[postgres][wal]") {
  WalSchema schema("walreset");
  PgStore store(schema.url());
  {
    // Opens the slot and sends two rows; three more are received by nobody before the reset.
    FakePublisher publisher;
    WalRelay relay(schema.url(), store, publisher, {});
    relay.Open();
    Enqueue(store, 1001, 2);
    std::int64_t records = 0;
    for (int i = 0; i < 50 && records < 2; ++i) records += relay.RunBatch().records;
    REQUIRE(records == 2);
  }
  Enqueue(store, 1003, 3);
  store.ResetSchema();
  const std::string new_run = store.RunId();
  Enqueue(store, 2001, 4);
  FakePublisher publisher;
  std::vector<NewRun> runs;
  WalRelayOptions options;
  options.on_new_run = [&runs](const std::string& previous, const std::string& run,
                               std::int64_t dropped) { runs.push_back({previous, run, dropped}); };
  WalRelay relay(schema.url(), store, publisher, options);
  OpenOnceFree(relay);
  std::int64_t records = 0;
  for (int i = 0; i < 50 && records < 4; ++i) records += relay.RunBatch().records;
  CHECK(records == 4);
  const std::vector<OutboundMessage> sent = Sent(publisher);
  REQUIRE(sent.size() == 4);
  for (const OutboundMessage& m : sent) {
    INFO(m.event_id);
    CHECK(m.run_id == new_run);
    CHECK(m.event_id.rfind("evt-200", 0) == 0);
  }
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].previous.empty());  // the relay started after the reset: the run before unknown
  CHECK(runs[0].run == new_run);
  CHECK(runs[0].dropped == 3);
}

}  // namespace outbox
