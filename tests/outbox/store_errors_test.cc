// Error messages name the problem and the file, not our SQL, and SQLite's
// extended result codes by name (issue 9 §3).
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>

#include <string>

#include "outbox/error.h"
#include "outbox/sqlite/connection.h"
#include "outbox/store.h"
#include "test_support.h"

using outbox::DbError;
using outbox::OpenMode;
using outbox::Store;
using outbox::StoreOptions;
using outbox::sqlite::ResultCodeName;
using outbox::testing::CaptureThrow;
using outbox::testing::TempDir;
using outbox::testing::WriteFileBytes;

TEST_CASE("ResultCodeName names primary and extended codes and never prints a bare number",
          "[sqlite]") {
  CHECK(ResultCodeName(SQLITE_NOTADB) == "SQLITE_NOTADB");
  CHECK(ResultCodeName(4874) == "SQLITE_IOERR_SHMSIZE");  // the "SQLITE_4874"
  CHECK(ResultCodeName(SQLITE_IOERR_WRITE) == "SQLITE_IOERR_WRITE");
  CHECK(ResultCodeName(SQLITE_CONSTRAINT_TRIGGER) == "SQLITE_CONSTRAINT_TRIGGER");
  CHECK(ResultCodeName(SQLITE_READONLY_DIRECTORY) == "SQLITE_READONLY_DIRECTORY");
  CHECK(ResultCodeName(SQLITE_IOERR | (250 << 8)) == "SQLITE_IOERR+250");
  for (int code = 0; code < (64 << 8); ++code) {
    const std::string name = ResultCodeName(code);
    INFO("code " << code << " named " << name);
    REQUIRE(name.rfind("SQLITE_", 0) == 0);
    // A number shows only after a name and '+', for a code newer than the table.
    if (name.find_first_of("0123456789") != std::string::npos)
      REQUIRE(name.find('+') != std::string::npos);
  }
}

TEST_CASE("A garbage file fails with open database F not an SQLite database and no SQL",
          "[store]") {
  TempDir dir;
  const std::string path = dir.File("garbage.db");
  WriteFileBytes(path, std::string(8192, '\x5a'));
  const auto error =
      CaptureThrow<DbError>([&] { Store store(path, StoreOptions{}, OpenMode::kExisting); });
  REQUIRE(error.has_value());
  CHECK(std::string(error->what()) ==
        "open database '" + path + "': not an SQLite database (its header is not \"SQLite "
        "format 3\": another program's file, or not a database at all); the lab never "
        "overwrites it: move it away or give another path (SQLITE_NOTADB)");
  CHECK(error->primary_code() == SQLITE_NOTADB);
}

TEST_CASE("A device or a FIFO given as the database is refused and nothing is written beside it",
          "[store]") {
  TempDir dir;
  const std::string fifo = dir.File("a-fifo");
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  for (const std::string& path : {std::string("/dev/null"), fifo}) {
    for (const OpenMode mode : {OpenMode::kExisting, OpenMode::kCreate, OpenMode::kReadOnly}) {
      INFO(path);
      const auto error = CaptureThrow<DbError>([&] { Store store(path, StoreOptions{}, mode); });
      REQUIRE(error.has_value());
      CHECK_THAT(error->what(), Catch::Contains("it is not a regular file"));
      CHECK(error->primary_code() == SQLITE_CANTOPEN);
    }
  }
  CHECK_FALSE(std::filesystem::exists("/dev/null-journal"));
  CHECK_FALSE(std::filesystem::exists(fifo + "-journal"));
}

TEST_CASE("Enqueue after another program took the largest id says the ids are used up",
          "[store]") {
  TempDir dir;
  Store store(dir.File("outbox.db"), StoreOptions{}, OpenMode::kCreate);
  store.ResetSchema();
  {
    auto txn = store.BeginWrite();
    txn.connection().Exec(
        "INSERT INTO outbox(id, event_id, aggregate_id, event_type, payload) "
        "VALUES (9223372036854775807, 'max', 'A', 'T', '{}')");
    txn.Commit();
  }
  auto txn = store.BeginWrite();
  const auto error = CaptureThrow<DbError>([&] {
    store.Enqueue(txn, outbox::OutboxEvent{"evt-1", "L-1", "LoanCreated", "{}", 1700000000000});
  });
  REQUIRE(error.has_value());
  CHECK(error->primary_code() == SQLITE_FULL);
  CHECK_THAT(error->what(), Catch::Contains("the outbox's ids are used up") &&
                                !Catch::Contains("INSERT INTO"));
}

TEST_CASE("A folder given as the database says it is a folder and shows a file path", "[store]") {
  TempDir dir;
  const std::string path = dir.File("a-folder");
  std::filesystem::create_directory(path);
  for (const OpenMode mode : {OpenMode::kExisting, OpenMode::kCreate}) {
    const auto error = CaptureThrow<DbError>([&] { Store store(path, StoreOptions{}, mode); });
    REQUIRE(error.has_value());
    CHECK(std::string(error->what()) == "open database '" + path + "': '" + path +
                                            "' is a folder, not a database file; give a file "
                                            "path, such as '" + path + "/outbox.db' "
                                            "(SQLITE_CANTOPEN)");
  }
}
