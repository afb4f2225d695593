// PgStore's broker-outage record (OutboxStore::NoteOutage, ClearOutage, ReadOutage): one row of
// table outbox_outage, created on first use and keyed to the run (outbox_run), so a reset
// hides an older run's record. Not part of SchemaCurrent's tables: CREATE TABLE IF NOT EXISTS
// takes no lock on any outbox table.
#include "outbox/pg/connection.h"
#include "outbox/pg_store.h"

namespace outbox {
namespace {

bool HasOutageTable(pg::Connection& connection) {
  return connection.QueryInt("SELECT (to_regclass('outbox_outage') IS NOT NULL)::int", {},
                             "look for the broker outage") == 1;
}

}  // namespace

void PgStore::NoteOutage(const BrokerOutage& outage) {
  if (!HasOutageTable(connection_)) {
    // Two relays may create it at once: the loser's unique violation on the catalog (23505) or
    // duplicate table (42P07) means the table is there.
    try {
      connection_.Exec(
          "CREATE TABLE IF NOT EXISTS outbox_outage (id INTEGER PRIMARY KEY CHECK (id = 1), "
          "run_id TEXT NOT NULL, since BIGINT NOT NULL, cause TEXT NOT NULL, owner TEXT NOT NULL, "
          "noted_at BIGINT NOT NULL, retry_at BIGINT NOT NULL)",
          "create the broker outage table");
    } catch (const pg::PgError& e) {
      if (e.sqlstate() != "23505" && e.sqlstate() != "42P07") throw;
    }
  }
  // Another run's row is replaced whole; this run's keeps its start.
  connection_.Query(
      "INSERT INTO outbox_outage AS o(id, run_id, since, cause, owner, noted_at, retry_at) "
      "VALUES (1, COALESCE((SELECT run_id FROM outbox_run LIMIT 1), ''), $1, $2, $3, $4, $5) "
      "ON CONFLICT (id) DO UPDATE SET "
      "since = CASE WHEN o.run_id = excluded.run_id THEN o.since ELSE excluded.since END, "
      "run_id = excluded.run_id, cause = excluded.cause, owner = excluded.owner, "
      "noted_at = excluded.noted_at, retry_at = excluded.retry_at",
      {pg::Param::Int(outage.since_ms), pg::Param::Text(outage.cause),
       pg::Param::Text(outage.owner), pg::Param::Int(outage.noted_at_ms),
       pg::Param::Int(outage.retry_at_ms)},
      "note the broker outage");
}

bool PgStore::ClearOutage() {
  if (!HasOutageTable(connection_)) return false;
  return connection_.QueryInt(
             "WITH gone AS (DELETE FROM outbox_outage RETURNING 1) SELECT COUNT(*) FROM gone", {},
             "clear the broker outage") > 0;
}

std::optional<BrokerOutage> PgStore::ReadOutage() {
  if (!HasOutageTable(connection_)) return std::nullopt;
  const pg::Result rows = connection_.Query(
      "SELECT since, cause, owner, noted_at, retry_at FROM outbox_outage WHERE id = 1 AND "
      "run_id = COALESCE((SELECT run_id FROM outbox_run LIMIT 1), '')",
      {}, "read the broker outage");
  if (rows.rows() == 0) return std::nullopt;
  return BrokerOutage{rows.Int(0, 0), rows.Text(0, 1), rows.Text(0, 2), rows.Int(0, 3),
                      rows.Int(0, 4)};
}

}  // namespace outbox
