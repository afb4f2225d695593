#include "outbox/store.h"

#include <fmt/format.h>

#include <filesystem>
#include <system_error>

#include "outbox/error.h"

namespace outbox {
namespace {

constexpr const char* kOutboxSchema = R"sql(
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

const char* SynchronousPragma(Synchronous s) {
  switch (s) {
    case Synchronous::kOff: return "PRAGMA synchronous=OFF";
    case Synchronous::kNormal: return "PRAGMA synchronous=NORMAL";
    case Synchronous::kFull: return "PRAGMA synchronous=FULL";
    case Synchronous::kExtra: return "PRAGMA synchronous=EXTRA";
  }
  return "PRAGMA synchronous=FULL";
}

int OpenFlags(OpenMode mode) {
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
  if (mode == OpenMode::kCreate) flags |= SQLITE_OPEN_CREATE;
  return flags;
}

// Runs before the connection exists, so the missing-file case never creates one.
const std::string& CheckPath(const std::string& path, OpenMode mode) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (mode == OpenMode::kExisting) {
    if (!fs::exists(path, ec))
      throw SchemaMissingError(
          fmt::format("open database '{}': no such file; run `outbox-lab reset` first", path));
    return path;
  }
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty() && !fs::create_directories(parent, ec) && ec)
    throw DbError(fmt::format("create directory '{}': {}", parent.string(), ec.message()),
                  SQLITE_CANTOPEN);
  return path;
}

}  // namespace

Synchronous ParseSynchronous(const std::string& text) {
  if (text == "off") return Synchronous::kOff;
  if (text == "normal") return Synchronous::kNormal;
  if (text == "full") return Synchronous::kFull;
  if (text == "extra") return Synchronous::kExtra;
  throw ConfigError(fmt::format("synchronous '{}': expected off, normal, full or extra", text));
}

Store::Store(const std::string& path, const StoreOptions& options, OpenMode mode)
    : connection_(CheckPath(path, mode), OpenFlags(mode)) {
  connection_.SetBusyTimeout(options.busy_timeout_ms);
  // Read the schema before any pragma that writes (journal_mode=WAL does), so
  // a file without our schema is left exactly as it was.
  if (mode == OpenMode::kExisting && !HasSchema())
    throw SchemaMissingError(fmt::format(
        "open database '{}': no outbox table; run `outbox-lab reset` first", path));
  connection_.Exec("PRAGMA journal_mode=WAL");
  connection_.Exec(SynchronousPragma(options.synchronous));
}

bool Store::HasSchema() {
  return connection_.QueryInt64(
             "SELECT COUNT(*) FROM sqlite_master WHERE type='table' AND name='outbox'") == 1;
}

void Store::ResetSchema() {
  sqlite::Transaction txn(connection_);
  connection_.Exec("DROP TABLE IF EXISTS outbox");
  connection_.Exec(kOutboxSchema);
  txn.Commit();
}

std::int64_t Store::Enqueue(const OutboxEvent& event) {
  auto insert = connection_.Prepare(
      "INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at) "
      "VALUES(?1, ?2, ?3, ?4, ?5)");
  insert.Bind(1, event.event_id)
      .Bind(2, event.aggregate_id)
      .Bind(3, event.event_type)
      .Bind(4, event.payload)
      .Bind(5, event.created_at_ms);
  insert.Run();
  return sqlite3_last_insert_rowid(connection_.get());
}

std::vector<OutboxRow> Store::FetchUnpublished(std::int64_t after_id, std::int64_t limit) {
  auto select = connection_.Prepare(
      "SELECT id, event_id, aggregate_id, event_type, payload, created_at FROM outbox "
      "WHERE published = 0 AND id > ?1 ORDER BY id LIMIT ?2");
  select.Bind(1, after_id).Bind(2, limit);
  std::vector<OutboxRow> rows;
  while (select.Step()) {
    OutboxRow row;
    row.id = select.ColumnInt64(0);
    row.event.event_id = select.ColumnText(1);
    row.event.aggregate_id = select.ColumnText(2);
    row.event.event_type = select.ColumnText(3);
    row.event.payload = select.ColumnText(4);
    row.event.created_at_ms = select.ColumnInt64(5);
    rows.push_back(std::move(row));
  }
  return rows;
}

bool Store::MarkPublished(std::int64_t id) {
  sqlite::Transaction txn(connection_);
  auto update = connection_.Prepare("UPDATE outbox SET published = 1 WHERE id = ?1 AND published = 0");
  update.Bind(1, id).Run();
  const bool changed = sqlite3_changes(connection_.get()) == 1;
  txn.Commit();
  return changed;
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

}  // namespace outbox
