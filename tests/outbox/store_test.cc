// Store: schema, enqueue in the caller's transaction, keyset fetch, marking,
// and what opening a wrong, missing or locked file does.
#include <catch2/catch.hpp>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "lab/chapter/loans.h"
#include "outbox/error.h"
#include "outbox/sqlite/connection.h"
#include "outbox/store.h"
#include "test_support.h"

namespace {

namespace fs = std::filesystem;
using outbox::DbError;
using outbox::OpenMode;
using outbox::SchemaMissingError;
using outbox::Store;
using outbox::StoreOptions;
using outbox::testing::CaptureThrow;
using outbox::testing::ListDir;
using outbox::testing::MakeEvent;
using outbox::testing::ReadFileBytes;
using outbox::testing::TempDir;
using outbox::testing::WriteFileBytes;

std::vector<std::int64_t> IdsOf(const std::vector<outbox::OutboxRow>& rows) {
  std::vector<std::int64_t> ids;
  for (const auto& row : rows) ids.push_back(row.id);
  return ids;
}

// Enqueues MakeEvent(1..n), one committed transaction each; returns the ids.
std::vector<std::int64_t> EnqueueEvents(Store& store, int n) {
  std::vector<std::int64_t> ids;
  for (int i = 1; i <= n; ++i) {
    auto txn = store.BeginWrite();
    ids.push_back(store.Enqueue(txn, MakeEvent(i)));
    txn.Commit();
  }
  return ids;
}

// A file whose first bytes are not the SQLite header.
std::string GarbageBytes() {
  std::string bytes;
  for (int i = 0; i < 4096; ++i) bytes.push_back(static_cast<char>('A' + (i * 7) % 26));
  return bytes;
}

}  // namespace

TEST_CASE("ResetSchema creates the outbox table and its unpublished index", "[store]") {
  TempDir dir;
  Store store(dir.File("lab.db"), StoreOptions{}, OpenMode::kCreate);
  REQUIRE_FALSE(store.HasSchema());

  store.ResetSchema();

  REQUIRE(store.HasSchema());
  REQUIRE(store.BeginRead().connection().QueryInt64(
              "SELECT COUNT(*) FROM sqlite_master WHERE type='index' AND name='outbox_unpublished'") ==
          1);
  const auto counts = store.Count();
  REQUIRE(counts.total == 0);
  REQUIRE(counts.published == 0);
  REQUIRE(counts.unpublished == 0);
}

TEST_CASE("ResetSchema drops every existing outbox row", "[store]") {
  TempDir dir;
  Store store(dir.File("lab.db"), StoreOptions{}, OpenMode::kCreate);
  store.ResetSchema();
  EnqueueEvents(store, 3);
  REQUIRE(store.Count().total == 3);

  store.ResetSchema();

  REQUIRE(store.Count().total == 0);
  REQUIRE(store.FetchUnpublished(0, 10).empty());
}

TEST_CASE("Each ResetSchema starts a new run whose id survives reopening", "[store]") {
  TempDir dir;
  const std::string path = dir.File("lab.db");
  std::string first;
  {
    Store store(path, StoreOptions{}, OpenMode::kCreate);
    store.ResetSchema();
    first = store.RunId();
  }
  CHECK_FALSE(first.empty());
  Store store(path, StoreOptions{}, OpenMode::kExisting);
  CHECK(store.RunId() == first);
  store.ResetSchema();
  CHECK_FALSE(store.RunId().empty());
  CHECK(store.RunId() != first);
  // Another database reset in the same millisecond still gets another run id.
  Store other(dir.File("other.db"), StoreOptions{}, OpenMode::kCreate);
  other.ResetSchema();
  CHECK(other.RunId() != store.RunId());
}

TEST_CASE("A database reset before run ids existed has an empty run id", "[store]") {
  TempDir dir;
  const std::string path = dir.File("lab.db");
  {
    Store store(path, StoreOptions{}, OpenMode::kCreate);
    store.ResetSchema();
  }
  {
    outbox::sqlite::Connection raw(path, SQLITE_OPEN_READWRITE);
    raw.Exec("DROP TABLE outbox_run");
  }
  Store store(path, StoreOptions{}, OpenMode::kExisting);
  CHECK(store.RunId().empty());
}

TEST_CASE("Enqueue inside a transaction returns increasing row ids and stores every field", "[store]") {
  TempDir dir;
  Store store(dir.File("lab.db"), StoreOptions{}, OpenMode::kCreate);
  store.ResetSchema();

  std::vector<std::int64_t> ids = EnqueueEvents(store, 2);
  {
    auto txn = store.BeginWrite();
    ids.push_back(store.Enqueue(txn, MakeEvent(3)));
    ids.push_back(store.Enqueue(txn, MakeEvent(4)));
    txn.Commit();
  }

  REQUIRE(ids == std::vector<std::int64_t>{1, 2, 3, 4});
  const auto rows = store.FetchUnpublished(0, 10);
  REQUIRE(IdsOf(rows) == ids);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto expected = MakeEvent(static_cast<int>(i) + 1);
    CHECK(rows[i].event.event_id == expected.event_id);
    CHECK(rows[i].event.aggregate_id == expected.aggregate_id);
    CHECK(rows[i].event.event_type == expected.event_type);
    CHECK(rows[i].event.payload == expected.payload);
    CHECK(rows[i].event.created_at_ms == expected.created_at_ms);
    CHECK_FALSE(rows[i].published);
  }
  REQUIRE(store.Count().total == 4);
}

TEST_CASE("Enqueue in a transaction that is never committed leaves no row", "[store]") {
  TempDir dir;
  Store store(dir.File("lab.db"), StoreOptions{}, OpenMode::kCreate);
  store.ResetSchema();
  {
    auto txn = store.BeginWrite();
    REQUIRE(store.Enqueue(txn, MakeEvent(1)) == 1);
    REQUIRE(store.Count().total == 1);  // visible inside the transaction
  }
  REQUIRE(store.Count().total == 0);
  // AUTOINCREMENT never reuses an id; a rolled-back insert does not consume one.
  REQUIRE(EnqueueEvents(store, 1) == std::vector<std::int64_t>{1});
}

TEST_CASE("A duplicate event id rolls back the business row written in the same transaction",
          "[store]") {
  TempDir dir;
  auto store = outbox::lab::ResetLabDatabase(dir.File("lab.db"), StoreOptions{});
  const auto loan1 = outbox::lab::ChapterLoan(1, store->clock().EpochMs());
  {
    auto txn = store->BeginWrite();
    outbox::lab::InsertLoan(txn.connection(), loan1);
    store->Enqueue(txn, outbox::lab::LoanCreatedEvent(loan1, 1));
    txn.Commit();
  }

  const auto loan2 = outbox::lab::ChapterLoan(2, store->clock().EpochMs());
  auto duplicate = outbox::lab::LoanCreatedEvent(loan2, 2);
  duplicate.event_id = outbox::lab::LoanCreatedEvent(loan1, 1).event_id;  // evt-1001 again
  {
    auto txn = store->BeginWrite();
    outbox::lab::InsertLoan(txn.connection(), loan2);
    REQUIRE(outbox::lab::LoanExists(txn.connection(), loan2.loan_id));  // written, not committed
    const auto error = CaptureThrow<DbError>([&] { store->Enqueue(txn, duplicate); });
    REQUIRE(error.has_value());
    REQUIRE(error->code() == SQLITE_CONSTRAINT_UNIQUE);
    REQUIRE(error->primary_code() == SQLITE_CONSTRAINT);
    REQUIRE_THAT(error->what(), Catch::Contains("SQLITE_CONSTRAINT_UNIQUE"));
  }  // txn rolls back here

  {
    auto txn = store->BeginRead();
    REQUIRE_FALSE(outbox::lab::LoanExists(txn.connection(), loan2.loan_id));
    REQUIRE(outbox::lab::LoanExists(txn.connection(), loan1.loan_id));
    REQUIRE(outbox::lab::CountLoans(txn.connection()) == 1);
  }
  const auto counts = store->Count();
  REQUIRE(counts.total == 1);
  REQUIRE(counts.unpublished == 1);
}

TEST_CASE("A duplicate loan id throws SQLITE_CONSTRAINT_PRIMARYKEY and writes no outbox row",
          "[store]") {
  TempDir dir;
  auto store = outbox::lab::ResetLabDatabase(dir.File("lab.db"), StoreOptions{});
  const auto loan = outbox::lab::ChapterLoan(1, store->clock().EpochMs());
  {
    auto txn = store->BeginWrite();
    outbox::lab::InsertLoan(txn.connection(), loan);
    txn.Commit();
  }
  {
    auto txn = store->BeginWrite();
    const auto error =
        CaptureThrow<DbError>([&] { outbox::lab::InsertLoan(txn.connection(), loan); });
    REQUIRE(error.has_value());
    REQUIRE(error->code() == SQLITE_CONSTRAINT_PRIMARYKEY);
  }
  REQUIRE(outbox::lab::CountLoans(store->BeginRead().connection()) == 1);
  REQUIRE(store->Count().total == 0);
}

TEST_CASE("FetchUnpublished pages by id after after_id and skips published rows and honours "
          "limit",
          "[store]") {
  TempDir dir;
  Store store(dir.File("lab.db"), StoreOptions{}, OpenMode::kCreate);
  store.ResetSchema();
  REQUIRE(EnqueueEvents(store, 6) == std::vector<std::int64_t>{1, 2, 3, 4, 5, 6});
  REQUIRE(store.MarkPublished(2));
  REQUIRE(store.MarkPublished(4));

  using Ids = std::vector<std::int64_t>;
  CHECK(IdsOf(store.FetchUnpublished(0, 10)) == Ids{1, 3, 5, 6});
  CHECK(IdsOf(store.FetchUnpublished(0, 2)) == Ids{1, 3});
  CHECK(IdsOf(store.FetchUnpublished(3, 2)) == Ids{5, 6});
  CHECK(IdsOf(store.FetchUnpublished(1, 1)) == Ids{3});
  CHECK(IdsOf(store.FetchUnpublished(6, 10)).empty());
  CHECK(IdsOf(store.FetchUnpublished(0, 0)).empty());

  // Paging with the last id seen visits every unpublished row exactly once.
  Ids seen;
  std::int64_t after = 0;
  for (auto page = store.FetchUnpublished(after, 1); !page.empty();
       page = store.FetchUnpublished(after, 1)) {
    seen.push_back(page.front().id);
    after = page.front().id;
  }
  CHECK(seen == Ids{1, 3, 5, 6});
  const auto row5 = store.FetchUnpublished(4, 1);
  REQUIRE(row5.size() == 1);
  CHECK(row5.front().event.event_id == MakeEvent(5).event_id);
}

TEST_CASE("MarkPublished returns true once and then false and false for a missing row", "[store]") {
  TempDir dir;
  Store store(dir.File("lab.db"), StoreOptions{}, OpenMode::kCreate);
  store.ResetSchema();
  EnqueueEvents(store, 3);

  REQUIRE(store.MarkPublished(2));
  REQUIRE_FALSE(store.MarkPublished(2));
  REQUIRE_FALSE(store.MarkPublished(99));

  const auto counts = store.Count();
  REQUIRE(counts.total == 3);
  REQUIRE(counts.published == 1);
  REQUIRE(counts.unpublished == 2);

  REQUIRE(store.MarkPublished(1));
  REQUIRE(store.MarkPublished(3));
  const auto after = store.Count();
  REQUIRE(after.published == 3);
  REQUIRE(after.unpublished == 0);
}

TEST_CASE("Marks survive closing and reopening the database", "[store]") {
  TempDir dir;
  const std::string path = dir.File("lab.db");
  {
    Store store(path, StoreOptions{}, OpenMode::kCreate);
    store.ResetSchema();
    EnqueueEvents(store, 3);
    REQUIRE(store.MarkPublished(1));
  }
  Store reopened(path, StoreOptions{}, OpenMode::kExisting);
  const auto counts = reopened.Count();
  REQUIRE(counts.total == 3);
  REQUIRE(counts.published == 1);
  REQUIRE(IdsOf(reopened.FetchUnpublished(0, 10)) == std::vector<std::int64_t>{2, 3});
}

TEST_CASE("Opening a missing file with kExisting throws SchemaMissingError and creates nothing",
          "[store]") {
  TempDir dir;
  const std::string path = dir.File("missing.db");

  const auto error = CaptureThrow<SchemaMissingError>(
      [&] { Store store(path, StoreOptions{}, OpenMode::kExisting); });
  REQUIRE(error.has_value());
  REQUIRE_THAT(error->what(), Catch::Contains("missing.db"));
  REQUIRE_FALSE(fs::exists(path));

  const auto lab_error = CaptureThrow<SchemaMissingError>(
      [&] { outbox::lab::OpenLabDatabase(path, StoreOptions{}); });
  REQUIRE(lab_error.has_value());
  REQUIRE_FALSE(fs::exists(path));
  REQUIRE(ListDir(dir.path()).empty());
}

TEST_CASE("Opening a file of garbage bytes throws SQLITE_NOTADB and leaves the file unchanged",
          "[store]") {
  TempDir dir;
  const std::string path = dir.File("garbage.db");
  const std::string bytes = GarbageBytes();
  WriteFileBytes(path, bytes);

  SECTION("Store with kExisting") {
    const auto error =
        CaptureThrow<DbError>([&] { Store store(path, StoreOptions{}, OpenMode::kExisting); });
    REQUIRE(error.has_value());
    REQUIRE(error->primary_code() == SQLITE_NOTADB);
    REQUIRE_THAT(error->what(), Catch::Contains("SQLITE_NOTADB"));
  }
  SECTION("Store with kCreate") {
    const auto error =
        CaptureThrow<DbError>([&] { Store store(path, StoreOptions{}, OpenMode::kCreate); });
    REQUIRE(error.has_value());
    REQUIRE(error->primary_code() == SQLITE_NOTADB);
  }
  SECTION("ResetLabDatabase") {
    const auto error =
        CaptureThrow<DbError>([&] { outbox::lab::ResetLabDatabase(path, StoreOptions{}); });
    REQUIRE(error.has_value());
    REQUIRE(error->primary_code() == SQLITE_NOTADB);
  }
  SECTION("OpenLabDatabase") {
    const auto error =
        CaptureThrow<DbError>([&] { outbox::lab::OpenLabDatabase(path, StoreOptions{}); });
    REQUIRE(error.has_value());
    REQUIRE(error->primary_code() == SQLITE_NOTADB);
  }

  REQUIRE(ReadFileBytes(path) == bytes);
  REQUIRE(ListDir(dir.path()) == std::vector<std::string>{"garbage.db"});
}

TEST_CASE("An SQLite database without tables opened with kExisting throws SchemaMissingError "
          "and is left unchanged",
          "[store]") {
  TempDir dir;
  const std::string path = dir.File("empty.db");
  SECTION("a database with a header and no tables") {
    outbox::sqlite::Connection raw(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    raw.Exec("PRAGMA user_version=7");
  }
  SECTION("a zero-byte file") { WriteFileBytes(path, ""); }
  const std::string before = ReadFileBytes(path);

  const auto error =
      CaptureThrow<SchemaMissingError>([&] { Store store(path, StoreOptions{}, OpenMode::kExisting); });
  REQUIRE(error.has_value());
  REQUIRE_THAT(error->what(), Catch::Contains("empty.db"));

  REQUIRE(ReadFileBytes(path) == before);
  REQUIRE(ListDir(dir.path()) == std::vector<std::string>{"empty.db"});
}

TEST_CASE("OpenLabDatabase on a database with only the outbox table throws SchemaMissingError",
          "[store]") {
  TempDir dir;
  const std::string path = dir.File("lab.db");
  {
    Store store(path, StoreOptions{}, OpenMode::kCreate);
    store.ResetSchema();
  }

  const auto error = CaptureThrow<SchemaMissingError>(
      [&] { outbox::lab::OpenLabDatabase(path, StoreOptions{}); });
  REQUIRE(error.has_value());
  REQUIRE_THAT(error->what(), Catch::Contains("business_loan"));

  outbox::lab::ResetLabDatabase(path, StoreOptions{});
  auto store = outbox::lab::OpenLabDatabase(path, StoreOptions{});
  REQUIRE(store->HasSchema());
  REQUIRE(outbox::lab::CountLoans(store->BeginRead().connection()) == 0);
}

TEST_CASE("kCreate creates missing parent directories", "[store]") {
  TempDir dir;
  const fs::path path = dir.path() / "a" / "b" / "c" / "lab.db";
  REQUIRE_FALSE(fs::exists(dir.path() / "a"));

  Store store(path.string(), StoreOptions{}, OpenMode::kCreate);
  store.ResetSchema();

  REQUIRE(fs::is_directory(dir.path() / "a" / "b" / "c"));
  REQUIRE(fs::is_regular_file(path));
  REQUIRE(store.HasSchema());
}

TEST_CASE("kCreate throws SQLITE_CANTOPEN when a parent path is a regular file", "[store]") {
  TempDir dir;
  WriteFileBytes(dir.path() / "plain", "x");
  const std::string path = (dir.path() / "plain" / "lab.db").string();

  const auto error =
      CaptureThrow<DbError>([&] { Store store(path, StoreOptions{}, OpenMode::kCreate); });
  REQUIRE(error.has_value());
  REQUIRE(error->primary_code() == SQLITE_CANTOPEN);
  REQUIRE(ReadFileBytes(dir.path() / "plain") == "x");
}

TEST_CASE("A write throws SQLITE_BUSY after busy_timeout_ms while another connection holds the "
          "write lock",
          "[store]") {
  TempDir dir;
  const std::string path = dir.File("lab.db");
  {
    auto setup = outbox::lab::ResetLabDatabase(path, StoreOptions{});
    EnqueueEvents(*setup, 1);
  }
  outbox::sqlite::Connection holder(path, SQLITE_OPEN_READWRITE);
  holder.Exec("BEGIN IMMEDIATE");

  StoreOptions options;
  options.busy_timeout_ms = 50;
  Store store(path, options, OpenMode::kExisting);

  const auto begin_error =
      CaptureThrow<DbError>([&] { auto txn = store.BeginWrite(); });
  REQUIRE(begin_error.has_value());
  REQUIRE(begin_error->primary_code() == SQLITE_BUSY);
  REQUIRE_THAT(begin_error->what(), Catch::Contains("SQLITE_BUSY"));

  const auto mark_error = CaptureThrow<DbError>([&] { store.MarkPublished(1); });
  REQUIRE(mark_error.has_value());
  REQUIRE(mark_error->primary_code() == SQLITE_BUSY);

  // Readers are not blocked in WAL mode.
  REQUIRE(store.Count().unpublished == 1);

  holder.Exec("ROLLBACK");
  REQUIRE(store.MarkPublished(1));
  REQUIRE(store.Count().published == 1);
}

TEST_CASE("ParseSynchronous accepts off and normal and full and extra and rejects anything else",
          "[store]") {
  using outbox::Synchronous;
  CHECK(outbox::ParseSynchronous("off") == Synchronous::kOff);
  CHECK(outbox::ParseSynchronous("normal") == Synchronous::kNormal);
  CHECK(outbox::ParseSynchronous("full") == Synchronous::kFull);
  CHECK(outbox::ParseSynchronous("extra") == Synchronous::kExtra);

  const std::string bad = GENERATE(as<std::string>{}, "", "FULL", "Normal", "on", "2", " full",
                                   "full ", "fsync");
  INFO("text: '" << bad << "'");
  const auto error = CaptureThrow<outbox::ConfigError>([&] { outbox::ParseSynchronous(bad); });
  REQUIRE(error.has_value());
  REQUIRE_THAT(error->what(), Catch::Contains("'" + bad + "'"));
}

TEST_CASE("Store opens in WAL mode with the requested synchronous level", "[store]") {
  using outbox::Synchronous;
  const auto [level, pragma_value] = GENERATE(table<Synchronous, std::int64_t>(
      {{Synchronous::kOff, 0}, {Synchronous::kNormal, 1}, {Synchronous::kFull, 2},
       {Synchronous::kExtra, 3}}));
  TempDir dir;
  StoreOptions options;
  options.synchronous = level;
  Store store(dir.File("lab.db"), options, OpenMode::kCreate);

  auto txn = store.BeginRead();
  REQUIRE(txn.connection().QueryInt64("PRAGMA synchronous") == pragma_value);
  auto mode = txn.connection().Prepare("PRAGMA journal_mode");
  REQUIRE(mode.Step());
  REQUIRE(mode.ColumnText(0) == "wal");
}

namespace {

TEST_CASE("Connection Reuse lends one kept statement reset each time and refuses a second lease of "
          "the same text",
          "[store]") {
  outbox::testing::TempDir dir;
  outbox::sqlite::Connection connection(dir.File("reuse.db"),
                                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  connection.Exec("CREATE TABLE t (v INTEGER); INSERT INTO t VALUES (1), (2), (3)");
  const std::string sql = "SELECT v FROM t WHERE v >= ?1 ORDER BY v";
  const outbox::sqlite::Statement* first = nullptr;
  {
    auto select = connection.Reuse(sql);
    first = &*select;
    select->Bind(1, std::int64_t{2});
    REQUIRE(select->Step());
    CHECK(select->ColumnInt64(0) == 2);
    // Still lent: a nested use of the same text would reset the rows read above.
    CHECK_THROWS_AS(connection.Reuse(sql), std::logic_error);
  }  // the lease ends mid-read: the statement is reset, its read snapshot released
  int busy = 0;
  for (sqlite3_stmt* s = sqlite3_next_stmt(connection.get(), nullptr); s;
       s = sqlite3_next_stmt(connection.get(), s))
    busy += sqlite3_stmt_busy(s);
  CHECK(busy == 0);
  connection.Exec("INSERT INTO t VALUES (4)");
  auto again = connection.Reuse(sql);
  CHECK(&*again == first);  // the same prepared statement, not a new one
  // Bindings were cleared: ?1 is NULL and v >= NULL matches no row.
  CHECK_FALSE(again->Step());
  again->Reset();
  again->Bind(1, std::int64_t{4});
  REQUIRE(again->Step());
  CHECK(again->ColumnInt64(0) == 4);
}

TEST_CASE("Statement::BindView binds the caller's bytes without a copy and a lease's end drops "
          "them",
          "[store]") {
  TempDir dir;
  outbox::sqlite::Connection connection(dir.File("view.db"),
                                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  const std::string sql = "SELECT ?1, length(?1)";
  std::string text = "abcdef";
  {
    auto select = connection.Reuse(sql);
    select->BindView(1, std::string_view(text).substr(0, 3));  // its length, not up to a NUL
    text[0] = 'x';  // read at the step, not at the bind: no copy was made
    REQUIRE(select->Step());
    CHECK(select->ColumnText(0) == "xbc");
    CHECK(select->ColumnInt64(1) == 3);
  }
  text = "a longer text that moved the buffer elsewhere";
  auto again = connection.Reuse(sql);
  REQUIRE(again->Step());
  CHECK(again->ColumnIsNull(0));  // cleared with the lease: nothing points at the old bytes
}

}  // namespace
