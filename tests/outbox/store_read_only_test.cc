// OpenMode::kReadOnly, and errors of claim, settle and purge that name what
// failed, never our SQL (issue 9 §2 and §3). The read-only medium and another
// user's file themselves need a mount or a second user: scenarios/read-only.sh.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "outbox/error.h"
#include "outbox/sqlite/connection.h"
#include "outbox/store.h"
#include "relay_test_support.h"
#include "test_support.h"

using outbox::DbError;
using outbox::OpenMode;
using outbox::Store;
using outbox::testing::CaptureThrow;
using outbox::testing::EnqueueRange;
using outbox::testing::FastStoreOptions;
using outbox::testing::kNowMs;
using outbox::testing::TempDir;

namespace {

std::string MakeDatabase(const TempDir& dir, int rows) {
  const std::string path = dir.File("outbox.db");
  Store store(path, FastStoreOptions(), OpenMode::kCreate);
  store.ResetSchema();
  EnqueueRange(store, 1, rows);
  return path;
}

// The words of our SQL that must never reach an error line.
void CheckNoSql(const std::string& message) {
  INFO(message);
  for (const char* word : {"SELECT", "UPDATE", "INSERT", "DELETE", "BEGIN", "COMMIT", "RETURNING"})
    CHECK(message.find(word) == std::string::npos);
}

}  // namespace

TEST_CASE("A read-only store reads a cleanly closed WAL database and leaves no -wal or -shm",
          "[store]") {
  TempDir dir;
  const std::string path = MakeDatabase(dir, 3);
  REQUIRE_FALSE(std::filesystem::exists(path + "-wal"));
  const std::string before = outbox::testing::ReadFileBytes(path);
  {
    Store store(path, FastStoreOptions(), OpenMode::kReadOnly);
    const auto status = store.Status(kNowMs);
    CHECK(status.unpublished == 3);
    CHECK(store.Snapshot().rows.size() == 3);
    CHECK_FALSE(store.immutable());
  }
  CHECK_FALSE(std::filesystem::exists(path + "-wal"));
  CHECK_FALSE(std::filesystem::exists(path + "-shm"));
  CHECK(outbox::testing::ReadFileBytes(path) == before);
}

TEST_CASE("A read-only store refuses every write with SQLITE_READONLY naming the operation and no SQL",
          "[store]") {
  TempDir dir;
  const std::string path = MakeDatabase(dir, 3);
  Store store(path, FastStoreOptions(), OpenMode::kReadOnly);
  outbox::ClaimRequest request;
  request.owner = "relay-1@host";
  request.now_ms = kNowMs;
  const std::vector<std::pair<std::string, std::function<void()>>> writes = {
      {"claim a batch of up to 1000 rows for relay-1@host in '" + path + "'",
       [&] { store.ClaimBatch(request); }},
      {"settle the batch of claim 1 (1 acknowledged, 0 failed) in '" + path + "'",
       [&] { store.SettleBatch(1, {1}, {}, outbox::SettlePolicy{}, kNowMs); }},
      {"purge published rows in '" + path + "'", [&] { store.PurgePublished(kNowMs, 10, true); }},
      {"unpark outbox row 1 in '" + path + "'", [&] { store.Unpark(1); }},
      {"release claim 1 in '" + path + "'", [&] { store.ReleaseClaim(1); }},
      {"mark outbox row 1 published in '" + path + "'", [&] { store.MarkPublished(1); }},
  };
  for (const auto& [what, write] : writes) {
    const auto error = CaptureThrow<DbError>(write);
    REQUIRE(error.has_value());
    INFO(error->what());
    CHECK(std::string(error->what()).rfind(what, 0) == 0);
    CHECK(error->primary_code() == SQLITE_READONLY);
    CHECK(std::string(error->what()).find("(SQLITE_READONLY)") != std::string::npos);
    CheckNoSql(error->what());
  }
  CHECK(store.Count().unpublished == 3);
}

TEST_CASE("Claim settle purge and unpark behind another writer's lock fail naming the operation and "
          "SQLITE_BUSY without SQL",
          "[store]") {
  TempDir dir;
  const std::string path = MakeDatabase(dir, 3);
  auto options = FastStoreOptions();
  options.busy_timeout_ms = 0;
  Store store(path, options, OpenMode::kExisting);
  outbox::sqlite::Connection other(path, SQLITE_OPEN_READWRITE);
  outbox::sqlite::Transaction lock(other);  // BEGIN IMMEDIATE: the write lock
  outbox::ClaimRequest request;
  request.owner = "relay-1@host";
  request.now_ms = kNowMs;
  const std::vector<std::pair<std::string, std::function<void()>>> writes = {
      {"claim a batch", [&] { store.ClaimBatch(request); }},
      {"settle the batch of claim 7", [&] { store.SettleBatch(7, {1}, {}, outbox::SettlePolicy{}, kNowMs); }},
      {"purge published rows in '" + path + "': failed after 0 batches",
       [&] { store.PurgePublished(kNowMs, 10, false); }},
      {"unpark every parked row", [&] { store.UnparkAll(); }},
      {"release the claims of relay-9@host", [&] { store.ReleaseClaimsOf("relay-9@host", 1); }},
  };
  for (const auto& [what, write] : writes) {
    const auto error = CaptureThrow<DbError>(write);
    REQUIRE(error.has_value());
    INFO(error->what());
    CHECK(std::string(error->what()).rfind(what, 0) == 0);
    CHECK(std::string(error->what()).find("'" + path + "'") != std::string::npos);
    CHECK(std::string(error->what()).find("database is locked (SQLITE_BUSY)") != std::string::npos);
    CHECK(error->primary_code() == SQLITE_BUSY);
    CheckNoSql(error->what());
  }
}

TEST_CASE("A read-only store on a writable schema 3 database migrates it first", "[store]") {
  TempDir dir;
  const std::string path = MakeDatabase(dir, 2);
  {
    outbox::sqlite::Connection raw(path, SQLITE_OPEN_READWRITE);
    raw.Exec("ALTER TABLE outbox DROP COLUMN headers; ALTER TABLE outbox_archive DROP COLUMN "
             "headers; PRAGMA user_version = 3;");
  }
  Store store(path, FastStoreOptions(), OpenMode::kReadOnly);
  CHECK(store.BeginRead().connection().QueryInt64("PRAGMA user_version") == outbox::kSchemaVersion);
  CHECK(store.Status(kNowMs).unpublished == 2);
}
