// Store's broker-outage record (OutboxStore::NoteOutage, ClearOutage, ReadOutage): one row of
// table outbox_outage, created on first use and keyed to the run, so a reset (a new run id)
// hides an older run's record without dropping the table.
#include <fmt/format.h>

#include "outbox/error.h"
#include "outbox/sqlite/connection.h"
#include "outbox/store.h"

namespace outbox {
namespace {

constexpr const char* kOutageTable =
    "CREATE TABLE IF NOT EXISTS outbox_outage (id INTEGER PRIMARY KEY CHECK (id = 1), "
    "run_id TEXT NOT NULL, since INTEGER NOT NULL, cause TEXT NOT NULL, owner TEXT NOT NULL, "
    "noted_at INTEGER NOT NULL, retry_at INTEGER NOT NULL)";

// "<what> in 'F': <SQLite's words> (NAME)", code kept: the relay retries by code.
template <typename Op>
auto Phrase(const std::string& what, const std::string& path, Op&& op) -> decltype(op()) {
  try {
    return op();
  } catch (const DbError& e) {
    throw DbError(fmt::format("{} in '{}': {} ({})", what, path, e.reason(),
                              sqlite::ResultCodeName(e.code())),
                  e.code(), e.reason());
  }
}

bool HasOutageTable(sqlite::Connection& connection) {
  return connection.QueryInt64("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND "
                               "name = 'outbox_outage'") == 1;
}

}  // namespace

void Store::NoteOutage(const BrokerOutage& outage) {
  const std::string run_id = RunId();
  Phrase("note the broker outage", path(), [&] {
    sqlite::Transaction txn(connection_);
    connection_.Exec(kOutageTable);
    // Another run's row is replaced whole; this run's keeps its start.
    auto upsert = connection_.Prepare(
        "INSERT INTO outbox_outage(id, run_id, since, cause, owner, noted_at, retry_at) "
        "VALUES(1, ?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(id) DO UPDATE SET "
        "since = CASE WHEN run_id = excluded.run_id THEN since ELSE excluded.since END, "
        "run_id = excluded.run_id, cause = excluded.cause, owner = excluded.owner, "
        "noted_at = excluded.noted_at, retry_at = excluded.retry_at");
    upsert.Bind(1, run_id)
        .Bind(2, outage.since_ms)
        .Bind(3, outage.cause)
        .Bind(4, outage.owner)
        .Bind(5, outage.noted_at_ms)
        .Bind(6, outage.retry_at_ms)
        .Run();
    txn.Commit();
    return 0;
  });
}

bool Store::ClearOutage() {
  return Phrase("clear the broker outage", path(), [&] {
    if (!HasOutageTable(connection_)) return false;
    sqlite::Transaction txn(connection_);
    connection_.Exec("DELETE FROM outbox_outage");
    const bool cleared = connection_.Changes() > 0;
    txn.Commit();
    return cleared;
  });
}

std::optional<BrokerOutage> Store::ReadOutage() {
  return Phrase("read the broker outage", path(), [&]() -> std::optional<BrokerOutage> {
    if (!HasOutageTable(connection_)) return std::nullopt;
    auto select = connection_.Prepare(
        "SELECT since, cause, owner, noted_at, retry_at FROM outbox_outage "
        "WHERE id = 1 AND run_id = ?1");
    select.Bind(1, RunId());
    if (!select.Step()) return std::nullopt;
    return BrokerOutage{select.ColumnInt64(0), select.ColumnText(1), select.ColumnText(2),
                        select.ColumnInt64(3), select.ColumnInt64(4)};
  });
}

}  // namespace outbox
