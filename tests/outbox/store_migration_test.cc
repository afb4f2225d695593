// Store, opening databases the lab did not create: a migration from the
// chapter's schema keeps what the application added to its outbox table, and a
// table of another design named outbox is refused untouched (reset replaces it).
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "lab/chapter/loans.h"
#include "outbox/error.h"
#include "outbox/sqlite/connection.h"
#include "outbox/store.h"
#include "relay_test_support.h"
#include "test_support.h"

using outbox::OpenMode;
using outbox::SchemaMissingError;
using outbox::Store;
using outbox::StoreOptions;
using outbox::testing::CaptureThrow;
using outbox::testing::ReadFileBytes;
using outbox::testing::TempDir;

namespace {

// The chapter's schema 1 table (user_version 0) with an application's own
// column, index, trigger and view, and a trigger on another table that writes
// into the outbox (a trigger-fed outbox).
std::string ChapterDatabaseWithApplicationObjects(const TempDir& dir) {
  const std::string path = dir.File("app.db");
  outbox::sqlite::Connection raw(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  raw.Exec(
      "CREATE TABLE outbox(id INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL UNIQUE, "
      "aggregate_id TEXT NOT NULL, event_type TEXT NOT NULL, payload TEXT NOT NULL, "
      "created_at INTEGER NOT NULL, published BOOLEAN NOT NULL DEFAULT 0, tenant TEXT, "
      "\"trace id\" VARCHAR(32));"
      "CREATE INDEX my_tenant ON outbox(tenant);"
      "CREATE TABLE audit(event_id TEXT);"
      "CREATE TRIGGER my_audit AFTER INSERT ON outbox BEGIN INSERT INTO audit VALUES (NEW.event_id); END;"
      "CREATE VIEW pending_by_tenant AS SELECT tenant, COUNT(*) AS n FROM outbox WHERE published = 0 GROUP BY tenant;"
      "CREATE TABLE business_loan(loan_id TEXT PRIMARY KEY);"
      "CREATE TRIGGER loan_event AFTER INSERT ON business_loan BEGIN "
      "  INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at, tenant) "
      "  VALUES ('evt-' || NEW.loan_id, NEW.loan_id, 'LoanCreated', '{}', 1700000000009, 'trigger'); END;"
      "INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at, tenant, \"trace id\") "
      "VALUES ('evt-1', 'L-1', 'T', '{}', 1700000000001, 'acme', 'abc123');"
      "PRAGMA user_version = 0;");
  return path;
}

std::vector<std::string> SchemaObjects(Store& store) {
  auto txn = store.BeginRead();
  auto select = txn.connection().Prepare(
      "SELECT type || ' ' || name FROM sqlite_master WHERE name IN ('my_tenant', 'my_audit', "
      "'pending_by_tenant', 'loan_event') ORDER BY name");
  std::vector<std::string> names;
  while (select.Step()) names.push_back(select.ColumnText(0));
  return names;
}

}  // namespace

TEST_CASE("Migrating the chapter's schema keeps the application's columns and values and its "
          "index trigger and view",
          "[store][migration]") {
  TempDir dir;
  const std::string path = ChapterDatabaseWithApplicationObjects(dir);

  Store store(path, outbox::testing::FastStoreOptions(), OpenMode::kExisting);

  auto read = [&](const std::string& sql) {
    auto txn = store.BeginRead();
    auto select = txn.connection().Prepare(sql);
    REQUIRE(select.Step());
    return select.ColumnText(0);
  };
  CHECK(store.BeginRead().connection().QueryInt64("PRAGMA user_version") == outbox::kSchemaVersion);
  CHECK(read("SELECT tenant || '/' || \"trace id\" FROM outbox WHERE id = 1") == "acme/abc123");
  CHECK(read("SELECT type FROM pragma_table_info('outbox') WHERE name = 'trace id'") == "VARCHAR(32)");
  CHECK(SchemaObjects(store) == std::vector<std::string>{"trigger loan_event", "trigger my_audit",
                                                         "index my_tenant",
                                                         "view pending_by_tenant"});
  // The recreated trigger fires, the view reads the new table, the other table's trigger feeds it.
  {
    auto txn = store.BeginWrite();
    txn.connection().Exec("INSERT INTO business_loan VALUES ('L-2')");
    txn.Commit();
  }
  CHECK(read("SELECT group_concat(event_id, ',') FROM (SELECT event_id FROM audit ORDER BY 1)") ==
        "evt-1,evt-L-2");  // evt-1 from before the migration, evt-L-2 through the recreated trigger
  CHECK(read("SELECT group_concat(tenant || '=' || n, ',') FROM (SELECT * FROM pending_by_tenant "
             "ORDER BY tenant)") == "acme=1,trigger=1");
  CHECK(store.Count().total == 2);
}

TEST_CASE("A table of another design named outbox is refused untouched and reset replaces it",
          "[store][migration]") {
  TempDir dir;
  const std::string path = dir.File("foreign.db");
  {
    outbox::sqlite::Connection raw(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    raw.Exec("CREATE TABLE outbox(id INTEGER PRIMARY KEY, topic TEXT, k TEXT, v TEXT);"
             "INSERT INTO outbox VALUES (1, 't', 'k', 'v'), (2, 't', 'k2', 'v2');");
  }
  const std::string before = ReadFileBytes(path);
  const OpenMode mode = GENERATE(OpenMode::kExisting, OpenMode::kReadOnly);

  const auto error = CaptureThrow<SchemaMissingError>(
      [&] { Store store(path, StoreOptions{}, mode); });

  REQUIRE(error.has_value());
  CHECK(std::string(error->what()) ==
        "open database '" + path + "': its outbox table is not the lab's (no column event_id, "
        "aggregate_id, event_type, payload, created_at, published); give another --db, or let "
        "`reset` replace it (reset drops that table and its 2 rows)");
  CHECK(ReadFileBytes(path) == before);

  outbox::lab::ResetRemoved removed;
  outbox::lab::ResetLabDatabase(path, StoreOptions{}, &removed);
  CHECK(removed.loans == 0);
  CHECK(removed.outbox.outbox_rows == 2);
  CHECK_FALSE(removed.outbox.lab_table);
  Store store(path, StoreOptions{}, OpenMode::kExisting);
  CHECK(store.Count().total == 0);
}

TEST_CASE("Reset counts the rows of a business_loan table it drops even without an outbox table",
          "[store][migration]") {
  TempDir dir;
  const std::string path = dir.File("loans.db");
  {
    outbox::sqlite::Connection raw(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    raw.Exec("CREATE TABLE business_loan(x, y); INSERT INTO business_loan VALUES ('keep', 'me');");
  }
  outbox::lab::ResetRemoved removed;
  outbox::lab::ResetLabDatabase(path, StoreOptions{}, &removed);
  CHECK(removed.loans == 1);
  CHECK(removed.outbox.outbox_rows == 0);
}

TEST_CASE("Opening the lab database without a business_loan table writes nothing", "[store][migration]") {
  TempDir dir;
  const std::string path = dir.File("no-loans.db");
  {
    outbox::sqlite::Connection raw(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    raw.Exec("CREATE TABLE outbox(id INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL, "
             "aggregate_id TEXT NOT NULL, event_type TEXT NOT NULL, payload TEXT NOT NULL, "
             "created_at INTEGER NOT NULL, published BOOLEAN NOT NULL DEFAULT 0);"
             "CREATE TRIGGER keep_me AFTER INSERT ON outbox BEGIN SELECT 1; END;");
  }
  const std::string before = ReadFileBytes(path);
  const OpenMode mode = GENERATE(OpenMode::kExisting, OpenMode::kReadOnly);

  const auto error = CaptureThrow<SchemaMissingError>(
      [&] { outbox::lab::OpenLabDatabase(path, StoreOptions{}, mode); });

  REQUIRE(error.has_value());
  CHECK(std::string(error->what()) == "open database '" + path + "': no business_loan table");
  CHECK(ReadFileBytes(path) == before);
}
