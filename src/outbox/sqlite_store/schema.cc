// Store: the schema (versions 1 to kSchemaVersion), its migrations, and reset.
#include "outbox/store.h"

#include <fmt/format.h>

#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "outbox/error.h"

#include "outbox/lease.h"

#include "internal.h"

namespace outbox {

using namespace sqlite_store;  // this folder's shared helpers (internal.h)

namespace {

// Schema 1: the chapter's table, times as epoch ms.
constexpr const char* kOutboxSchemaV1 = R"sql(
CREATE TABLE outbox (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  event_id     TEXT    NOT NULL UNIQUE,
  aggregate_id TEXT    NOT NULL,
  event_type   TEXT    NOT NULL,
  payload      TEXT    NOT NULL,
  created_at   INTEGER NOT NULL,
  published    BOOLEAN NOT NULL DEFAULT 0
);
CREATE INDEX outbox_unpublished ON outbox(id) WHERE published = 0;
)sql";

// Schema 1: the columns a table must have to be the lab's outbox (and to be
// migrated); a table of another design named outbox is refused, never rebuilt.
constexpr const char* kSchemaV1Columns[] = {"id",         "event_id",   "aggregate_id", "event_type",
                                            "payload",    "created_at", "published"};

// Schema 1 -> 2: the relay's bookkeeping, each column added only where it is
// missing (SQLite has no ADD COLUMN IF NOT EXISTS; an application may have
// added one of the names itself). Partial indexes cover only unpublished
// rows, so polling cost does not grow with retained history.
constexpr const char* kSchemaV2Columns[][2] = {
    {"published_at", "INTEGER"},    {"attempts", "INTEGER NOT NULL DEFAULT 0"},
    {"last_error", "TEXT"},         {"next_attempt_at", "INTEGER NOT NULL DEFAULT 0"},
    {"parked_at", "INTEGER"},       {"claim_token", "INTEGER"},
    {"claim_owner", "TEXT"},        {"claim_until", "INTEGER"}};
constexpr const char* kMigrateToV2 = R"sql(
CREATE INDEX IF NOT EXISTS outbox_pending_by_aggregate ON outbox(aggregate_id, id) WHERE published = 0;
CREATE TABLE IF NOT EXISTS outbox_fence (id INTEGER PRIMARY KEY CHECK (id = 1), token INTEGER NOT NULL);
INSERT OR IGNORE INTO outbox_fence(id, token) VALUES (1, 0);
CREATE TABLE IF NOT EXISTS outbox_archive (
  id INTEGER PRIMARY KEY, event_id TEXT NOT NULL, aggregate_id TEXT NOT NULL,
  event_type TEXT NOT NULL, payload TEXT NOT NULL, created_at INTEGER NOT NULL,
  published_at INTEGER, attempts INTEGER NOT NULL, archived_at INTEGER NOT NULL
);
PRAGMA user_version = 2;
)sql";

// Schema 2 -> 3: the contract for writers other than the lab (issue 9 §4).
// created_at defaults to the database clock in epoch ms when an INSERT omits
// it: the column's DEFAULT cannot be changed by ALTER TABLE, so the table is
// rebuilt (rows, ids and the AUTOINCREMENT high-water mark kept; Migrate
// restores sqlite_sequence). The range check is a pair of BEFORE triggers,
// not a table CHECK: SQLite cannot add a CHECK to an existing table, and a
// rebuild with one would have to reject or rewrite the rows that already
// break the contract, which Status() must report instead. A trigger's
// RAISE(ABORT) fails the INSERT inside the writer's own transaction, as a
// CHECK would. Julian day 2440587.5 is the Unix epoch. MigrateToV3 creates
// the new table, copies the rows (and the application's own columns), swaps
// the tables, then runs kFinishV3.
constexpr const char* kCreateOutboxV3 = R"sql(
CREATE TABLE outbox_v3 (
  id              INTEGER PRIMARY KEY AUTOINCREMENT,
  event_id        TEXT    NOT NULL UNIQUE,
  aggregate_id    TEXT    NOT NULL,
  event_type      TEXT    NOT NULL,
  payload         TEXT    NOT NULL,
  created_at      INTEGER NOT NULL
                  DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
  published       BOOLEAN NOT NULL DEFAULT 0,
  published_at    INTEGER,
  attempts        INTEGER NOT NULL DEFAULT 0,
  last_error      TEXT,
  next_attempt_at INTEGER NOT NULL DEFAULT 0,
  parked_at       INTEGER,
  claim_token     INTEGER,
  claim_owner     TEXT,
  claim_until     INTEGER,
  claimed_at      INTEGER
);
)sql";
// The columns copied from a schema 2 table (claimed_at is new in 3).
constexpr const char* kSchemaV2ColumnList =
    "id, event_id, aggregate_id, event_type, payload, created_at, published, published_at, "
    "attempts, last_error, next_attempt_at, parked_at, claim_token, claim_owner, claim_until";
// The lab's own indexes and triggers on outbox; any other one is the
// application's, and a rebuild recreates it.
constexpr const char* kLabOutboxObjects =
    "'outbox_unpublished', 'outbox_pending_by_aggregate', 'outbox_created_at_insert', "
    "'outbox_created_at_update', 'outbox_aggregate_id_insert', 'outbox_ids_as_text_insert', "
    "'outbox_ids_as_text_update'";
constexpr const char* kFinishV3 = R"sql(
CREATE INDEX outbox_unpublished ON outbox(id) WHERE published = 0;
CREATE INDEX outbox_pending_by_aggregate ON outbox(aggregate_id, id) WHERE published = 0;
CREATE TRIGGER outbox_created_at_insert BEFORE INSERT ON outbox
WHEN NOT (typeof(NEW.created_at) = 'integer'
          AND NEW.created_at BETWEEN 946684800000 AND 4102444800000)
BEGIN
  SELECT RAISE(ABORT, 'outbox.created_at must be an integer in epoch ms between 2000-01-01 and 2100-01-01; omit it to use the database clock');
END;
CREATE TRIGGER outbox_created_at_update BEFORE UPDATE OF created_at ON outbox
WHEN NOT (typeof(NEW.created_at) = 'integer'
          AND NEW.created_at BETWEEN 946684800000 AND 4102444800000)
BEGIN
  SELECT RAISE(ABORT, 'outbox.created_at must be an integer in epoch ms between 2000-01-01 and 2100-01-01; omit it to use the database clock');
END;
PRAGMA user_version = 3;
)sql";

// Schema 3 -> 4: the application's record headers (issue 9 §8), a JSON object
// of string values or NULL; checked when sent (ParseRecordHeaders), never here,
// so a bad value parks its row and never fails the application's INSERT.
// Applied per table by MigrateToV4, which skips a table that has the column.
constexpr const char* kHeadersColumn = "headers TEXT";

// Schema 4 -> 5: the leader lease of relay --coordination leader (Store::AcquireLease),
// one row from the start so every lease operation is an UPDATE of row 1; and a partial index
// over failed unpublished rows only, for the leader's hold-back test (ReadPage): it finds an
// earlier failed row of an aggregate in one probe however many untried rows the aggregate has
// pending, and a row written with attempts = 0 never enters it (no cost on the write path).
// ReadPage has since held back behind any unpublished row (outbox_pending_by_aggregate).
constexpr const char* kMigrateToV5 = R"sql(
CREATE TABLE IF NOT EXISTS outbox_lease (
  id INTEGER PRIMARY KEY CHECK (id = 1), owner TEXT NOT NULL, token INTEGER NOT NULL,
  until_ms INTEGER NOT NULL, acquired_at INTEGER NOT NULL
);
INSERT OR IGNORE INTO outbox_lease(id, owner, token, until_ms, acquired_at) VALUES (1, '', 0, 0, 0);
CREATE TRIGGER IF NOT EXISTS outbox_aggregate_id_insert BEFORE INSERT ON outbox
WHEN NEW.aggregate_id = ''
BEGIN
  SELECT RAISE(ABORT, 'outbox.aggregate_id must not be empty: it is the record key that keeps an aggregate''s events on one partition');
END;
CREATE INDEX IF NOT EXISTS outbox_failed_by_aggregate ON outbox(aggregate_id, id)
  WHERE published = 0 AND attempts > 0;
PRAGMA user_version = 5;
)sql";

// Schema 5 -> 6: delayed publish, a nullable not_before in epoch ms (OutboxEvent::not_before_ms):
// the relay sends no row before it (SendableRowsWhere, Delayed). No CHECK and no trigger: a
// foreign writer's NULL, text, negative or absurd value must never fail its INSERT; the relay
// reads each of them as "due now" (internal.h, kDelayedSql). Added only where missing, as
// headers was (a database whose user_version was set back by hand keeps its column).
constexpr const char* kNotBeforeColumn = "not_before INTEGER";

// Schema 6 -> 7: aggregate_id and event_id stored as TEXT whatever the writer bound. SQLite
// keeps a BLOB in a TEXT column as a BLOB (https://www.sqlite.org/datatype3.html, "Type
// Affinity") and never compares a BLOB equal to a TEXT of the same bytes, while the record key,
// the event id header and the checker read bytes. A foreign writer's BLOB aggregate 'A-1' was
// then another aggregate than the TEXT 'A-1' to the relay's hold-back, and their events could
// reach the one Kafka key out of order; a BLOB event id passed UNIQUE beside the same TEXT one,
// and an idempotent consumer dropped the second event as a duplicate. The triggers cast both to
// TEXT after each insert or update (the same bytes, the writer's INSERT kept: a BLOB event id
// equal to a stored one now fails UNIQUE, as the TEXT would); the rows already stored are cast
// once (an event id whose TEXT form is taken stays a BLOB: UPDATE OR IGNORE). An empty BLOB
// aggregate is refused as the empty TEXT one is (outbox_aggregate_id_insert).
// One trigger per event: {0} its name's end, {1} the event ("INSERT", "UPDATE OF ...").
constexpr const char* kIdsAsTextTrigger = R"sql(
CREATE TRIGGER IF NOT EXISTS outbox_ids_as_text_{0} AFTER {1} ON outbox
WHEN typeof(NEW.aggregate_id) = 'blob' OR typeof(NEW.event_id) = 'blob'
BEGIN
  SELECT RAISE(ABORT, 'outbox.aggregate_id must not be empty: it is the record key that keeps an aggregate''s events on one partition')
    WHERE CAST(NEW.aggregate_id AS TEXT) = '';
  UPDATE outbox SET aggregate_id = CAST(aggregate_id AS TEXT), event_id = CAST(event_id AS TEXT)
    WHERE id = NEW.id;
END;
)sql";
constexpr const char* kMigrateToV7 = R"sql(
UPDATE outbox SET aggregate_id = CAST(aggregate_id AS TEXT) WHERE typeof(aggregate_id) = 'blob';
UPDATE OR IGNORE outbox SET event_id = CAST(event_id AS TEXT) WHERE typeof(event_id) = 'blob';
PRAGMA user_version = 7;
)sql";

}  // namespace

bool Store::HasColumn(std::string_view table, std::string_view column) {
  auto select = connection_.Prepare("SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2");
  select.Bind(1, table).Bind(2, column);
  select.Step();
  return select.ColumnInt64(0) > 0;
}

bool Store::IsLabOutboxTable() {
  for (const char* column : kSchemaV1Columns)
    if (!HasColumn("outbox", column)) return false;
  return true;
}

void Store::ThrowForeignOutboxTable() {
  std::string missing;
  for (const char* column : kSchemaV1Columns)
    if (!HasColumn("outbox", column)) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", column);
  throw SchemaMissingError(fmt::format(
      "open database '{}': its outbox table is not the lab's (no column {}); give another --db, "
      "or let `reset` replace it (reset drops that table and its {} rows)",
      connection_.path(), missing, connection_.QueryInt64("SELECT COUNT(*) FROM outbox")));
}

void Store::Migrate() {
  if (connection_.QueryInt64("PRAGMA user_version") >= kSchemaVersion) return;
  sqlite::Transaction txn(connection_);
  // Re-check under the write lock: another process may have migrated meanwhile.
  const std::int64_t version = connection_.QueryInt64("PRAGMA user_version");
  if (version < 2) MigrateToV2();
  if (version < 3) MigrateToV3();
  if (version < 4) MigrateToV4();
  if (version < 5) MigrateToV5();
  if (version < 6) MigrateToV6();
  if (version < 7) MigrateToV7();
  txn.Commit();
}

// Inside the caller's transaction.
void Store::MigrateToV2() {
  for (const auto& [column, definition] : kSchemaV2Columns)
    if (!HasColumn("outbox", column))
      connection_.Exec(fmt::format("ALTER TABLE outbox ADD COLUMN {} {}", column, definition));
  connection_.Exec(kMigrateToV2);
}

namespace {

// name as an SQL identifier: in double quotes, inner quotes doubled.
std::string QuoteIdentifier(std::string_view name) {
  std::string quoted = "\"";
  for (const char c : name) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

}  // namespace

// Inside the caller's transaction. A rebuild loses nothing the application
// added: its own columns (values and declared type; a NOT NULL, DEFAULT or
// CHECK on such a column is not carried, since ALTER TABLE ADD COLUMN cannot
// take every one of them), its indexes and triggers on the table (recreated
// from their SQL), and views or other tables' triggers that name outbox (kept
// as they are: PRAGMA legacy_alter_table=ON stops the RENAME from re-parsing
// them while outbox is gone, which fails "error in view ...: no such table";
// https://www.sqlite.org/lang_altertable.html, "Making Other Kinds Of Table
// Schema Changes" and "ALTER TABLE RENAME"). The rebuilt table would restart
// its AUTOINCREMENT at the highest id left; the old high-water mark is carried
// over so that ids of purged rows are never reused.
void Store::MigrateToV3() {
  const std::int64_t high_water = connection_.QueryInt64(
      "SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'outbox'), 0)");
  std::vector<std::pair<std::string, std::string>> own_columns;  // name, declared type
  {
    std::string lab_columns = fmt::format("{}, claimed_at, headers", kSchemaV2ColumnList);
    lab_columns = ", " + lab_columns + ",";
    auto select = connection_.Prepare("SELECT name, type FROM pragma_table_info('outbox') ORDER BY cid");
    while (select.Step()) {
      std::string name = select.ColumnText(0);
      if (lab_columns.find(", " + name + ",") == std::string::npos)
        own_columns.emplace_back(std::move(name), select.ColumnText(1));
    }
  }
  std::vector<std::string> own_objects;  // CREATE INDEX / CREATE TRIGGER statements
  {
    auto select = connection_.Prepare(fmt::format(
        "SELECT sql FROM sqlite_master WHERE tbl_name = 'outbox' AND type IN ('index', 'trigger') "
        "AND sql IS NOT NULL AND name NOT IN ({}) ORDER BY type, name",
        kLabOutboxObjects));
    while (select.Step()) own_objects.push_back(select.ColumnText(0));
  }
  connection_.Exec(kCreateOutboxV3);
  std::string columns = kSchemaV2ColumnList;
  for (const auto& [name, type] : own_columns) {
    connection_.Exec(fmt::format("ALTER TABLE outbox_v3 ADD COLUMN {} {}", QuoteIdentifier(name), type));
    columns += ", " + QuoteIdentifier(name);
  }
  connection_.Exec(fmt::format("INSERT INTO outbox_v3({0}) SELECT {0} FROM outbox", columns));
  connection_.Exec("PRAGMA legacy_alter_table = ON");
  try {
    connection_.Exec("DROP TABLE outbox; ALTER TABLE outbox_v3 RENAME TO outbox");
  } catch (...) {
    connection_.Exec("PRAGMA legacy_alter_table = OFF");
    throw;
  }
  connection_.Exec("PRAGMA legacy_alter_table = OFF");
  connection_.Exec(kFinishV3);
  for (const std::string& sql : own_objects) connection_.Exec(sql);
  auto keep = connection_.Prepare(
      "INSERT OR REPLACE INTO sqlite_sequence(rowid, name, seq) VALUES("
      "(SELECT rowid FROM sqlite_sequence WHERE name = 'outbox'), 'outbox', "
      "MAX(?1, COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'outbox'), 0)))");
  keep.Bind(1, high_water).Run();
}

bool Store::HasSchema() {
  return connection_.QueryInt64(
             "SELECT COUNT(*) FROM sqlite_master WHERE type='table' AND name='outbox'") == 1;
}

ResetCounts Store::ResetSchema(const std::function<void(sqlite::Connection&)>& also) {
  sqlite::Transaction txn(connection_);
  if (also) also(connection_);
  // What is about to go, counted in the same transaction: whatever table is named outbox.
  ResetCounts removed;
  if (HasSchema()) {
    removed.outbox_rows = connection_.QueryInt64("SELECT COUNT(*) FROM outbox");
    removed.lab_table = IsLabOutboxTable();
    if (removed.lab_table)
      removed.published = connection_.QueryInt64("SELECT COUNT(*) FROM outbox WHERE published <> 0");
  }
  if (connection_.QueryInt64("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND "
                             "name = 'outbox_archive'") == 1)
    removed.archived = connection_.QueryInt64("SELECT COUNT(*) FROM outbox_archive");
  // outbox_fence and outbox_lease stay (their migrations create them only when missing): the
  // new outbox gives ids from 1 again, so a relay that read rows before the reset and settles
  // after it names ids of new rows. A claim token is then never given twice (a late claims
  // settle matches no new row), and the leader's term ends with its token stepped past it
  // (a late leader settle is fenced out), as on PostgreSQL (PgStore::ResetSchema). Dropped,
  // both counters started again and the late settle marked new rows published, never sent.
  connection_.Exec(
      "DROP TABLE IF EXISTS outbox; "
      "DROP TABLE IF EXISTS outbox_archive; DROP TABLE IF EXISTS outbox_run; "
      "DROP TABLE IF EXISTS outbox_purged; DROP TABLE IF EXISTS outbox_broker; "
      "DROP TABLE IF EXISTS outbox_partitioning; PRAGMA user_version = 0;");
  connection_.Exec(kOutboxSchemaV1);
  MigrateToV2();
  MigrateToV3();
  MigrateToV4();
  MigrateToV5();
  MigrateToV6();
  MigrateToV7();
  auto end_term = connection_.Prepare(
      "UPDATE outbox_lease SET until_ms = 0, token = token + 1, owner = ?1 "
      "WHERE id = 1 AND token > 0");
  end_term.Bind(1, std::string_view(kResetLeaseOwner)).Run();
  // Not part of the versioned schema: a database reset before run ids existed
  // simply has no run (RunId() is empty) and needs no migration.
  connection_.Exec(
      "CREATE TABLE outbox_run (id INTEGER PRIMARY KEY CHECK (id = 1), run_id TEXT NOT NULL, "
      "started_at INTEGER NOT NULL)");
  // Epoch ms and 32 random bits: unique across resets of one file and across files.
  const std::int64_t now_ms = clock_->EpochMs();
  const std::string run_id = fmt::format("{}-{:08x}", now_ms, std::random_device{}());
  auto insert =
      connection_.Prepare("INSERT INTO outbox_run(id, run_id, started_at) VALUES(1, ?1, ?2)");
  insert.Bind(1, run_id).Bind(2, now_ms).Run();
  txn.Commit();
  return removed;
}

// Inside the caller's transaction. A table that already has the column (a
// database whose user_version was set back by hand, as tests do) keeps it:
// SQLite has no ADD COLUMN IF NOT EXISTS.
void Store::MigrateToV4() {
  for (const char* table : {"outbox", "outbox_archive"})
    if (!HasColumn(table, "headers"))
      connection_.Exec(fmt::format("ALTER TABLE {} ADD COLUMN {}", table, kHeadersColumn));
  connection_.Exec("PRAGMA user_version = 4");
}

// Inside the caller's transaction.
void Store::MigrateToV5() { connection_.Exec(kMigrateToV5); }

// Inside the caller's transaction. ADD COLUMN of a nullable column without a default rewrites
// no row: SQLite reads the missing value of an older row as NULL.
void Store::MigrateToV6() {
  if (!HasColumn("outbox", "not_before"))
    connection_.Exec(fmt::format("ALTER TABLE outbox ADD COLUMN {}", kNotBeforeColumn));
  connection_.Exec("PRAGMA user_version = 6");
}

// Inside the caller's transaction.
void Store::MigrateToV7() {
  connection_.Exec(fmt::format(fmt::runtime(kIdsAsTextTrigger), "insert", "INSERT"));
  connection_.Exec(
      fmt::format(fmt::runtime(kIdsAsTextTrigger), "update", "UPDATE OF aggregate_id, event_id"));
  connection_.Exec(kMigrateToV7);
}
}  // namespace outbox
