// PgStore against what another program may write into the relay's time columns: 'infinity', a
// claim_until or next_attempt_at years ahead, a '-infinity' claimed_at. A relay never holds a
// row back longer than a day (kMaxHoldMs), so such a row is unclaimed and due, as on SQLite, and
// no read subtracts an infinite time (an error that stopped relay, status and metrics).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "outbox/pg/connection.h"
#include "outbox/pg_store.h"
#include "pg_test_support.h"

using namespace outbox;

TEST_CASE("PostgreSQL rows whose lease or backoff lies beyond a day or at infinity are claimable "
          "and every read of them works",
          "[postgres]") {
  testing::PgSchema schema("ft");
  PgStore store(schema.url());
  store.ResetSchema();
  pg::Connection sql(schema.url());
  sql.Exec(
      "INSERT INTO outbox(event_id, aggregate_id, event_type, payload, claim_until, claim_token, "
      "claim_owner, claimed_at) VALUES "
      "('e1', 'A', 'T', '{}', 'infinity', 99, 'ghost', '-infinity'), "
      "('e2', 'B', 'T', '{}', now() + interval '300 days', 98, 'ghost', now()), "
      "('e5', 'E', 'T', '{}', now() + interval '1 hour', 97, 'live', now());"
      "INSERT INTO outbox(event_id, aggregate_id, event_type, payload, next_attempt_at, attempts) "
      "VALUES ('e3', 'C', 'T', '{}', 'infinity', 1), "
      "('e4', 'D', 'T', '{}', now() + interval '300 days', 1);",
      "write foreign times");
  const std::int64_t now_ms = store.clock().EpochMs();

  const std::vector<ClaimOwner> owners = store.ClaimOwners(now_ms);
  REQUIRE(owners.size() == 1);  // only the lease an hour ahead is a lease
  CHECK(owners[0].owner == "live");
  CHECK(store.WaitingCount(now_ms) == 1);
  CHECK(store.Backoffs(now_ms).rows == 0);
  const OutboxStatus status = store.Status(now_ms);
  CHECK(status.claimed == 1);
  CHECK(status.in_backoff == 0);

  ClaimRequest request;
  request.owner = "relay-a";
  request.limit = 10;
  request.lease_ms = 30000;
  request.block_key = true;
  std::vector<std::string> claimed;
  for (const auto& row : store.ClaimBatch(request).rows) claimed.push_back(row.event.event_id);
  CHECK(claimed == std::vector<std::string>{"e1", "e2", "e3", "e4"});
}

TEST_CASE("PostgreSQL rows whose created_at is not epoch ms are counted apart and never aged",
          "[postgres]") {
  testing::PgSchema schema("fc");
  PgStore store(schema.url());
  store.ResetSchema();
  pg::Connection sql(schema.url());
  // Epoch seconds (a common mistake), the bigint's floor, and one good row a second old.
  sql.Exec(
      "INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at) VALUES "
      "('c-sec', 'A', 'T', '{}', extract(epoch FROM now())::bigint), "
      "('c-min', 'B', 'T', '{}', -9223372036854775808), "
      "('c-ok', 'C', 'T', '{}', (extract(epoch FROM now()) * 1000)::bigint - 1000);"
      "INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at, parked_at, "
      "attempts) VALUES ('c-parked', 'D', 'T', '{}', -9223372036854775808, now(), 1);",
      "write foreign created_at values");
  const std::int64_t now_ms = store.clock().EpochMs();

  const OutboxStatus status = store.Status(now_ms);

  CHECK(status.bad_created_at == 3);
  CHECK(status.bad_created_at_ids == std::vector<std::int64_t>{1, 2, 4});
  CHECK(status.oldest_pending_age_ms >= 1000);
  CHECK(status.oldest_pending_age_ms < 60'000);  // c-ok's age, not 56 years
  const TroubledRows troubled = store.ListTroubled(now_ms, 10);
  REQUIRE(troubled.rows.size() == 1);
  CHECK(troubled.rows[0].age_ms == 0);
}
