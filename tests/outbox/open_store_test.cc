// OpenStore and StoreBackend (outbox/open_store.h): which backend a --db value opens, and the
// errors for a value that names none. The [postgres] case needs the server in OUTBOX_PG_URL
// (tests/pg_test_support.h); the others open no server.
#include <catch2/catch.hpp>

#include <filesystem>
#include <memory>
#include <string>

#include "outbox/error.h"
#include "outbox/open_store.h"
#include "outbox/pg/connection.h"
#include "pg_test_support.h"
#include "test_support.h"

using namespace outbox;

TEST_CASE("StoreBackend reads a file path as SQLite and both PostgreSQL URL schemes as PostgreSQL",
          "[store]") {
  CHECK(StoreBackend("outbox.db") == Backend::kSqlite);
  CHECK(StoreBackend("/var/lib/outbox/outbox.db") == Backend::kSqlite);
  CHECK(StoreBackend("data/with:colon.db") == Backend::kSqlite);
  CHECK(StoreBackend("postgresql://u@h/db") == Backend::kPostgres);
  CHECK(StoreBackend("postgres://u@h:5432/db?sslmode=disable") == Backend::kPostgres);
}

TEST_CASE("OpenStore opens a file path as an SQLite Store in the mode given", "[store]") {
  testing::TempDir dir;
  const std::string path = dir.File("sub/outbox.db");
  // kExisting creates nothing: the file is missing.
  CHECK_THROWS_AS(OpenStore(path, OpenMode::kExisting), SchemaMissingError);
  CHECK_FALSE(std::filesystem::exists(path));
  {
    std::unique_ptr<OutboxStore> created = OpenStore(path, OpenMode::kCreate);
    REQUIRE(created->backend() == Backend::kSqlite);
    auto* sqlite = dynamic_cast<Store*>(created.get());
    REQUIRE(sqlite != nullptr);
    CHECK(sqlite->path() == path);
    sqlite->ResetSchema();
    auto txn = sqlite->BeginWrite();
    sqlite->Enqueue(txn, testing::MakeEvent(1));
    txn.Commit();
  }
  std::unique_ptr<OutboxStore> reopened = OpenStore(path, OpenMode::kReadOnly);
  CHECK(reopened->backend() == Backend::kSqlite);
  CHECK(reopened->Count().total == 1);
  CHECK(reopened->Count().unpublished == 1);
}

TEST_CASE("OpenStore refuses an unknown URL scheme with a ConfigError and creates nothing",
          "[store]") {
  testing::TempDir dir;
  const std::filesystem::path previous = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  std::string message;
  try {
    OpenStore("mysql://app:secret@db.example/loans", OpenMode::kCreate);
  } catch (const ConfigError& e) {
    message = e.what();
  }
  std::filesystem::current_path(previous);
  CHECK(message ==
        "open database 'mysql://app@db.example/loans': unknown scheme 'mysql://'; give an SQLite "
        "file path or a postgresql:// URL");
  // Read as a path, the value would have created the folder "mysql:" for kCreate.
  CHECK(testing::ListDir(dir.path()).empty());
  CHECK_THROWS_AS(StoreBackend("sqlite://outbox.db"), ConfigError);
}

TEST_CASE("OpenStore refuses to create an outbox on a PostgreSQL URL before connecting",
          "[store]") {
  // Port 1 on localhost: were it to connect, it would fail with a PgError instead.
  CHECK_THROWS_MATCHES(
      OpenStore("postgresql://u:pw@127.0.0.1:1/db", OpenMode::kCreate), ConfigError,
      Catch::Matchers::Message("open database 'postgresql://u@127.0.0.1:1/db': OpenMode::kCreate "
                               "is for SQLite files; create the PostgreSQL tables with "
                               "PgStore::ResetSchema (outbox-lab reset)"));
}

TEST_CASE("OpenStore reports a malformed PostgreSQL URL as the PgError of libpq", "[store]") {
  std::string message;
  try {
    OpenStore("postgresql://u@127.0.0.1:notaport/db");
  } catch (const pg::PgError& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.rfind("connect to 'postgresql://u@127.0.0.1:notaport/db': ", 0) == 0);
  CHECK(message.find("notaport") != std::string::npos);
}

TEST_CASE("OpenStore opens a PostgreSQL URL as a PgStore with the claim mode given",
          "[store][postgres]") {
  testing::PgSchema schema("open_store");
  // A schema without the outbox table is refused, and nothing is created in it.
  CHECK_THROWS_AS(OpenStore(schema.url()), SchemaMissingError);
  {
    pg::Connection look(schema.url());
    CHECK(look.QueryInt("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()", {},
                        "count the tables") == 0);
  }
  // PgStore's own constructor still creates the tables (the library's first use, as `reset`).
  { PgStore create(schema.url()); }
  std::unique_ptr<OutboxStore> store =
      OpenStore(schema.url(), OpenMode::kExisting, StoreOptions{}, PgClaimMode::kNaiveCursor);
  REQUIRE(store->backend() == Backend::kPostgres);
  auto* pg_store = dynamic_cast<PgStore*>(store.get());
  REQUIRE(pg_store != nullptr);
  CHECK(pg_store->mode() == PgClaimMode::kNaiveCursor);
  CHECK(store->Count().total == 0);
  auto txn = pg_store->BeginWrite();
  pg_store->Enqueue(txn, testing::MakeEvent(1));
  txn.Commit();
  CHECK(store->Count().unpublished == 1);
  std::unique_ptr<OutboxStore> again = OpenStore(schema.url(), OpenMode::kReadOnly);
  CHECK(again->backend() == Backend::kPostgres);
  CHECK(again->Count().total == 1);
}

TEST_CASE("OpenStore refuses a PostgreSQL outbox that is a view or sits further down the "
          "search_path and creates nothing",
          "[store][postgres]") {
  testing::PgSchema first("open_first");
  testing::PgSchema second("open_second");
  { PgStore create(second.url()); }  // the application's outbox, in the second schema
  const auto with_path = [](const std::string& path) {
    const std::string base = testing::PgServerUrl();
    return base + (base.find('?') == std::string::npos ? "?" : "&") +
           "options=-csearch_path%3D" + path;
  };
  const std::string both = with_path(first.name() + "," + second.name());
  const auto message = [](const std::string& url) {
    try {
      OpenStore(url);
    } catch (const SchemaMissingError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Its other tables would go beside a new, empty outbox in the first schema.
  CHECK_THAT(message(both), Catch::Contains("is in schema " + second.name()) &&
                                Catch::Contains("put " + second.name() + " first"));
  pg::Connection look(first.url());
  CHECK(look.QueryInt("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()", {},
                      "count the tables") == 0);
  // A view named outbox is not the table the writers insert into.
  look.Exec("CREATE VIEW outbox AS SELECT 1 AS id", "create a view named outbox");
  CHECK_THAT(message(first.url()), Catch::Contains("is not a table"));
  // No schema of the search_path exists.
  CHECK_THAT(message(with_path("no_such_schema_here")),
             Catch::Contains("no schema of the search_path"));
}
