// The outbox contract for writers other than the lab (issue 9 §4): the schema
// rejects a created_at that is not integer epoch ms inside the application's
// own transaction, fills it from the database clock when omitted, and a
// database from schema 2 migrates with its contract-breaking rows reported by
// Status() instead of aged absurdly.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "outbox/error.h"
#include "outbox/sqlite/connection.h"
#include "outbox/store.h"
#include "relay_test_support.h"
#include "test_support.h"

namespace {

using outbox::ClaimRequest;
using outbox::OpenMode;
using outbox::Store;
using outbox::StoreOptions;
using outbox::testing::TempDir;
using Ids = std::vector<std::int64_t>;

std::int64_t SystemNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// An application's INSERT, as in the README, with created_at given as sql.
void AppInsert(Store& store, const std::string& event_id, const std::string& created_at_sql) {
  auto txn = store.BeginWrite();
  txn.connection().Exec(
      "INSERT INTO outbox(event_id, aggregate_id, event_type, payload" +
      std::string(created_at_sql.empty() ? "" : ", created_at") + ") VALUES ('" + event_id +
      "', 'L-" + event_id + "', 'LoanCreated', '{}'" +
      (created_at_sql.empty() ? std::string() : ", " + created_at_sql) + ")");
  txn.Commit();
}

}  // namespace

TEST_CASE("An INSERT whose created_at is not epoch ms fails inside the writer's transaction",
          "[store]") {
  TempDir dir;
  Store store(dir.File("outbox.db"), StoreOptions{}, OpenMode::kCreate);
  store.ResetSchema();
  const std::string bad = GENERATE(as<std::string>{}, "1700000000", "'2026-11-30 10:00:00'",
                                   "1700000000000.5", "NULL", "-1", "99999999999999");
  INFO("created_at " << bad);
  try {
    AppInsert(store, "evt-bad", bad);
    FAIL("the INSERT was accepted");
  } catch (const outbox::DbError& e) {
    CHECK_THAT(e.what(), Catch::Contains("created_at"));
  }
  CHECK(store.Count().total == 0);
}

TEST_CASE("An INSERT without created_at gets the database clock in epoch ms", "[store]") {
  TempDir dir;
  Store store(dir.File("outbox.db"), StoreOptions{}, OpenMode::kCreate);
  store.ResetSchema();
  const std::int64_t before = SystemNowMs();
  AppInsert(store, "evt-1", "");
  const std::int64_t after = SystemNowMs();
  const auto rows = store.FetchUnpublished(0, 10);
  REQUIRE(rows.size() == 1);
  // julianday has ms resolution; allow 1 ms of rounding either side.
  CHECK(rows[0].event.created_at_ms >= before - 1);
  CHECK(rows[0].event.created_at_ms <= after + 1);
}

TEST_CASE("A schema 2 database migrates and status reports its rows with a bad created_at",
          "[store]") {
  TempDir dir;
  const std::string path = dir.File("v2.db");
  {
    Store store(path, StoreOptions{}, OpenMode::kCreate);
    store.ResetSchema();
  }
  {
    // Back to schema 2 as an older lab left it: no triggers, no default, and
    // rows a foreign writer put in (seconds, text) next to a good one. Ids up
    // to 20 were used and purged, so AUTOINCREMENT stands at 20.
    outbox::sqlite::Connection raw(path, SQLITE_OPEN_READWRITE);
    raw.Exec(
        "DROP TRIGGER outbox_created_at_insert; DROP TRIGGER outbox_created_at_update; "
        "PRAGMA user_version = 2;"
        "INSERT INTO outbox(id, event_id, aggregate_id, event_type, payload, created_at) VALUES "
        "(6, 'evt-s', 'L-1', 'T', '{}', 1700000000), "
        "(7, 'evt-t', 'L-2', 'T', '{}', '2026-11-30 10:00:00'), "
        "(8, 'evt-ok', 'L-3', 'T', '{}', 1700000000008);"
        "UPDATE sqlite_sequence SET seq = 20 WHERE name = 'outbox';");
  }
  Store store(path, StoreOptions{}, OpenMode::kExisting);
  REQUIRE(store.BeginRead().connection().QueryInt64("PRAGMA user_version") == outbox::kSchemaVersion);
  CHECK(store.Count().total == 3);

  const outbox::OutboxStatus status = store.Status(1700000001008);
  CHECK(status.unpublished == 3);
  CHECK(status.bad_created_at == 2);
  CHECK(status.bad_created_at_ids == Ids{6, 7});
  CHECK(status.oldest_pending_age_ms == 1000);  // from evt-ok only, not 56 years

  // The contract holds from now on, and ids continue after the high-water mark.
  CHECK_THROWS_AS(AppInsert(store, "evt-new-bad", "1700000000"), outbox::DbError);
  AppInsert(store, "evt-new", "1700000000009");
  CHECK(store.FetchUnpublished(8, 10).at(0).id == 21);
}

TEST_CASE("ClaimOwners lists unexpired claims by owner and ReleaseClaimsOf frees one owner's rows",
          "[store]") {
  TempDir dir;
  Store store(dir.File("outbox.db"), StoreOptions{}, OpenMode::kCreate);
  store.ResetSchema();
  for (int i = 1; i <= 4; ++i)
    AppInsert(store, "evt-" + std::to_string(i), std::to_string(1700000000000 + i));
  const std::int64_t now_ms = 1700000100000;
  outbox::ClaimRequest first;
  first.owner = "relay-101@h";
  first.limit = 3;
  first.lease_ms = 30000;
  first.now_ms = now_ms;
  REQUIRE(store.ClaimBatch(first).rows.size() == 3);
  outbox::ClaimRequest second = first;
  second.owner = "relay-202@h";
  second.now_ms = now_ms + 500;
  REQUIRE(store.ClaimBatch(second).rows.size() == 1);

  const auto owners = store.ClaimOwners(now_ms + 1000);
  REQUIRE(owners.size() == 2);
  CHECK(owners[0].owner == "relay-101@h");
  CHECK(owners[0].rows == 3);
  CHECK(owners[0].age_ms == 1000);
  CHECK(owners[0].expires_in_ms == 29000);
  CHECK(owners[1].owner == "relay-202@h");
  CHECK(owners[1].rows == 1);
  CHECK(owners[1].age_ms == 500);

  // A claim the owner takes after the read is not released: the owner lives.
  const std::int64_t seen = owners[0].max_token;
  AppInsert(store, "evt-5", "1700000000005");
  outbox::ClaimRequest later = first;
  later.now_ms = now_ms + 1000;
  REQUIRE(store.ClaimBatch(later).rows.size() == 1);
  CHECK(store.ReleaseClaimsOf("relay-101@h", seen) == 3);
  CHECK(store.ClaimOwners(now_ms + 1000)[0].rows == 1);  // relay-101@h keeps evt-5's claim
  // Claimable again at once, long before the 30 s lease runs out.
  outbox::ClaimRequest restart = first;
  restart.owner = "relay-303@h";
  restart.now_ms = now_ms + 1000;
  CHECK(store.ClaimBatch(restart).rows.size() == 3);
  CHECK(store.ClaimOwners(now_ms + 1000).size() == 3);
}

namespace {

// The storage class SQLite keeps for column of row id: 'text', 'blob', ...
std::string TypeOf(Store& store, const std::string& column, std::int64_t id) {
  auto select = store.BeginRead().connection().Prepare("SELECT typeof(" + column +
                                                       ") FROM outbox WHERE id = ?1");
  select.Bind(1, id);
  REQUIRE(select.Step());
  return select.ColumnText(0);
}

ClaimRequest BlockKeyClaim() {
  ClaimRequest request;
  request.owner = "relay-test";
  request.limit = 10;
  request.lease_ms = 30000;
  request.now_ms = outbox::testing::kNowMs;
  request.block_key = true;
  return request;
}

}  // namespace

TEST_CASE("An aggregate_id or event_id bound as bytes is stored as TEXT so the aggregate's "
          "order and the event id's uniqueness hold",
          "[store]") {
  TempDir dir;
  Store store(dir.File("outbox.db"), StoreOptions{}, OpenMode::kCreate);
  store.ResetSchema();
  {
    // Row 1 of aggregate 'A-1' in backoff for a minute past kNowMs; row 2 of the same aggregate
    // bound as bytes: SQLite never compares a BLOB equal to TEXT, so before schema 7 the claim
    // took row 2 first.
    auto txn = store.BeginWrite();
    txn.connection().Exec(
        "INSERT INTO outbox(event_id, aggregate_id, event_type, payload, attempts, "
        "next_attempt_at) VALUES ('e1', 'A-1', 'T', '{}', 1, 1700000160000);"
        "INSERT INTO outbox(event_id, aggregate_id, event_type, payload) "
        "VALUES (X'6532', X'412D31', 'T', '{}');");
    txn.Commit();
  }
  CHECK(TypeOf(store, "aggregate_id", 2) == "text");
  CHECK(TypeOf(store, "event_id", 2) == "text");
  CHECK(outbox::testing::TextColumn(store, "aggregate_id", 2) == "A-1");
  CHECK(store.ClaimBatch(BlockKeyClaim()).rows.empty());

  SECTION("an UPDATE to bytes is stored as TEXT too") {
    auto txn = store.BeginWrite();
    txn.connection().Exec("UPDATE outbox SET aggregate_id = X'422D32' WHERE id = 2");
    txn.Commit();
    CHECK(TypeOf(store, "aggregate_id", 2) == "text");
    CHECK(outbox::testing::TextColumn(store, "aggregate_id", 2) == "B-2");
    CHECK(Ids{2} == Ids{store.ClaimBatch(BlockKeyClaim()).rows.at(0).id});
  }
  SECTION("bytes equal to a stored event id fail UNIQUE, as the same TEXT would") {
    auto txn = store.BeginWrite();
    const auto error = outbox::testing::CaptureThrow<outbox::DbError>([&] {
      txn.connection().Exec(
          "INSERT INTO outbox(event_id, aggregate_id, event_type, payload) "
          "VALUES (X'6531', 'C-3', 'T', '{}')");
    });
    REQUIRE(error.has_value());
    CHECK_THAT(error->what(), Catch::Contains("UNIQUE") && Catch::Contains("event_id"));
  }
  SECTION("an empty bytes aggregate fails as the empty TEXT one does") {
    auto txn = store.BeginWrite();
    const auto error = outbox::testing::CaptureThrow<outbox::DbError>([&] {
      txn.connection().Exec(
          "INSERT INTO outbox(event_id, aggregate_id, event_type, payload) "
          "VALUES ('e3', X'', 'T', '{}')");
    });
    REQUIRE(error.has_value());
    CHECK_THAT(error->what(), Catch::Contains("aggregate_id must not be empty"));
  }
  CHECK(store.Count().total == 2);
}

TEST_CASE("A schema 6 database migrates and its stored byte ids become TEXT", "[store]") {
  TempDir dir;
  const std::string path = dir.File("v6.db");
  {
    Store store(path, StoreOptions{}, OpenMode::kCreate);
    store.ResetSchema();
  }
  {
    outbox::sqlite::Connection raw(path, SQLITE_OPEN_READWRITE);
    raw.Exec(
        "DROP TRIGGER outbox_ids_as_text_insert; DROP TRIGGER outbox_ids_as_text_update; "
        "PRAGMA user_version = 6;"
        "INSERT INTO outbox(event_id, aggregate_id, event_type, payload) VALUES "
        "('dup', 'A-1', 'T', '{}'), (X'6532', X'412D31', 'T', '{}'), "
        "(X'647570', 'A-2', 'T', '{}');");
    REQUIRE(raw.QueryInt64("SELECT COUNT(*) FROM outbox WHERE typeof(aggregate_id) = 'blob'") == 1);
  }
  Store store(path, StoreOptions{}, OpenMode::kExisting);
  REQUIRE(store.BeginRead().connection().QueryInt64("PRAGMA user_version") == 7);
  CHECK(TypeOf(store, "aggregate_id", 2) == "text");
  CHECK(TypeOf(store, "event_id", 2) == "text");
  // Its TEXT form taken by row 1: kept as it was, never lost.
  CHECK(TypeOf(store, "event_id", 3) == "blob");
  CHECK(store.Count().total == 3);
}
