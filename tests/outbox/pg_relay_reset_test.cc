// A `reset` of the PostgreSQL outbox while a relay runs (PgStore::ResetSchema, Relay::RunOf): the
// batch in flight settles nothing of the new outbox, whose ids start again at 1, and the first
// batch that finds the new run is not sent; the next one is, under the new run's id.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "outbox/pg_store.h"
#include "outbox/relay.h"
#include "pg_test_support.h"
#include "test_support.h"

using namespace outbox;
using outbox::testing::EnqueueLoanEvent;
using outbox::testing::FakePublisher;
using outbox::testing::LoanEvent;

namespace {

struct NewRun {
  std::string previous;
  std::string run;
  std::int64_t dropped = 0;
};

}  // namespace

TEST_CASE("PostgreSQL relay across a reset marks no new row and sends the new run under its id", "[postgres][relay]") {
  const Coordination mode = GENERATE(Coordination::kClaims, Coordination::kLeader);
  INFO((mode == Coordination::kClaims ? "claims" : "leader"));
  outbox::testing::PgSchema schema("relay_reset");
  PgStore writer(schema.url());
  PgStore relay_store(schema.url());
  writer.ResetSchema();
  const std::string first_run = writer.RunId();
  for (const char* id : {"evt-1001", "evt-1002", "evt-1003"}) EnqueueLoanEvent(writer, id);

  FakePublisher publisher;
  // While the first batch is in Kafka's hands: a reset, and two new rows (ids 1 and 2, as two of
  // the batch's).
  publisher.on_publish = [&](const std::vector<OutboundMessage>&) {
    if (publisher.calls.size() != 1) return;
    writer.ResetSchema();
    EnqueueLoanEvent(writer, "evt-2001");
    EnqueueLoanEvent(writer, "evt-2002");
  };
  std::vector<NewRun> new_runs;
  RelayOptions options;
  options.owner = "relay-a";
  options.coordination = mode;
  options.on_new_run = [&](const std::string& previous, const std::string& run,
                           std::int64_t dropped) { new_runs.push_back({previous, run, dropped}); };
  Relay relay(relay_store, publisher, options);

  const BatchReport late = relay.RunBatch();
  CHECK(late.claimed == 3);
  CHECK(late.acked == 3);
  CHECK(late.settle.marked == 0);
  CHECK(late.settle.fenced == 3);
  CHECK(writer.Count().published == 0);  // neither new row was sent: neither may be marked
  const std::string second_run = writer.RunId();
  REQUIRE(second_run != first_run);
  for (const OutboundMessage& message : publisher.calls.at(0)) CHECK(message.run_id == first_run);

  // The next batch reads the new outbox under a new run id: not sent, its claim released.
  const BatchReport dropped = relay.RunBatch();
  CHECK(dropped.claimed == 0);
  CHECK(publisher.calls.size() == 1);
  REQUIRE(new_runs.size() == 1);
  CHECK(new_runs[0].previous == first_run);
  CHECK(new_runs[0].run == second_run);
  CHECK(new_runs[0].dropped == 2);
  CHECK(writer.ClaimOwners(0).empty());

  const BatchReport sent = relay.RunBatch();
  CHECK(sent.claimed == 2);
  CHECK(sent.settle.marked == 2);
  CHECK(sent.settle.fenced == 0);
  REQUIRE(publisher.calls.size() == 2);
  std::vector<std::string> keys;
  for (const OutboundMessage& message : publisher.calls[1]) {
    CHECK(message.run_id == second_run);
    keys.push_back(message.key);
  }
  CHECK(keys == std::vector<std::string>{"evt-2001", "evt-2002"});
  CHECK(writer.Count().published == 2);
  CHECK(new_runs.size() == 1);
}
