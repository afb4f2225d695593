// Delayed publish on a real PostgreSQL server: not_before judged on the server's clock by the
// claim (its heads walk and its scan), the leader's page and status; per-aggregate order behind a
// delayed row; foreign writers' values; a database created before the column. Each test works in
// its own schema (pg_test_support.h); without OUTBOX_PG_URL they FAIL and say how to start one.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "outbox/error.h"
#include "outbox/pg/connection.h"
#include "outbox/pg_store.h"
#include "pg_test_support.h"

using namespace outbox;

namespace {

class Schema : public testing::PgSchema {
 public:
  Schema() : PgSchema("delay", "%20-clock_timeout%3D10000") {}
};

OutboxEvent Event(const std::string& id, const std::string& aggregate, std::int64_t delay_ms = 0) {
  OutboxEvent event{id, aggregate, "LoanCreated", "{\"id\":\"" + id + "\"}", 0};
  event.delay_ms = delay_ms;
  return event;
}

std::int64_t EnqueueOne(PgStore& store, const OutboxEvent& event) {
  auto txn = store.BeginWrite();
  const std::int64_t id = store.Enqueue(txn, event);
  txn.Commit();
  return id;
}

ClaimRequest Request(bool block_key = true) {
  ClaimRequest request;
  request.owner = "relay-delay";
  request.limit = 100;
  request.lease_ms = 30000;
  request.block_key = block_key;
  // The relay's own clock says a year has passed: PostgreSQL judges not_before by its own.
  request.now_ms = 4102444800000 - 1;
  return request;
}

std::vector<std::int64_t> Ids(const std::vector<OutboxRow>& rows) {
  std::vector<std::int64_t> ids;
  for (const OutboxRow& row : rows) ids.push_back(row.id);
  return ids;
}

std::vector<std::int64_t> Page(PgStore& store, bool block_key = true) {
  PageRequest request;
  request.block_key = block_key;
  return Ids(store.ReadPage(request));
}

// not_before of row id set to an SQL expression, as another program may; "now_ms" in it is the
// server's clock in epoch ms.
void SetNotBefore(const Schema& schema, std::int64_t id, const std::string& expression) {
  pg::Connection raw(schema.url());
  raw.Exec("UPDATE outbox SET not_before = " +
               std::string("(SELECT ") + expression + " FROM (SELECT (extract(epoch FROM now()) * "
               "1000)::bigint AS now_ms) n) WHERE id = " + std::to_string(id),
           "set not_before");
}

}  // namespace

TEST_CASE("PostgreSQL delayed rows wait for the server clock in the claim and the leader page "
          "and are sent once due",
          "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  const std::int64_t delayed = EnqueueOne(store, Event("evt-1", "L-1", 60000));
  const std::int64_t plain = EnqueueOne(store, Event("evt-2", "L-2"));
  {
    pg::Connection raw(schema.url());
    // The delay was added to the server's clock at the INSERT.
    CHECK(raw.QueryInt("SELECT (not_before - (extract(epoch FROM now()) * 1000)::bigint "
                       "BETWEEN 50000 AND 60000)::int FROM outbox WHERE id = $1",
                       {pg::Param::Int(delayed)}, "read not_before") == 1);
    CHECK(raw.QueryInt("SELECT (not_before IS NULL)::int FROM outbox WHERE id = $1",
                       {pg::Param::Int(plain)}, "read not_before") == 1);
  }
  CHECK(Page(store) == std::vector<std::int64_t>{plain});
  CHECK(store.WaitingCount(0) == 1);
  const Claim claim = store.ClaimBatch(Request());
  CHECK(Ids(claim.rows) == std::vector<std::int64_t>{plain});
  store.SettleBatch(claim.token, {plain}, {}, SettlePolicy{});
  CHECK_FALSE(store.HasClaimable(Request()));
  CHECK_FALSE(store.HasClaimable(Request(/*block_key=*/false)));

  SetNotBefore(schema, delayed, "now_ms - 1");
  CHECK(store.HasClaimable(Request()));
  CHECK(Page(store) == std::vector<std::int64_t>{delayed});
  CHECK(Ids(store.ClaimBatch(Request()).rows) == std::vector<std::int64_t>{delayed});
}

TEST_CASE("PostgreSQL under block-key a delayed row holds back the later rows of its aggregate "
          "and skip lets them pass",
          "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  EnqueueOne(store, Event("evt-1", "L-A", 60000));
  const std::int64_t a2 = EnqueueOne(store, Event("evt-2", "L-A"));
  const std::int64_t b1 = EnqueueOne(store, Event("evt-3", "L-B"));

  CHECK(Page(store) == std::vector<std::int64_t>{b1});
  CHECK(Page(store, /*block_key=*/false) == std::vector<std::int64_t>{a2, b1});
  // The heads walk (block key) and the id-order scan (skip).
  CHECK(Ids(store.ClaimBatch(Request()).rows) == std::vector<std::int64_t>{b1});
  CHECK_FALSE(store.HasClaimable(Request()));
  CHECK(Ids(store.ClaimBatch(Request(/*block_key=*/false)).rows) == std::vector<std::int64_t>{a2});

  const OutboxStatus status = store.Status(0);
  CHECK(status.delayed == 1);
  CHECK(status.pending == 2);
  CHECK(status.behind_delayed == 1);
  CHECK(status.unpublished == 3);
}

TEST_CASE("PostgreSQL foreign not_before values that are NULL negative or absurd mean due now",
          "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  std::vector<std::int64_t> ids;
  for (int i = 1; i <= 5; ++i)
    ids.push_back(EnqueueOne(store, Event("evt-" + std::to_string(i), "L-" + std::to_string(i))));
  SetNotBefore(schema, ids[0], "NULL::bigint");
  SetNotBefore(schema, ids[1], "-5::bigint");
  SetNotBefore(schema, ids[2], "9223372036854775807::bigint");
  SetNotBefore(schema, ids[3], "now_ms + " + std::to_string(kMaxDelayMs + 1000) + " * 1000");
  SetNotBefore(schema, ids[4], "now_ms + " + std::to_string(kMaxDelayMs - 60000));

  CHECK(Ids(store.ClaimBatch(Request()).rows) ==
        std::vector<std::int64_t>{ids[0], ids[1], ids[2], ids[3]});
  CHECK(store.Status(0).delayed == 1);
}

TEST_CASE("PostgreSQL status leaves delayed rows and the rows behind them out of the oldest age "
          "and ages a row from when it became due",
          "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  const std::int64_t a1 = EnqueueOne(store, Event("evt-1", "L-A", 60000));
  EnqueueOne(store, Event("evt-2", "L-A"));
  pg::Connection raw(schema.url());
  // Both written 100 s ago by the server's clock.
  raw.Exec("UPDATE outbox SET created_at = (extract(epoch FROM now()) * 1000)::bigint - 100000",
           "age the rows");
  CHECK(store.Status(0).oldest_pending_age_ms == 0);

  // L-A's delay ran out 2 s ago: both rows have been due for about 2 s, not 100 s.
  SetNotBefore(schema, a1, "now_ms - 2000");
  const OutboxStatus status = store.Status(0);
  CHECK(status.delayed == 0);
  CHECK(status.behind_delayed == 0);
  CHECK(status.pending == 2);
  CHECK(status.oldest_pending_age_ms >= 2000);
  CHECK(status.oldest_pending_age_ms < 60000);
}

TEST_CASE("PostgreSQL enqueue refuses a negative delay and one beyond a year", "[postgres]") {
  Schema schema;
  PgStore store(schema.url());
  CHECK_THROWS_AS(EnqueueOne(store, Event("evt-1", "L-1", -1)), ConfigError);
  CHECK_THROWS_WITH(EnqueueOne(store, Event("evt-2", "L-2", kMaxDelayMs + 1)),
                    Catch::Contains("must be between 0 and"));
  CHECK(store.Count().total == 0);
}

TEST_CASE("PostgreSQL outbox created before not_before gains the column on open and its rows stay "
          "due",
          "[postgres]") {
  Schema schema;
  {
    PgStore store(schema.url());
    EnqueueOne(store, Event("evt-1", "L-1"));
  }
  {
    pg::Connection raw(schema.url());
    raw.Exec("ALTER TABLE outbox DROP COLUMN not_before", "drop the column");
  }
  PgStore store(schema.url());
  pg::Connection raw(schema.url());
  CHECK(raw.QueryInt("SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = "
                     "current_schema() AND table_name = 'outbox' AND column_name = 'not_before'",
                     {}, "look for the column") == 1);
  CHECK(Ids(store.ClaimBatch(Request()).rows).size() == 1);
}
