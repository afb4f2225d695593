#include "outbox/store.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <filesystem>
#include <limits>
#include <cstring>
#include <random>
#include <system_error>
#include <optional>
#include <unordered_set>

#include "outbox/error.h"
#include "outbox/failpoint.h"

namespace outbox {
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
    "'outbox_created_at_update', 'outbox_aggregate_id_insert'";
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

// What a purge without --archive keeps of each row it deletes: the event id and aggregate of a
// published event, so that the checker still counts its record in Kafka as published (not as a
// phantom) once the row is gone. Not part of the versioned schema: created by the first such
// purge, dropped by a reset. About 60 bytes a row against the row's payload.
constexpr const char* kPurgedTable =
    "CREATE TABLE IF NOT EXISTS outbox_purged (id INTEGER PRIMARY KEY, event_id TEXT NOT NULL, "
    "aggregate_id TEXT NOT NULL, purged_at INTEGER NOT NULL)";

// The broker incarnations this run's publishes went to (NoteBrokerIncarnation). Not part of the
// versioned schema: created on first use, dropped by a reset.
constexpr const char* kBrokerTable =
    "CREATE TABLE IF NOT EXISTS outbox_broker (incarnation TEXT PRIMARY KEY, "
    "noted_at INTEGER NOT NULL)";

// The key->partition mapping of each topic (NotePartitionMapping). Not part of the versioned
// schema: created on first use, dropped by a reset.
constexpr const char* kPartitioningTable =
    "CREATE TABLE IF NOT EXISTS outbox_partitioning (topic TEXT PRIMARY KEY, "
    "partitioner TEXT NOT NULL, partitions INTEGER NOT NULL, noted_at INTEGER NOT NULL)";

// Rows that break the created_at contract (rows written before schema 3, or
// with the triggers dropped): the same range as the triggers.
constexpr const char* kCreatedAtValid =
    "(typeof(created_at) = 'integer' AND created_at BETWEEN 946684800000 AND 4102444800000)";

const char* SynchronousPragma(Synchronous s) {
  switch (s) {
    case Synchronous::kOff: return "PRAGMA synchronous=OFF";
    case Synchronous::kNormal: return "PRAGMA synchronous=NORMAL";
    case Synchronous::kFull: return "PRAGMA synchronous=FULL";
    case Synchronous::kExtra: return "PRAGMA synchronous=EXTRA";
  }
  return "PRAGMA synchronous=FULL";
}

// A DbError whose message already says what is wrong in the user's words, file
// and code included: the constructor passes it on instead of rephrasing it.
class PhrasedDbError : public DbError {
 public:
  using DbError::DbError;
};

constexpr const char* kReadingCommands = "status, metrics, parked, verify, check and report";

// Why this process cannot write the database, or empty when it can: the
// file, and without a -wal file its directory too (SQLite must create F-wal
// and F-shm there). access(2) answers for this process: EROFS on read-only
// media, EACCES for another user's file (root passes: it can write).
struct WriteRefusal {
  std::string message;  // "open database 'F' for writing: ... (SQLITE_READONLY...)"
  int code = SQLITE_OK;
};

WriteRefusal WhyReadOnly(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(path, ec) && ::access(path.c_str(), W_OK) != 0) {
    const int why = errno;
    return {fmt::format("open database '{}' for writing: the file is read-only ({}); the commands "
                        "that only read work on it: {} (SQLITE_READONLY)",
                        path, std::strerror(why), kReadingCommands),
            SQLITE_READONLY};
  }
  const fs::path parent = fs::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  if (!fs::exists(path + "-wal", ec) && ::access(dir.c_str(), W_OK) != 0) {
    const int why = errno;
    return {fmt::format("open database '{}' for writing: its directory '{}' is read-only ({}), "
                        "and SQLite must create '{}-wal' and '{}-shm' there; the commands that "
                        "only read work on it: {} (SQLITE_READONLY_DIRECTORY)",
                        path, dir, std::strerror(why), path, path, kReadingCommands),
            SQLITE_READONLY_DIRECTORY};
  }
  return {};
}

// For a mode that writes, before SQLite opens anything: sqlite3_open_v2 with
// SQLITE_OPEN_READWRITE quietly falls back to read-only on a file it cannot
// write, and a missing -wal is only found missing at the first statement.
void RequireWritable(const std::string& path) {
  WriteRefusal refusal = WhyReadOnly(path);
  if (refusal.code != SQLITE_OK) throw PhrasedDbError(refusal.message, refusal.code);
}

// kReadOnly opens read-write when this process can write, so that the last
// connection's close checkpoints and removes the -wal and -shm as before (a
// SQLITE_OPEN_READONLY connection in a writable directory creates both and
// leaves them behind); PRAGMA query_only then keeps the command from writing.
int OpenFlags(OpenMode mode, const std::string& path) {
  if (mode == OpenMode::kReadOnly && WhyReadOnly(path).code != SQLITE_OK)
    return SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
  if (mode == OpenMode::kCreate) flags |= SQLITE_OPEN_CREATE;
  return flags;
}

// Runs before the connection exists, so the missing-file case never creates one.
const std::string& CheckPath(const std::string& path, OpenMode mode) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // SQLite says only "unable to open database file" for a folder.
  if (fs::is_directory(path, ec))
    throw DbError(fmt::format("open database '{}': '{}' is a folder, not a database file; give a "
                              "file path, such as '{}/outbox.db' (SQLITE_CANTOPEN)",
                              path, path, path),
                  SQLITE_CANTOPEN);
  if (mode != OpenMode::kCreate) {
    if (!fs::exists(path, ec))
      throw SchemaMissingError(
          fmt::format("open database '{}': no such file", path));
    if (mode == OpenMode::kExisting) RequireWritable(path);
    return path;
  }
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty() && !fs::create_directories(parent, ec) && ec)
    throw DbError(fmt::format("create directory '{}': {}", parent.string(), ec.message()),
                  SQLITE_CANTOPEN);
  RequireWritable(path);
  return path;
}

// "file:/abs/path?immutable=1" (https://www.sqlite.org/uri.html): every byte
// of the absolute path but unreserved ones and '/' percent-encoded, so '?',
// '#' and '%' in a file name stay part of it.
std::string ImmutableUri(const std::string& path) {
  std::error_code ec;
  const std::string absolute = std::filesystem::absolute(path, ec).string();
  std::string uri = "file:";
  for (const unsigned char c : ec ? path : absolute) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '.' || c == '_' || c == '~')
      uri += static_cast<char>(c);
    else
      uri += fmt::format("%{:02X}", c);
  }
  return uri + "?immutable=1";
}

// Runs op and rephrases a DbError from it as "<what> in 'F': <SQLite's words>
// (NAME)", code kept (the relay retries by code): the user reads what failed,
// never our SQL (issue 9 §3).
template <typename Op>
auto Phrased(const std::string& what, const std::string& path, Op&& op) -> decltype(op()) {
  try {
    return op();
  } catch (const PhrasedDbError&) {
    throw;
  } catch (const DbError& e) {
    throw PhrasedDbError(fmt::format("{} in '{}': {} ({})", what, path, e.reason(),
                                     sqlite::ResultCodeName(e.code())),
                         e.code(), e.reason());
  }
}

}  // namespace

Synchronous ParseSynchronous(const std::string& text) {
  if (text == "off") return Synchronous::kOff;
  if (text == "normal") return Synchronous::kNormal;
  if (text == "full") return Synchronous::kFull;
  if (text == "extra") return Synchronous::kExtra;
  throw ConfigError(fmt::format("synchronous '{}': expected off, normal, full or extra", text));
}

namespace {

// "open database 'F': <what is wrong> (NAME)" for an error while opening,
// reading the schema or migrating: the problem and the file, not our SQL.
// errno (sqlite3_system_errno) says why a file could not be opened or grown.
std::string OpenFailure(const std::string& path, sqlite3* db, int code) {
  const int system_errno = db ? sqlite3_system_errno(db) : 0;
  const std::string why = system_errno ? std::string(": ") + std::strerror(system_errno) : "";
  std::string reason;
  switch (code) {
    case SQLITE_IOERR_SHMOPEN:
      reason = fmt::format("cannot create the shared-memory file '{}-shm'{}", path, why);
      break;
    case SQLITE_IOERR_SHMSIZE:
    case SQLITE_IOERR_SHMMAP:
      reason = fmt::format("cannot grow the shared-memory file '{}-shm'{}", path, why);
      break;
    default:
      switch (code & 0xff) {
        case SQLITE_NOTADB:
          reason = "not an SQLite database (its header is not \"SQLite format 3\": another "
                   "program's file, or not a database at all); the lab never overwrites it: move "
                   "it away or give another path";
          break;
        case SQLITE_CORRUPT: reason = "the database file is corrupt"; break;
        case SQLITE_FULL: reason = "disk full"; break;
        case SQLITE_READONLY: reason = "the database is read-only"; break;
        case SQLITE_BUSY:
        case SQLITE_LOCKED: reason = "locked by another process past the busy timeout"; break;
        case SQLITE_CANTOPEN: {
          // Name the cause: a folder where the file should be, or a folder that does not let
          // this user create or open the file.
          std::error_code ec;
          const std::filesystem::path file(path);
          const std::filesystem::path folder =
              file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
          if (std::filesystem::is_directory(file, ec)) {
            reason = fmt::format("'{}' is a folder, not a database file; give a file path, such "
                                 "as '{}/outbox.db'",
                                 path, path);
          } else if (system_errno == EACCES || system_errno == EPERM || system_errno == EROFS) {
            reason = std::filesystem::exists(file, ec)
                         ? fmt::format("this user may not open the file{}", why)
                         : fmt::format("cannot create the file in folder '{}'{} (a read-only "
                                       "folder or file system: give a path in a writable folder)",
                                       folder.string(), why);
          } else {
            reason = std::string(sqlite3_errstr(code)) + why;
          }
          break;
        }
        case SQLITE_IOERR: reason = std::string(sqlite3_errstr(code)) + why; break;
        default: reason = db ? sqlite3_errmsg(db) : sqlite3_errstr(code);
      }
  }
  return fmt::format("open database '{}': {} ({})", path, reason, sqlite::ResultCodeName(code));
}

// One outbox row from a statement whose columns 0-5 are id, event_id, aggregate_id, event_type,
// payload, created_at, and whose column headers_column is headers (FetchUnpublished, ClaimBatch).
OutboxRow ReadOutboxRow(const sqlite::Statement& statement, int headers_column) {
  OutboxRow row;
  row.id = statement.ColumnInt64(0);
  row.event.event_id = statement.ColumnText(1);
  row.event.aggregate_id = statement.ColumnText(2);
  row.event.event_type = statement.ColumnText(3);
  row.event.payload = statement.ColumnText(4);
  row.event.created_at_ms = statement.ColumnInt64(5);
  row.event.headers = statement.ColumnText(headers_column);
  return row;
}

}  // namespace

Store::Store(const std::string& path, const StoreOptions& options, OpenMode mode)
    : clock_(options.clock ? options.clock : &system_clock_),
      mark_(options.mark),
      connection_(CheckPath(path, mode), OpenFlags(mode, path)) {
  try {
    if (mode == OpenMode::kReadOnly) {
      OpenReadOnly(options);
    } else {
      Open(options, mode);
      // Writers of this file take turns for the write lock (Connection::EnableWriterTurns).
      if (path != ":memory:" && !path.empty()) connection_.EnableWriterTurns(path + "-turn");
    }
  } catch (const PhrasedDbError&) {
    throw;
  } catch (const DbError& e) {
    throw DbError(OpenFailure(path, connection_.get(), e.code()), e.code());
  }
}

void Store::Open(const StoreOptions& options, OpenMode mode) {
  const std::string& path = connection_.path();
  connection_.SetBusyTimeout(options.busy_timeout_ms);
  // Read the schema before any pragma that writes (journal_mode=WAL does), so
  // a file without our schema is left exactly as it was.
  if (mode == OpenMode::kExisting && !HasSchema())
    throw SchemaMissingError(fmt::format(
        "open database '{}': no outbox table", path));
  // A table of another design is refused before anything is written (reset
  // replaces it: it drops whatever is named outbox).
  const bool lab_table = HasSchema() && IsLabOutboxTable();
  if (mode != OpenMode::kCreate && HasSchema() && !lab_table) ThrowForeignOutboxTable();
  connection_.Exec("PRAGMA journal_mode=WAL");
  connection_.Exec(SynchronousPragma(options.synchronous));
  if (lab_table) Migrate();
}

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

void Store::OpenReadOnly(const StoreOptions& options) {
  const std::string path = connection_.path();
  if (!sqlite3_db_readonly(connection_.get(), "main")) {
    // This process can write (OpenFlags): open as kExisting does, then refuse every write.
    Open(options, OpenMode::kExisting);
    connection_.Exec("PRAGMA query_only = 1");
    return;
  }
  connection_.SetBusyTimeout(options.busy_timeout_ms);
  bool has_schema = false;
  try {
    has_schema = HasSchema();
  } catch (const DbError& e) {
    // SQLite could not open or create the -wal or -shm file (wal.html, "Read-Only Databases"):
    // CANTOPEN on read-only media, READONLY_DIRECTORY in a directory this user cannot write.
    if (e.primary_code() != SQLITE_CANTOPEN && e.code() != SQLITE_READONLY_DIRECTORY) throw;
    std::error_code ec;
    if (std::filesystem::exists(path + "-wal", ec))
      throw PhrasedDbError(
          fmt::format("open database '{}' read-only: its write-ahead log '{}-wal' may hold "
                      "commits, and the shared-memory file '{}-shm' needed to read them cannot be "
                      "opened or created here; open the database once where it can be written, "
                      "or copy the three files to a writable directory ({})",
                      path, path, path, sqlite::ResultCodeName(e.code())),
          e.code());
    // No -wal: the last connection closed cleanly and checkpointed every commit into the main file.
    connection_ = sqlite::Connection(path, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI,
                                     ImmutableUri(path));
    immutable_ = true;
    connection_.SetBusyTimeout(options.busy_timeout_ms);
    has_schema = HasSchema();
  }
  if (!has_schema)
    throw SchemaMissingError(fmt::format(
        "open database '{}': no outbox table; run `outbox-lab reset` first", path));
  if (!IsLabOutboxTable()) ThrowForeignOutboxTable();
  const std::int64_t version = connection_.QueryInt64("PRAGMA user_version");
  if (version < kSchemaVersion)
    throw PhrasedDbError(
        fmt::format("open database '{}': its schema version {} must be migrated to {} before it "
                    "can be read, and the file is read-only; run a writing command (say "
                    "`outbox-lab unpark --all`) on it once where it can be written "
                    "(SQLITE_READONLY)",
                    path, version, kSchemaVersion),
        SQLITE_READONLY);
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

ResetCounts Store::ResetSchema() {
  sqlite::Transaction txn(connection_);
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
  connection_.Exec(
      "DROP TABLE IF EXISTS outbox; DROP TABLE IF EXISTS outbox_fence; "
      "DROP TABLE IF EXISTS outbox_archive; DROP TABLE IF EXISTS outbox_run; "
      "DROP TABLE IF EXISTS outbox_purged; DROP TABLE IF EXISTS outbox_broker; "
      "DROP TABLE IF EXISTS outbox_partitioning; "
      "DROP TABLE IF EXISTS outbox_lease; PRAGMA user_version = 0;");
  connection_.Exec(kOutboxSchemaV1);
  MigrateToV2();
  MigrateToV3();
  MigrateToV4();
  MigrateToV5();
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

std::string Store::RunId() {
  if (connection_.QueryInt64(
          "SELECT COUNT(*) FROM sqlite_master WHERE type='table' AND name='outbox_run'") == 0)
    return {};
  auto select = connection_.Prepare("SELECT run_id FROM outbox_run WHERE id = 1");
  return select.Step() ? select.ColumnText(0) : std::string();
}

void Store::NoteBrokerIncarnation(const std::string& incarnation) {
  Phrased(std::string("note the broker incarnation"), path(), [&] {
    sqlite::Transaction txn(connection_);
    connection_.Exec(kBrokerTable);
    auto insert = connection_.Prepare(
        "INSERT OR IGNORE INTO outbox_broker(incarnation, noted_at) VALUES(?1, ?2)");
    insert.Bind(1, incarnation).Bind(2, clock_->EpochMs()).Run();
    txn.Commit();
    return 0;
  });
}

std::vector<std::string> Store::BrokerIncarnations() {
  std::vector<std::string> incarnations;
  if (connection_.QueryInt64("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND "
                             "name = 'outbox_broker'") == 0)
    return incarnations;
  auto select = connection_.Prepare("SELECT incarnation FROM outbox_broker ORDER BY rowid");
  while (select.Step()) incarnations.push_back(select.ColumnText(0));
  return incarnations;
}

void Store::NotePartitionMapping(const PartitionMapping& mapping) {
  Phrased(std::string("note the partition mapping"), path(), [&] {
    sqlite::Transaction txn(connection_);
    connection_.Exec(kPartitioningTable);
    auto insert = connection_.Prepare(
        "INSERT OR REPLACE INTO outbox_partitioning(topic, partitioner, partitions, noted_at) "
        "VALUES(?1, ?2, ?3, ?4)");
    insert.Bind(1, mapping.topic)
        .Bind(2, mapping.partitioner)
        .Bind(3, static_cast<std::int64_t>(mapping.partitions))
        .Bind(4, clock_->EpochMs())
        .Run();
    txn.Commit();
    return 0;
  });
}

std::optional<PartitionMapping> Store::ReadPartitionMapping(const std::string& topic) {
  if (connection_.QueryInt64("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND "
                             "name = 'outbox_partitioning'") == 0)
    return std::nullopt;
  auto select = connection_.Prepare(
      "SELECT partitioner, partitions, noted_at FROM outbox_partitioning WHERE topic = ?1");
  select.Bind(1, topic);
  if (!select.Step()) return std::nullopt;
  return PartitionMapping{topic, select.ColumnText(0),
                          static_cast<std::int32_t>(select.ColumnInt64(1)), select.ColumnInt64(2)};
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

sqlite::Transaction Store::BeginWrite() { return sqlite::Transaction(connection_); }

sqlite::ReadTransaction Store::BeginRead() { return sqlite::ReadTransaction(connection_); }

std::int64_t Store::Enqueue(sqlite::Transaction& txn, const OutboxEvent& event) {
  if (&txn.connection() != &connection_)
    throw ConfigError(fmt::format("enqueue event '{}' into '{}': the transaction is not on this "
                                  "store's connection; begin it with Store::BeginWrite()",
                                  event.event_id, connection_.path()));
  if (event.aggregate_id.empty()) throw ConfigError(EmptyAggregateMessage(event.event_id));
  auto insert = connection_.Prepare(
      "INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at, headers) "
      "VALUES(?1, ?2, ?3, ?4, ?5, ?6)");
  insert.Bind(1, event.event_id)
      .Bind(2, event.aggregate_id)
      .Bind(3, event.event_type)
      .Bind(4, event.payload)
      .Bind(5, event.created_at_ms);
  if (event.headers.empty()) insert.BindNull(6); else insert.Bind(6, event.headers);
  insert.Run();
  return connection_.LastInsertRowid();
}

std::int64_t Store::BulkLoad(std::int64_t count,
                             const std::function<OutboxEvent(std::int64_t)>& make_event,
                             bool published) {
  sqlite::Transaction txn(connection_);
  auto insert = connection_.Prepare(
      "INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at, published, "
      "published_at, headers) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
  for (std::int64_t i = 0; i < count; ++i) {
    const OutboxEvent event = make_event(i);
    insert.Reset();
    insert.Bind(1, event.event_id)
        .Bind(2, event.aggregate_id)
        .Bind(3, event.event_type)
        .Bind(4, event.payload)
        .Bind(5, event.created_at_ms)
        .Bind(6, std::int64_t{published ? 1 : 0});
    if (published) insert.Bind(7, event.created_at_ms); else insert.BindNull(7);
    if (event.headers.empty()) insert.BindNull(8); else insert.Bind(8, event.headers);
    insert.Run();
  }
  txn.Commit();
  connection_.Exec("PRAGMA wal_checkpoint(TRUNCATE)");
  return std::max<std::int64_t>(count, 0);
}

std::int64_t Store::NextId() {
  return 1 + connection_.QueryInt64(
                 "SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'outbox'), 0)");
}

OutboxCounts OutboxSnapshot::Counts() const {
  OutboxCounts counts;
  for (const SnapshotRow& row : rows) {
    if (row.archived) continue;
    ++counts.total;
    if (row.published) ++counts.published;
  }
  counts.unpublished = counts.total - counts.published;
  return counts;
}

OutboxSnapshot Store::Snapshot(sqlite::ReadTransaction& txn) {
  if (&txn.connection() != &connection_)
    throw ConfigError(fmt::format("snapshot of '{}': the transaction is not on this store's "
                                  "connection; begin it with Store::BeginRead()",
                                  connection_.path()));
  OutboxSnapshot snapshot;
  // outbox_purged exists once a purge without --archive ran (kPurgedTable).
  const bool purged = connection_.QueryInt64("SELECT COUNT(*) FROM sqlite_master WHERE type = "
                                             "'table' AND name = 'outbox_purged'") == 1;
  auto select = connection_.Prepare(std::string(
      "SELECT id, event_id, aggregate_id, published <> 0, parked_at IS NOT NULL, 0 FROM outbox "
      "UNION ALL SELECT id, event_id, aggregate_id, 1, 0, 1 FROM outbox_archive ") +
      (purged ? "UNION ALL SELECT id, event_id, aggregate_id, 1, 0, 2 FROM outbox_purged " : "") +
      "ORDER BY 1");
  while (select.Step()) {
    SnapshotRow row;
    row.id = select.ColumnInt64(0);
    row.event_id = select.ColumnText(1);
    row.aggregate_id = select.ColumnText(2);
    row.published = select.ColumnInt64(3) != 0;
    row.parked = !row.published && select.ColumnInt64(4) != 0;
    row.archived = select.ColumnInt64(5) != 0;
    row.purged = select.ColumnInt64(5) == 2;
    snapshot.rows.push_back(std::move(row));
  }
  return snapshot;
}

OutboxSnapshot Store::Snapshot() {
  sqlite::ReadTransaction txn(connection_);
  return Snapshot(txn);
}

std::string Store::QuickCheck() {
  auto check = connection_.Prepare("PRAGMA quick_check");
  std::string answer;
  while (check.Step()) answer += (answer.empty() ? "" : "; ") + check.ColumnText(0);
  return answer;
}

std::string Store::IntegrityCheck() {
  auto check = connection_.Prepare("PRAGMA integrity_check");
  std::string answer;
  while (check.Step()) answer += (answer.empty() ? "" : "; ") + check.ColumnText(0);
  return answer;
}

std::vector<OutboxRow> Store::FetchUnpublished(std::int64_t after_id, std::int64_t limit) {
  auto select = connection_.Prepare(
      "SELECT id, event_id, aggregate_id, event_type, payload, created_at, headers FROM outbox "
      "WHERE published = 0 AND id > ?1 ORDER BY id LIMIT ?2");
  select.Bind(1, after_id).Bind(2, limit);
  std::vector<OutboxRow> rows;
  while (select.Step()) rows.push_back(ReadOutboxRow(select, 6));
  return rows;
}

bool Store::MarkPublished(std::int64_t id) {
  return Phrased(fmt::format("mark outbox row {} published", id), path(), [&] {
    sqlite::Transaction txn(connection_);
    auto update = connection_.Prepare(
        "UPDATE outbox SET published = 1, published_at = ?2 WHERE id = ?1 AND published = 0");
    update.Bind(1, id).Bind(2, clock_->EpochMs()).Run();
    const bool changed = connection_.Changes() == 1;
    txn.Commit();
    return changed;
  });
}

std::int64_t Store::MarkPublished(const std::vector<std::int64_t>& ids) {
  sqlite::Transaction txn(connection_);
  auto update = connection_.Prepare(
      "UPDATE outbox SET published = 1, published_at = ?2 WHERE id = ?1 AND published = 0");
  const std::int64_t now_ms = clock_->EpochMs();
  std::int64_t marked = 0;
  for (std::int64_t id : ids) {
    update.Reset();
    update.Bind(1, id).Bind(2, now_ms).Run();
    marked += connection_.Changes();
  }
  txn.Commit();
  return marked;
}

OutboxCounts Store::Count() {
  auto select = connection_.Prepare(
      "SELECT COUNT(*), COALESCE(SUM(published <> 0), 0) FROM outbox");
  select.Step();
  OutboxCounts counts;
  counts.total = select.ColumnInt64(0);
  counts.published = select.ColumnInt64(1);
  counts.unpublished = counts.total - counts.published;
  return counts;
}

std::vector<std::int64_t> Store::PublishDelaysMs(std::int64_t after_id) {
  auto select = connection_.Prepare(
      "SELECT published_at - created_at FROM outbox "
      "WHERE id > ?1 AND published <> 0 AND published_at IS NOT NULL ORDER BY id");
  select.Bind(1, after_id);
  std::vector<std::int64_t> delays;
  while (select.Step()) delays.push_back(select.ColumnInt64(0));
  return delays;
}

// Claimable rows o: ?3 = now, ?5 = cursor (id > ?5), ?8 = upper bound (id <= ?8;
// a plain range, so SQLite bounds the index scan by it), ?6 = block_key. Under block_key only the oldest unpublished row of
// an aggregate is claimable, whatever the state of that row (due, in backoff,
// parked, claimed, or merely behind the cursor): so a batch holds at most one
// row per aggregate and a later row is never sent before an earlier one.
namespace {

// Due (not in backoff) and unclaimed, with the time now as parameter ?N; a
// value beyond kMaxHoldMs from now, or not a number, counts as neither a
// backoff nor a lease (see kMaxHoldMs). Format with {0} the column prefix
// ("o." or ""), {1} the parameter number, {2} kMaxHoldMs.
constexpr const char* kDueSql =
    "({0}next_attempt_at <= ?{1} OR {0}next_attempt_at > ?{1} + {2} "
    "OR typeof({0}next_attempt_at) NOT IN ('integer', 'real'))";
constexpr const char* kUnclaimedSql =
    "({0}claim_until IS NULL OR {0}claim_until <= ?{1} OR {0}claim_until > ?{1} + {2} "
    "OR typeof({0}claim_until) NOT IN ('integer', 'real'))";

std::string Due(std::string_view prefix, int parameter) {
  return fmt::format(fmt::runtime(kDueSql), prefix, parameter, kMaxHoldMs);
}
std::string Unclaimed(std::string_view prefix, int parameter) {
  return fmt::format(fmt::runtime(kUnclaimedSql), prefix, parameter, kMaxHoldMs);
}

const std::string& ClaimableWhere() {
  static const std::string where = fmt::format(
      "o.published = 0 AND o.id > ?5 AND o.id <= ?8 AND o.parked_at IS NULL AND {} AND {} "
      "AND (?6 = 0 OR NOT EXISTS (SELECT 1 FROM outbox e WHERE e.aggregate_id = o.aggregate_id "
      "AND e.id < o.id AND e.published = 0))",
      Due("o.", 3), Unclaimed("o.", 3));
  return where;
}

}  // namespace

static std::int64_t UpperBound(const ClaimRequest& request) {
  return request.up_to_id > 0 ? request.up_to_id : std::numeric_limits<std::int64_t>::max();
}

bool Store::HasClaimable(const ClaimRequest& request) {
  auto select = connection_.Prepare(
      fmt::format("SELECT 1 FROM outbox o WHERE {} LIMIT 1", ClaimableWhere()));
  select.Bind(3, request.now_ms)
      .Bind(5, request.after_id)
      .Bind(6, static_cast<std::int64_t>(request.block_key ? 1 : 0))
      .Bind(8, UpperBound(request));
  return select.Step();
}

std::int64_t Store::WaitingCount(std::int64_t now_ms) {
  auto select = connection_.Prepare(
      fmt::format("SELECT COUNT(*) FROM outbox WHERE published = 0 AND parked_at IS NULL "
                  "AND NOT ({} AND {})",
                  Due("", 1), Unclaimed("", 1)));
  select.Bind(1, now_ms);
  select.Step();
  return select.ColumnInt64(0);
}

BackoffWait Store::Backoffs(std::int64_t now_ms) {
  auto select = connection_.Prepare(
      fmt::format("SELECT COUNT(*), COALESCE(MIN(next_attempt_at), 0) FROM outbox WHERE "
                  "published = 0 AND parked_at IS NULL AND NOT {} AND {}",
                  Due("", 1), Unclaimed("", 1)));
  select.Bind(1, now_ms);
  select.Step();
  return {select.ColumnInt64(0), select.ColumnInt64(1)};
}

std::int64_t Store::PendingCount() {
  return connection_.QueryInt64(
      "SELECT COUNT(*) FROM outbox WHERE published = 0 AND parked_at IS NULL");
}

Claim Store::ClaimBatch(const ClaimRequest& request) {
  return Phrased(fmt::format("claim a batch of up to {} rows for {}", request.limit, request.owner), path(), [&] {
    Claim claim;
    sqlite::Transaction txn(connection_);
    claim.token = connection_.QueryInt64("UPDATE outbox_fence SET token = token + 1 RETURNING token");
    // The IN (...) subquery is evaluated before any row is updated.
    auto update = connection_.Prepare(fmt::format(
        "UPDATE outbox SET claim_token = ?1, claim_owner = ?2, claim_until = ?3 + ?4, claimed_at = ?3 "
        "WHERE id IN (SELECT o.id FROM outbox o WHERE {} ORDER BY o.id LIMIT ?7) "
        "RETURNING id, event_id, aggregate_id, event_type, payload, created_at, attempts, headers",
        ClaimableWhere()));
    update.Bind(1, claim.token)
        .Bind(2, request.owner)
        .Bind(3, request.now_ms)
        .Bind(4, request.lease_ms)
        .Bind(5, request.after_id)
        .Bind(6, static_cast<std::int64_t>(request.block_key ? 1 : 0))
        .Bind(7, request.limit)
        .Bind(8, UpperBound(request));
    std::vector<std::pair<OutboxRow, std::int64_t>> claimed;
    while (update.Step()) claimed.emplace_back(ReadOutboxRow(update, 7), update.ColumnInt64(6));
    txn.Commit();
    // RETURNING gives no order guarantee (https://www.sqlite.org/lang_returning.html).
    std::sort(claimed.begin(), claimed.end(),
              [](const auto& a, const auto& b) { return a.first.id < b.first.id; });
    for (auto& [row, attempts] : claimed) {
      claim.rows.push_back(std::move(row));
      claim.attempts.push_back(attempts);
    }
    return claim;
  });
}

namespace {

// SettleBatch's mark of the acknowledged ids, in the caller's transaction:
// each id held under token is marked published at now_ms and listed in
// report.marked_ids; any other (fenced: its claim was taken over) in
// report.fenced_ids, in the order of acked.
void MarkAcked(sqlite::Connection& connection, MarkMethod method, std::int64_t token,
               const std::vector<std::int64_t>& acked, std::int64_t now_ms,
               SettleReport& report) {
  const auto count = [&report](std::int64_t id, bool marked) {
    (marked ? report.marked : report.fenced) += 1;
    (marked ? report.marked_ids : report.fenced_ids).push_back(id);
  };
  if (method == MarkMethod::kById) {
    auto mark = connection.Prepare(
        "UPDATE outbox SET published = 1, published_at = ?3, claim_token = NULL, "
        "claim_owner = NULL, claim_until = NULL WHERE id = ?1 AND claim_token = ?2");
    for (std::int64_t id : acked) {
      mark.Reset();
      mark.Bind(1, id).Bind(2, token).Bind(3, now_ms).Run();
      count(id, connection.Changes() == 1);
    }
    return;
  }
  // Runs of consecutive ids in sorted order; a run [first, last] holds exactly
  // last - first + 1 acked ids, so the BETWEEN touches no row outside acked.
  std::vector<std::int64_t> sorted = acked;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  auto mark = connection.Prepare(
      "UPDATE outbox SET published = 1, published_at = ?4, claim_token = NULL, "
      "claim_owner = NULL, claim_until = NULL WHERE id BETWEEN ?1 AND ?2 AND claim_token = ?3 "
      "RETURNING id");
  std::unordered_set<std::int64_t> marked;
  for (std::size_t begin = 0; begin < sorted.size();) {
    std::size_t end = begin + 1;
    while (end < sorted.size() && sorted[end] == sorted[end - 1] + 1) ++end;
    mark.Reset();
    mark.Bind(1, sorted[begin]).Bind(2, sorted[end - 1]).Bind(3, token).Bind(4, now_ms);
    while (mark.Step()) marked.insert(mark.ColumnInt64(0));
    begin = end;
  }
  for (std::int64_t id : acked) count(id, marked.erase(id) == 1);
}

// Inside a settle's transaction: each failed delivery whose row is still this
// settle's (still_ours, an SQL condition that may use the token as ?2) gets
// attempts+1, its error, its next attempt after BackoffMs, and is parked past
// max_attempts or when park_now; a row no longer ours is counted fenced. One
// body for claims mode ("claim_token = ?2") and leader mode ("published = 0",
// the lease already checked: token is bound only where still_ours uses ?2). Clearing the
// claim columns is a no-op for a leader's rows, which carry no live claim.
void RecordFailures(sqlite::Connection& connection, std::string_view still_ours,
                    std::int64_t token, const std::vector<FailedDelivery>& failed,
                    const SettlePolicy& policy, std::int64_t now_ms, SettleReport& report) {
  if (failed.empty()) return;
  const bool uses_token = still_ours.find("?2") != std::string_view::npos;
  auto attempts_of = connection.Prepare(
      fmt::format("SELECT attempts FROM outbox WHERE id = ?1 AND {}", still_ours));
  auto record = connection.Prepare(fmt::format(
      "UPDATE outbox SET attempts = ?3, last_error = ?4, next_attempt_at = ?5, parked_at = ?6, "
      "claim_token = NULL, claim_owner = NULL, claim_until = NULL WHERE id = ?1 AND {}",
      still_ours));
  for (const FailedDelivery& failure : failed) {
    attempts_of.Reset();
    attempts_of.Bind(1, failure.id);
    if (uses_token) attempts_of.Bind(2, token);
    if (!attempts_of.Step()) {
      ++report.fenced;
      report.fenced_ids.push_back(failure.id);
      continue;
    }
    const std::int64_t attempts = attempts_of.ColumnInt64(0) + 1;
    attempts_of.Reset();
    const bool park = failure.park_now || attempts >= policy.max_attempts;
    record.Reset();
    record.Bind(1, failure.id).Bind(3, attempts).Bind(4, failure.error)
        .Bind(5, now_ms + BackoffMs(attempts, policy));
    if (uses_token) record.Bind(2, token);
    if (park) record.Bind(6, now_ms); else record.BindNull(6);
    record.Run();
    if (park) {
      ++report.parked;
      report.parked_ids.push_back(failure.id);
    } else {
      ++report.retried;
    }
  }
}

}  // namespace

SettleReport Store::SettleBatch(std::int64_t token, const std::vector<std::int64_t>& acked,
                                const std::vector<FailedDelivery>& failed,
                                const SettlePolicy& policy, std::int64_t now_ms) {
  return Phrased(fmt::format("settle the batch of claim {} ({} acknowledged, {} failed)", token, acked.size(), failed.size()), path(), [&] {
    SettleReport report;
    sqlite::Transaction txn(connection_);
    MarkAcked(connection_, mark_, token, acked, now_ms, report);
    RecordFailures(connection_, "claim_token = ?2", token, failed, policy, now_ms, report);
    txn.Commit();
    return report;
  });
}

std::vector<ClaimOwner> Store::ClaimOwners(std::int64_t now_ms) {
  auto select = connection_.Prepare(
      fmt::format("SELECT claim_owner, COUNT(*), MIN(COALESCE(claimed_at, claim_until)), "
                  "MAX(claim_until), MAX(claim_token) FROM outbox WHERE published = 0 AND NOT {} "
                  "AND claim_owner IS NOT NULL GROUP BY claim_owner ORDER BY claim_owner",
                  Unclaimed("", 1)));
  select.Bind(1, now_ms);
  std::vector<ClaimOwner> owners;
  while (select.Step()) {
    ClaimOwner owner;
    owner.owner = select.ColumnText(0);
    owner.rows = select.ColumnInt64(1);
    owner.age_ms = std::max<std::int64_t>(0, now_ms - select.ColumnInt64(2));
    owner.expires_in_ms = std::max<std::int64_t>(0, select.ColumnInt64(3) - now_ms);
    owner.max_token = select.ColumnInt64(4);
    owners.push_back(std::move(owner));
  }
  return owners;
}

std::int64_t Store::ReleaseClaimsOf(const std::string& owner, std::int64_t up_to_token) {
  return Phrased(fmt::format("release the claims of {}", owner), path(), [&] {
    sqlite::Transaction txn(connection_);
    auto release = connection_.Prepare(
        "UPDATE outbox SET claim_token = NULL, claim_owner = NULL, claim_until = NULL "
        "WHERE claim_owner = ?1 AND claim_token <= ?2 AND published = 0");
    release.Bind(1, owner).Bind(2, up_to_token).Run();
    const std::int64_t released = connection_.Changes();
    txn.Commit();
    return released;
  });
}

void Store::ReleaseClaim(std::int64_t token) {
  return Phrased(fmt::format("release claim {}", token), path(), [&] {
    sqlite::Transaction txn(connection_);
    auto release = connection_.Prepare(
        "UPDATE outbox SET claim_token = NULL, claim_owner = NULL, claim_until = NULL "
        "WHERE claim_token = ?1 AND published = 0");  // published = 0: the partial index
    release.Bind(1, token).Run();
    txn.Commit();
  });
}

namespace {

LeaderLease ReadLeaseRow(sqlite::Connection& connection) {
  auto select = connection.Prepare(
      "SELECT owner, token, until_ms, acquired_at FROM outbox_lease WHERE id = 1");
  LeaderLease lease;
  if (!select.Step()) return lease;
  lease.owner = select.ColumnText(0);
  lease.token = select.ColumnInt64(1);
  lease.until_ms = select.ColumnInt64(2);
  lease.acquired_at_ms = select.ColumnInt64(3);
  return lease;
}

void RequirePositiveLease(std::int64_t lease_ms) {
  if (lease_ms <= 0) throw ConfigError(fmt::format("lease {} ms: must be positive", lease_ms));
}

}  // namespace

LeaderLease Store::ReadLease() {
  sqlite::ReadTransaction txn(connection_);
  return ReadLeaseRow(connection_);
}

LeaseAcquisition Store::AcquireLease(const std::string& owner, std::int64_t lease_ms,
                                     std::int64_t now_ms) {
  RequirePositiveLease(lease_ms);
  LeaseAcquisition out;
  out.previous = ReadLease();
  out.lease = out.previous;
  if (out.previous.Live(now_ms)) return out;  // a standby's poll writes nothing
  return Phrased(fmt::format("acquire the leader lease for {}", owner), path(), [&] {
    sqlite::Transaction txn(connection_);
    out.previous = ReadLeaseRow(connection_);  // again, under the write lock
    out.lease = out.previous;
    if (out.previous.Live(now_ms)) return out;
    auto take = connection_.Prepare(
        "UPDATE outbox_lease SET owner = ?1, token = token + 1, until_ms = ?2 + ?3, "
        "acquired_at = ?2 WHERE id = 1 RETURNING token");
    take.Bind(1, owner).Bind(2, now_ms).Bind(3, lease_ms);
    if (!take.Step()) throw DbError("the lease row is missing", SQLITE_CORRUPT);
    out.lease = {owner, take.ColumnInt64(0), now_ms + lease_ms, now_ms};
    take.Reset();
    txn.Commit();
    out.acquired = true;
    return out;
  });
}

bool Store::RenewLease(std::int64_t token, std::int64_t lease_ms, std::int64_t now_ms) {
  RequirePositiveLease(lease_ms);
  return Phrased(fmt::format("renew the leader lease of term {}", token), path(), [&] {
    sqlite::Transaction txn(connection_);
    auto renew = connection_.Prepare(
        "UPDATE outbox_lease SET until_ms = MAX(until_ms, ?2 + ?3) WHERE id = 1 AND token = ?1");
    renew.Bind(1, token).Bind(2, now_ms).Bind(3, lease_ms).Run();
    const bool current = connection_.Changes() == 1;
    txn.Commit();
    return current;
  });
}

bool Store::ReleaseLease(std::int64_t token) {
  return Phrased(fmt::format("release the leader lease of term {}", token), path(), [&] {
    sqlite::Transaction txn(connection_);
    auto release =
        connection_.Prepare("UPDATE outbox_lease SET until_ms = 0 WHERE id = 1 AND token = ?1");
    release.Bind(1, token).Run();
    const bool current = connection_.Changes() == 1;
    txn.Commit();
    return current;
  });
}

// Sendable rows o for a leader: ?1 = cursor (id > ?1), ?2 = upper bound, ?3 = now,
// ?4 = block_key. Claims of a claims-mode relay are respected, so a
// leader never sends what such a relay holds.
static const std::string& SendableWhere() {
  static const std::string where = fmt::format(
      "o.published = 0 AND o.id > ?1 AND o.id <= ?2 AND o.parked_at IS NULL AND {} AND {} "
      "AND (?4 = 0 OR NOT EXISTS (SELECT 1 FROM outbox e WHERE e.aggregate_id = o.aggregate_id "
      "AND e.id < o.id AND e.published = 0))",
      Due("o.", 3), Unclaimed("o.", 3));
  return where;
}

std::vector<OutboxRow> Store::ReadPage(const PageRequest& request) {
  auto select = connection_.Prepare(fmt::format(
      "SELECT o.id, o.event_id, o.aggregate_id, o.event_type, o.payload, o.created_at, o.headers "
      "FROM outbox o WHERE {} ORDER BY o.id LIMIT ?5",
      SendableWhere()));
  select.Bind(1, request.after_id)
      .Bind(2, request.up_to_id > 0 ? request.up_to_id : std::numeric_limits<std::int64_t>::max())
      .Bind(3, request.now_ms)
      .Bind(4, static_cast<std::int64_t>(request.block_key ? 1 : 0))
      .Bind(5, request.limit);
  std::vector<OutboxRow> rows;
  while (select.Step()) rows.push_back(ReadOutboxRow(select, 6));
  return rows;
}

namespace {

// SettleUnderLease's mark, in its transaction: each acked id still unpublished is marked at
// now_ms (report.marked_ids), any other counted fenced (report.fenced_ids), in acked's order.
// One UPDATE per run of consecutive ids in acked (a run [first, last] holds exactly last -
// first + 1 acked ids, so the BETWEEN touches no row outside acked): a leader's batch is
// usually one run, 1,000 rows in one statement instead of 1,000 statements. RETURNING says
// which rows a run marked when it marked fewer than its length (some were already published).
void MarkAckedUnderLease(sqlite::Connection& connection, const std::vector<std::int64_t>& acked,
                         std::int64_t now_ms, SettleReport& report) {
  std::vector<std::int64_t> sorted = acked;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::unordered_set<std::int64_t> marked;  // filled only once a run fell short
  bool all_marked = true;
  std::vector<std::int64_t> returned;
  auto run = connection.Prepare(
      "UPDATE outbox SET published = 1, published_at = ?3 "
      "WHERE id BETWEEN ?1 AND ?2 AND published = 0 RETURNING id");
  for (std::size_t begin = 0; begin < sorted.size();) {
    std::size_t end = begin + 1;
    while (end < sorted.size() && sorted[end] == sorted[end - 1] + 1) ++end;
    returned.clear();
    run.Reset();
    run.Bind(1, sorted[begin]).Bind(2, sorted[end - 1]).Bind(3, now_ms);
    while (run.Step()) returned.push_back(run.ColumnInt64(0));
    if (all_marked && returned.size() != end - begin) {
      all_marked = false;  // from here on, row by row: the runs so far were whole
      marked.insert(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(begin));
    }
    if (!all_marked) marked.insert(returned.begin(), returned.end());
    begin = end;
  }
  if (all_marked && sorted.size() == acked.size()) {  // every id once, every one marked
    report.marked += static_cast<std::int64_t>(acked.size());
    report.marked_ids.insert(report.marked_ids.end(), acked.begin(), acked.end());
    return;
  }
  if (all_marked) marked.insert(sorted.begin(), sorted.end());
  for (std::int64_t id : acked) {
    if (marked.erase(id) == 1) {  // a duplicate id is marked once, then counted fenced
      ++report.marked;
      report.marked_ids.push_back(id);
    } else {
      ++report.fenced;
      report.fenced_ids.push_back(id);
    }
  }
}

}  // namespace

SettleReport Store::SettleUnderLease(std::int64_t token, const std::vector<std::int64_t>& acked,
                                     const std::vector<FailedDelivery>& failed,
                                     const SettlePolicy& policy, std::int64_t now_ms,
                                     std::int64_t lease_ms) {
  RequirePositiveLease(lease_ms);
  return Phrased(fmt::format("settle a batch of leader term {} ({} acknowledged, {} failed)", token,
                             acked.size(), failed.size()),
                 path(), [&] {
    SettleReport report;
    sqlite::Transaction txn(connection_);
    auto renew = connection_.Prepare(
        "UPDATE outbox_lease SET until_ms = MAX(until_ms, ?2 + ?3) WHERE id = 1 AND token = ?1");
    renew.Bind(1, token).Bind(2, now_ms).Bind(3, lease_ms).Run();
    if (connection_.Changes() != 1) {
      // Another relay took over: its term's sends stand, ours are not recorded.
      report.fenced_out = true;
      for (std::int64_t id : acked) report.fenced_ids.push_back(id);
      for (const FailedDelivery& failure : failed) report.fenced_ids.push_back(failure.id);
      report.fenced = static_cast<std::int64_t>(report.fenced_ids.size());
      return report;  // the transaction rolls back: nothing written
    }
    MarkAckedUnderLease(connection_, acked, now_ms, report);
    RecordFailures(connection_, "published = 0", 0, failed, policy, now_ms, report);
    txn.Commit();
    return report;
  });
}

OutboxStatus Store::Status(std::int64_t now_ms) {
  // A read transaction: every count comes from the same snapshot.
  sqlite::ReadTransaction txn(connection_);
  OutboxStatus status;
  {
    constexpr const char* kStatusSql = R"sql(
SELECT
  COALESCE(SUM(published = 0 AND parked_at IS NULL), 0),
  MIN(CASE WHEN published = 0 AND parked_at IS NULL AND {0} THEN created_at END),
  COALESCE(SUM(published = 0 AND parked_at IS NULL AND NOT {1}), 0),
  COALESCE(SUM(published = 0 AND parked_at IS NOT NULL), 0),
  COALESCE(SUM(published = 0 AND NOT {2}), 0),
  COALESCE(SUM(published <> 0), 0)
FROM outbox
)sql";
    auto select = connection_.Prepare(
        fmt::format(kStatusSql, kCreatedAtValid, Due("", 1), Unclaimed("", 1)));
    select.Bind(1, now_ms);
    select.Step();
    status.pending = select.ColumnInt64(0);
    if (!select.ColumnIsNull(1))
      status.oldest_pending_age_ms = std::max<std::int64_t>(0, now_ms - select.ColumnInt64(1));
    status.in_backoff = select.ColumnInt64(2);
    status.parked = select.ColumnInt64(3);
    status.claimed = select.ColumnInt64(4);
    status.published = select.ColumnInt64(5);
    status.unpublished = status.pending + status.parked;
    status.archived = connection_.QueryInt64("SELECT COUNT(*) FROM outbox_archive");
  }
  {
    auto bad = connection_.Prepare(fmt::format(
        "SELECT id FROM outbox WHERE published = 0 AND NOT {} ORDER BY id", kCreatedAtValid));
    while (bad.Step()) {
      ++status.bad_created_at;
      if (status.bad_created_at_ids.size() < kBadCreatedAtIdsShown)
        status.bad_created_at_ids.push_back(bad.ColumnInt64(0));
    }
  }
  return status;
}

std::vector<Stall> Store::Stalls(std::int64_t limit) {
  auto select = connection_.Prepare(
      "SELECT id, event_id, aggregate_id, held FROM (SELECT p.id, p.event_id, p.aggregate_id, "
      "(SELECT COUNT(*) FROM outbox o WHERE o.aggregate_id = p.aggregate_id AND o.id > p.id "
      "AND o.published = 0 AND o.parked_at IS NULL) AS held FROM outbox p "
      "WHERE p.published = 0 AND p.parked_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM outbox e "
      "WHERE e.aggregate_id = p.aggregate_id AND e.id < p.id AND e.published = 0)) "
      "WHERE held > 0 ORDER BY id LIMIT ?1");
  select.Bind(1, limit);
  std::vector<Stall> stalls;
  while (select.Step())
    stalls.push_back({select.ColumnInt64(0), select.ColumnText(1), select.ColumnText(2),
                      select.ColumnInt64(3)});
  return stalls;
}

TroubledRows Store::ListTroubled(std::int64_t now_ms, std::int64_t limit) {
  if (limit <= 0) throw ConfigError(fmt::format("list parked rows: limit {}: must be at least 1", limit));
  sqlite::ReadTransaction txn(connection_);
  TroubledRows out;
  {
    auto count = connection_.Prepare(
        "SELECT COALESCE(SUM(parked_at IS NOT NULL), 0), "
        "COALESCE(SUM(parked_at IS NULL AND attempts > 0), 0) FROM outbox WHERE published = 0");
    count.Step();
    out.parked = count.ColumnInt64(0);
    out.failing = count.ColumnInt64(1);
  }
  auto select = connection_.Prepare(fmt::format(
      "SELECT id, event_id, aggregate_id, event_type, parked_at IS NOT NULL, attempts, "
      "COALESCE(last_error, ''), CASE WHEN {} THEN created_at END, next_attempt_at FROM outbox "
      "WHERE published = 0 AND (parked_at IS NOT NULL OR attempts > 0) "
      "ORDER BY parked_at IS NULL, id LIMIT ?1",
      kCreatedAtValid));
  select.Bind(1, limit);
  while (select.Step()) {
    TroubledRow row;
    row.id = select.ColumnInt64(0);
    row.event_id = select.ColumnText(1);
    row.aggregate_id = select.ColumnText(2);
    row.event_type = select.ColumnText(3);
    row.parked = select.ColumnInt64(4) != 0;
    row.attempts = select.ColumnInt64(5);
    row.last_error = select.ColumnText(6);
    if (!select.ColumnIsNull(7))
      row.age_ms = std::max<std::int64_t>(0, now_ms - select.ColumnInt64(7));
    row.next_attempt_at_ms = select.ColumnInt64(8);
    out.rows.push_back(std::move(row));
  }
  return out;
}

bool Store::Unpark(std::int64_t id) {
  return Phrased(fmt::format("unpark outbox row {}", id), path(), [&] {
    sqlite::Transaction txn(connection_);
    auto update = connection_.Prepare(
        "UPDATE outbox SET parked_at = NULL, attempts = 0, next_attempt_at = 0 "
        "WHERE id = ?1 AND published = 0 AND parked_at IS NOT NULL");
    update.Bind(1, id).Run();
    const bool changed = connection_.Changes() == 1;
    txn.Commit();
    return changed;
  });
}

std::int64_t Store::UnparkAll() {
  return Phrased(std::string("unpark every parked row"), path(), [&] {
    sqlite::Transaction txn(connection_);
    connection_.Exec(
        "UPDATE outbox SET parked_at = NULL, attempts = 0, next_attempt_at = 0 "
        "WHERE published = 0 AND parked_at IS NOT NULL");
    const std::int64_t changed = connection_.Changes();
    txn.Commit();
    return changed;
  });
}

PurgeReport Store::PurgePublished(std::int64_t cutoff_ms, std::int64_t batch_size, bool archive) {
  if (batch_size <= 0)
    throw ConfigError(fmt::format("purge batch size {}: must be at least 1", batch_size));
  PurgeReport report;
  std::int64_t committed = 0;  // rows deleted by committed batches
  try {
    const std::int64_t now_ms = clock_->EpochMs();
    auto pick = connection_.Prepare(
        "SELECT id FROM outbox WHERE published <> 0 AND COALESCE(published_at, created_at) < ?1 "
        "ORDER BY id LIMIT ?2");
    auto copy = connection_.Prepare(
        "INSERT OR REPLACE INTO outbox_archive(id, event_id, aggregate_id, event_type, payload, "
        "created_at, published_at, attempts, archived_at, headers) SELECT id, event_id, "
        "aggregate_id, event_type, payload, created_at, published_at, attempts, ?2, headers "
        "FROM outbox WHERE id = ?1");
    std::optional<sqlite::Statement> note;
    if (!archive) {
      connection_.Exec(kPurgedTable);
      note.emplace(connection_.Prepare(
          "INSERT OR IGNORE INTO outbox_purged(id, event_id, aggregate_id, purged_at) SELECT id, "
          "event_id, aggregate_id, ?2 FROM outbox WHERE id = ?1 AND published <> 0"));
    }
    auto remove = connection_.Prepare("DELETE FROM outbox WHERE id = ?1 AND published <> 0");
    for (;;) {
      sqlite::Transaction txn(connection_);
      pick.Reset();
      pick.Bind(1, cutoff_ms).Bind(2, batch_size);
      std::vector<std::int64_t> ids;
      while (pick.Step()) ids.push_back(pick.ColumnInt64(0));
      pick.Reset();
      if (ids.empty()) break;
      for (std::int64_t id : ids) {
        if (archive) {
          copy.Reset();
          copy.Bind(1, id).Bind(2, now_ms).Run();
          ++report.archived;
        } else {
          note->Reset();
          note->Bind(1, id).Bind(2, now_ms).Run();
        }
        remove.Reset();
        remove.Bind(1, id).Run();
        report.deleted += connection_.Changes();
      }
      HitFailpoint("purge.mid_batch");
      txn.Commit();
      ++report.batches;
      committed = report.deleted;
    }
    connection_.Exec("PRAGMA wal_checkpoint(TRUNCATE)");
    return report;
  } catch (const DbError& e) {
    // Say what is durable: the batches before the failing one are committed.
    throw PhrasedDbError(
        fmt::format("purge published rows in '{}': failed after {} batches of up to {} rows "
                    "({} rows deleted and committed): {} ({})",
                    path(), report.batches, batch_size, committed, e.reason(),
                    sqlite::ResultCodeName(e.code())),
        e.code(), e.reason());
  }
}

PurgeReport Store::PurgeOlderThan(std::int64_t older_than_ms, std::int64_t batch_size,
                                  bool archive) {
  if (older_than_ms < 0)
    throw ConfigError(fmt::format("purge older than {} ms: must be at least 0", older_than_ms));
  return PurgePublished(clock_->EpochMs() - older_than_ms, batch_size, archive);
}

CheckpointReport Store::CheckpointPassive() {
  int wal_frames = -1, checkpointed = -1;
  const int rc = sqlite3_wal_checkpoint_v2(connection_.get(), nullptr, SQLITE_CHECKPOINT_PASSIVE,
                                           &wal_frames, &checkpointed);
  if (rc == SQLITE_BUSY) return {true, -1, -1};
  if (rc != SQLITE_OK)
    sqlite::ThrowDbError(connection_.get(), rc, fmt::format("checkpoint '{}' (passive)", path()));
  return {false, wal_frames, checkpointed};
}

std::int64_t Store::WalSizeBytes() const {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path() + "-wal", ec);
  if (ec == std::errc::no_such_file_or_directory) return 0;
  if (ec) ThrowSystemError(fmt::format("size of '{}-wal'", path()), ec.value());
  return static_cast<std::int64_t>(size);
}

}  // namespace outbox
