// PgStore's block-key claim over a large backlog: rows stalled behind failed aggregate heads must
// not be visited one by one on every claim (a heads walk), and past the walk's cap the id-order
// scan still gives the same answer.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "outbox/pg/connection.h"
#include "outbox/pg_store.h"
#include "pg_test_support.h"

using namespace outbox;

namespace {

ClaimRequest BlockKeyRequest(std::int64_t limit) {
  ClaimRequest request;
  request.owner = "relay-a";
  request.limit = limit;
  request.lease_ms = 30000;
  request.block_key = true;
  return request;
}

std::vector<std::int64_t> Ids(const Claim& claim) {
  std::vector<std::int64_t> ids;
  for (const auto& row : claim.rows) ids.push_back(row.id);
  return ids;
}

}  // namespace

TEST_CASE("PostgreSQL block key claim behind 100000 stalled rows claims the free aggregate in milliseconds", "[postgres]") {
  testing::PgSchema schema("cb");
  PgStore store(schema.url());
  store.ResetSchema();
  pg::Connection sql(schema.url());
  // Ids 1..50: the parked heads of L-0..L-49; 51..100000 wait behind them; then a free aggregate.
  sql.Exec("INSERT INTO outbox(id, event_id, aggregate_id, event_type, payload, attempts, parked_at) "
           "SELECT g, 'e-' || g, 'L-' || (g % 50), 'T', '\\x7b7d', CASE WHEN g <= 50 THEN 3 ELSE 0 END, "
           "CASE WHEN g <= 50 THEN now() END FROM generate_series(1, 100000) g; "
           "INSERT INTO outbox(id, event_id, aggregate_id, event_type, payload) VALUES "
           "(100001, 'free-1', 'L-free', 'T', '\\x7b7d'), (100002, 'free-2', 'L-free', 'T', '\\x7b7d'); "
           "ANALYZE outbox",
           "fill a stalled backlog");
  CHECK(store.HasClaimable(BlockKeyRequest(100)));
  // The id-order scan took 1.4 s here (a probe per stalled row); the walk a few ms. The fastest of
  // up to 5 claims (each released before the next) must take under 500 ms: one claim timed alone
  // also measured whatever descheduled the thread on a loaded machine, while the scan is slow
  // every time.
  std::int64_t fastest_ms = -1;
  Claim claim;
  for (int i = 0; i < 5 && !(fastest_ms >= 0 && fastest_ms < 500); ++i) {
    if (i > 0) REQUIRE(store.ReleaseClaimsOf("relay-a", claim.token) == 1);
    const auto start = std::chrono::steady_clock::now();
    claim = store.ClaimBatch(BlockKeyRequest(100));
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    CHECK(Ids(claim) == std::vector<std::int64_t>{100001});
    if (fastest_ms < 0 || ms < fastest_ms) fastest_ms = ms;
  }
  INFO("the fastest claim took " << fastest_ms << " ms");
  CHECK(fastest_ms < 500);
  // Claimed now: nothing else can go.
  CHECK_FALSE(store.HasClaimable(BlockKeyRequest(100)));
  CHECK(store.ClaimBatch(BlockKeyRequest(100)).rows.empty());
}

TEST_CASE("PostgreSQL block key claim past the heads walk cap falls back to the id order scan with the same rows", "[postgres]") {
  testing::PgSchema schema("cb");
  PgStore store(schema.url());
  store.ResetSchema();
  pg::Connection sql(schema.url());
  // 1500 aggregates: heads 1..1500 (every third one parked), followers 1501..3000.
  sql.Exec("INSERT INTO outbox(id, event_id, aggregate_id, event_type, payload, parked_at) "
           "SELECT g, 'e-' || g, 'A-' || ((g - 1) % 1500), 'T', '\\x7b7d', "
           "CASE WHEN g <= 1500 AND g % 3 = 0 THEN now() END FROM generate_series(1, 3000) g",
           "fill 1500 aggregates");
  CHECK(store.HasClaimable(BlockKeyRequest(5)));
  CHECK(Ids(store.ClaimBatch(BlockKeyRequest(5))) == std::vector<std::int64_t>{1, 2, 4, 5, 7});
  // Under the cap (delete all but 20 aggregates) the walk answers, the same way.
  sql.Exec("DELETE FROM outbox WHERE ((id - 1) % 1500) >= 20", "keep 20 aggregates");
  CHECK(Ids(store.ClaimBatch(BlockKeyRequest(5))) == std::vector<std::int64_t>{8, 10, 11, 13, 14});
}
