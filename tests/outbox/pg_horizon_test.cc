// PgStore::OldestHorizonHolder: the open transaction that keeps VACUUM from removing dead
// outbox rows, named once it is older than the threshold.
#include <catch2/catch.hpp>

#include <string>

#include "outbox/pg/connection.h"
#include "outbox/pg_store.h"
#include "pg_test_support.h"

using namespace outbox;

TEST_CASE("PostgreSQL names a REPEATABLE READ transaction holding the horizon once it passes the threshold", "[postgres]") {
  testing::PgSchema schema("hz");
  PgStore store(schema.url());
  store.ResetSchema();
  pg::Connection holder(schema.url());
  holder.Exec("SET application_name = 'horizon-holder'", "name the holder");
  holder.Exec("BEGIN ISOLATION LEVEL REPEATABLE READ", "begin");
  holder.Query("SELECT count(*) FROM outbox", {}, "take the snapshot");
  const int holder_pid = PQbackendPID(holder.get());

  // Younger than a minute: nothing said (no other session of this test is that old either).
  const auto young = store.OldestHorizonHolder(3'600'000);
  CHECK_FALSE(young.has_value());

  // Wait on the server's clock until the transaction is 1.2 s old, then ask with 1 s.
  pg::Connection probe(schema.url());
  for (int i = 0; i < 200; ++i) {
    if (probe.QueryInt("SELECT (now() - xact_start > interval '1200 ms')::int "
                       "FROM pg_stat_activity WHERE pid = $1",
                       {pg::Param::Int(holder_pid)}, "age of the holder") == 1)
      break;
    probe.Exec("SELECT pg_sleep(0.05)", "wait on the server");
  }
  const auto old = store.OldestHorizonHolder(1000);
  REQUIRE(old.has_value());
  // The server is shared: another test's older transaction would rightly come first.
  const std::int64_t holder_xmin_age = probe.QueryInt(
      "SELECT age(backend_xmin) FROM pg_stat_activity WHERE pid = $1",
      {pg::Param::Int(holder_pid)}, "xmin age of the holder");
  if (old->pid != holder_pid) {
    WARN("an older transaction of another session holds the horizon: pid " << old->pid);
    CHECK(old->transaction_age_ms >= 1000);
    return;
  }
  CHECK(old->xmin_age >= 0);
  CHECK(old->xmin_age <= holder_xmin_age);  // read first; ages only grow
  CHECK(old->application_name == "horizon-holder");
  CHECK(old->state == "idle in transaction");
  CHECK(old->transaction_age_ms >= 1200);
  CHECK(old->transaction_age_ms < 60000);

  holder.Exec("COMMIT", "end the holder");
  const auto after = store.OldestHorizonHolder(1000);
  CHECK((!after.has_value() || after->pid != holder_pid));
}
