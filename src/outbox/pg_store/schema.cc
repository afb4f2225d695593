// PgStore: the schema, its creation under the advisory schema lock, and reset.
#include "outbox/pg_store.h"

#include <fmt/format.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "outbox/lease.h"

#include "internal.h"

namespace outbox {

using namespace pg_store;  // this folder's shared helpers (internal.h)

namespace {

// The SQLite schema 3, in PostgreSQL's types. Times the relay compares (claim_until,
// next_attempt_at) are timestamptz of the server's clock; created_at and published_at stay epoch
// ms like SQLite's, for the checker and the reports. payload is bytea: Kafka values are bytes,
// and a text column would refuse bytes that are not UTF-8.
// fillfactor 50: half of each heap page is left free when rows are inserted, so that a claim
// (which changes no indexed column, nor one an index's WHERE reads) can be a HOT update, its new
// row version on the same page and no index touched
// (https://www.postgresql.org/docs/15/storage-hot.html). At the default 100 a backlog's pages
// are full and every claim writes an entry into each of the table's indexes. Draining 200,000
// rows in claims mode: 43,800/s at 100, 48,400/s at 70, 51,500/s at 50 (medians of 3,
// docs/postgresql.md); a leader (which claims nothing) drained at the same rate. The price:
// a backlog takes about twice the heap pages. A table created before this keeps its own
// setting (ALTER TABLE outbox SET (fillfactor = 50) applies to pages filled after it).
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS outbox (
  id BIGSERIAL PRIMARY KEY,
  event_id TEXT NOT NULL UNIQUE,
  aggregate_id TEXT NOT NULL CONSTRAINT outbox_aggregate_id_not_empty CHECK (aggregate_id <> ''),
  event_type TEXT NOT NULL,
  payload BYTEA NOT NULL,
  created_at BIGINT NOT NULL DEFAULT (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
  published BOOLEAN NOT NULL DEFAULT false,
  published_at BIGINT,
  attempts INTEGER NOT NULL DEFAULT 0,
  last_error TEXT,
  next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT '-infinity',
  parked_at TIMESTAMPTZ,
  claim_token BIGINT,
  claim_owner TEXT,
  claim_until TIMESTAMPTZ,
  claimed_at TIMESTAMPTZ,
  not_before BIGINT,
  headers TEXT
) WITH (fillfactor = 50);
CREATE INDEX IF NOT EXISTS outbox_unpublished ON outbox(id) WHERE NOT published;
CREATE INDEX IF NOT EXISTS outbox_pending_by_aggregate ON outbox(aggregate_id, id) WHERE NOT published;
CREATE SEQUENCE IF NOT EXISTS outbox_fence;
CREATE TABLE IF NOT EXISTS outbox_archive (LIKE outbox INCLUDING DEFAULTS, archived_at BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS outbox_run (run_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS outbox_purged (
  id BIGINT PRIMARY KEY, event_id TEXT NOT NULL, aggregate_id TEXT NOT NULL,
  purged_at BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS outbox_broker (
  incarnation TEXT PRIMARY KEY, noted_at BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS outbox_offset (last_id BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS outbox_lease (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  owner TEXT NOT NULL,
  token BIGINT NOT NULL,
  until TIMESTAMPTZ NOT NULL,
  acquired_at TIMESTAMPTZ NOT NULL
);
INSERT INTO outbox_lease(id, owner, token, until, acquired_at)
  VALUES (1, '', 0, '-infinity', '-infinity') ON CONFLICT (id) DO NOTHING;
CREATE INDEX IF NOT EXISTS outbox_failed_by_aggregate ON outbox(aggregate_id, id)
  WHERE NOT published AND attempts > 0;
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS not_before BIGINT;
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS headers TEXT;
ALTER TABLE outbox_archive ADD COLUMN IF NOT EXISTS headers TEXT;
ALTER TABLE outbox_purged ADD COLUMN IF NOT EXISTS event_type TEXT;
)sql";

// not_before (delayed publish, OutboxEvent::not_before_ms): epoch ms, compared with the server's
// clock (now()), nullable, with no CHECK: a foreign writer's NULL, negative or absurd value must
// never fail its INSERT, and the relay reads each as "due now" (internal.h, kDelayedSql). A
// database created before the column gets it from the ALTER above, which Migrate runs because
// SchemaCurrent looks for the column; a nullable column without a default rewrites no row. An
// older database's outbox_archive does not get it: a purge archives named columns, not this one.

// headers (the application's record headers, OutboxEvent::headers, SQLite's schema 4 column): a
// JSON object of string values as the writer gave it, nullable, with no CHECK: a foreign writer's
// bad value must never fail its INSERT; the relay parses it when it sends the row and parks a bad
// one with the reason (record_headers.h). TEXT, not jsonb: jsonb would refuse bad JSON at the
// INSERT and reorder the object's keys, and the headers are sent in the writer's order. An older
// database gets it from the ALTERs above, on outbox and on outbox_archive (a purge archives it).

// outbox_purged.event_type (nullable; NULL for rows purged before it existed): the types of the
// events a purge without --archive removed, so that check and verify under --topic-template still
// read their topics (EventTypes) and do not call those events lost.

// outbox_lease (relay --coordination leader, PgStore::AcquireLease): one row from the start, so
// every lease operation is an UPDATE of row 1, whose row lock serializes a takeover with the
// holder's settle. until and acquired_at are the server's clock; '-infinity' means never held
// (acquired_at) or released (until). outbox_failed_by_aggregate once served the leader's hold-back
// test (ReadPage), which now holds back behind any unpublished row, as the claim does, and reads
// outbox_pending_by_aggregate; the index stays (it holds only failed rows: no cost on writes).

}  // namespace

bool PgStore::SchemaCurrent() {
  return connection_.QueryInt(
             "SELECT (to_regclass('outbox') IS NOT NULL AND to_regclass('outbox_archive') IS NOT NULL "
             "AND to_regclass('outbox_fence') IS NOT NULL AND to_regclass('outbox_run') IS NOT NULL "
             "AND to_regclass('outbox_offset') IS NOT NULL AND to_regclass('outbox_lease') IS NOT NULL "
             "AND to_regclass('outbox_failed_by_aggregate') IS NOT NULL "
             "AND to_regclass('outbox_purged') IS NOT NULL "
             "AND to_regclass('outbox_broker') IS NOT NULL "
             "AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('outbox') "
             "AND attname = 'not_before' AND NOT attisdropped) "
             "AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('outbox') "
             "AND attname = 'headers' AND NOT attisdropped) "
             "AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('outbox_archive') "
             "AND attname = 'headers' AND NOT attisdropped) "
             "AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('outbox_purged') "
             "AND attname = 'event_type' AND NOT attisdropped))::int",
             {}, "read the outbox schema") == 1;
}

void PgStore::Migrate() {
  // Even CREATE INDEX IF NOT EXISTS takes a SHARE lock on the table before it looks, and so waits
  // behind every open write transaction: a relay starting beside busy writers would stall. So the
  // DDL runs only when a table is missing.
  if (SchemaCurrent()) return;
  // A session-level advisory lock: held until the unlock below (or the connection's end, should
  // this process die here), so a second process waits instead of racing the CREATEs.
  LockMigration();
  try {
    if (!SchemaCurrent()) connection_.Exec(kSchema, "create the outbox schema");
  } catch (...) {
    UnlockMigration();
    throw;
  }
  UnlockMigration();
}

std::string PgStore::MigrationLockHolder() {
  // A bigint advisory key sits in pg_locks as classid = its high 32 bits, objid = its low 32
  // bits, objsubid = 1 (https://www.postgresql.org/docs/15/view-pg-locks.html).
  const pg::Result holders = connection_.Query(
      "SELECT l.pid, COALESCE(a.application_name, ''), COALESCE(a.state, ''), "
      "COALESCE(extract(epoch FROM now() - a.state_change)::bigint, -1) "
      "FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
      "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
      "AND l.classid::bigint = ($1::bigint >> 32) AND l.objid::bigint = ($1::bigint & 4294967295) "
      "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
      "AND l.pid <> pg_backend_pid() ORDER BY l.pid LIMIT 1",
      {pg::Param::Int(kMigrationLockKey)}, "look for the schema lock's holder");
  if (holders.rows() == 0) return "";
  const std::string pid = holders.Text(0, 0);
  const std::string app = holders.Text(0, 1);
  const std::string state = holders.Text(0, 2);
  const std::int64_t state_s = holders.Int(0, 3);
  std::string who = fmt::format("PID {}", pid);
  if (!app.empty()) who += fmt::format(" application_name '{}'", app);
  if (!state.empty()) who += fmt::format(" state '{}'", state);
  if (state_s >= 0) who += fmt::format(" for {} s", state_s);
  return fmt::format("{}; end that session or run `SELECT pg_terminate_backend({})`", who, pid);
}

void PgStore::LockMigration() {
  // Bounded: the session's lock_timeout when the URL sets one, else kMigrationLockWaitMs. An
  // unbounded pg_advisory_lock behind a session that forgot its lock hangs reset without a word.
  const std::string previous =
      connection_.Query("SELECT current_setting('lock_timeout')", {}, "read lock_timeout")
          .Text(0, 0);
  const bool bounded_already = previous != "0";
  if (!bounded_already)
    connection_.Query("SELECT set_config('lock_timeout', $1, false)",
                      {pg::Param::Text(fmt::format("{}ms", kMigrationLockWaitMs))},
                      "bound the wait for the schema lock");
  const std::string waited = bounded_already ? previous : fmt::format("{}ms", kMigrationLockWaitMs);
  try {
    connection_.Query("SELECT pg_advisory_lock($1)", {pg::Param::Int(kMigrationLockKey)},
                      "lock the schema for migration");
  } catch (const pg::PgError& e) {
    if (e.sqlstate() != "55P03") throw;
    if (!bounded_already)
      connection_.Query("SELECT set_config('lock_timeout', '0', false)", {},
                        "restore lock_timeout");
    const std::string holder = MigrationLockHolder();
    throw pg::PgError(
        fmt::format("lock the schema for migration: advisory lock {} (pg_advisory_lock key, "
                    "\"outbox\") not granted within lock_timeout {}: held by {}",
                    kMigrationLockKey, waited,
                    holder.empty() ? std::string("a session that has released it since (retry)")
                                   : holder),
        "55P03");
  }
  if (!bounded_already)
    connection_.Query("SELECT set_config('lock_timeout', '0', false)", {},
                      "restore lock_timeout");
}

ResetCounts PgStore::ResetSchema(const std::function<void(pg::Connection&)>& also) {
  // The schema lock before the drop: a reset that could not take it after dropping would leave
  // no schema behind.
  LockMigration();
  try {
    ResetCounts counts = ResetLocked(also);
    UnlockMigration();
    return counts;
  } catch (...) {
    UnlockMigration();
    throw;
  }
}

void PgStore::UnlockMigration() {
  connection_.Query("SELECT pg_advisory_unlock($1)", {pg::Param::Int(kMigrationLockKey)},
                    "unlock the schema");
}

ResetCounts PgStore::ResetLocked(const std::function<void(pg::Connection&)>& also) {
  ResetCounts counts;
  // ONE transaction: the counts, the drop, the new term and the new schema and run commit
  // together, so another session (a relay, a writer) never finds the tables missing. Its
  // statement that queued behind the drop's lock runs after the commit on the new tables: the
  // server looks the names up again once the lock is granted, and replans a prepared statement
  // whose tables changed (https://www.postgresql.org/docs/15/sql-prepare.html, Notes). Dropped
  // and created in two transactions, such a statement fell between them on `relation "outbox"
  // does not exist` and the relay ended with exit 6.
  pg::Transaction txn(connection_);
  // First: a writer locks its business table before the outbox (one transaction), and this
  // transaction must take them in the same order, or each would wait for the other (a
  // deadlock the server ends by failing one of them).
  if (also) also(connection_);
  // What the drop removes, counted in its transaction (as Store::ResetSchema does).
  const auto exists = [this](const char* table) {
    return connection_.QueryInt("SELECT (to_regclass($1) IS NOT NULL)::int",
                                {pg::Param::Text(table)}, "look for a table") == 1;
  };
  if (exists("outbox")) {
    counts.outbox_rows =
        connection_.QueryInt("SELECT COUNT(*) FROM outbox", {}, "count the outbox rows");
    // The lab's table has a boolean published column; a table of another design may not.
    counts.lab_table =
        connection_.QueryInt(
            "SELECT COUNT(*) FROM pg_attribute WHERE attrelid = to_regclass('outbox') "
            "AND attname = 'published' AND atttypid = 'boolean'::regtype AND NOT attisdropped",
            {}, "look at the outbox table") == 1;
    if (counts.lab_table)
      counts.published = connection_.QueryInt("SELECT COUNT(*) FROM outbox WHERE published", {},
                                              "count the published rows");
  }
  if (exists("outbox_archive"))
    counts.archived = connection_.QueryInt("SELECT COUNT(*) FROM outbox_archive", {},
                                           "count the archived rows");
  // outbox_fence stays, as the lease row does: the ids start again at 1 in the new outbox, and a
  // claim token the sequence gave before the reset is never given again, so a relay that claimed
  // rows of the old outbox and settles after the reset (its claim's token on its UPDATE) can match
  // no row of the new one, whatever its id.
  // The publications that list the outbox or its run table by name (FOR TABLE; one FOR ALL
  // TABLES or FOR TABLES IN SCHEMA gets the new tables by itself). The DROP takes the tables out
  // of them, and pgoutput streams an insert only when its table was in the publication at the
  // insert's commit: re-added later, as a restarted WAL relay did, the rows written meanwhile
  // never reach its slot. So each gets the new tables back here, in this transaction, and the
  // new run's first row is in its stream; so is the run id inserted below, which tells a WAL
  // relay at which commit the new run begins.
  // Read under a lock that keeps the list still until the commit: CREATE and ALTER PUBLICATION
  // take SHARE UPDATE EXCLUSIVE on each table they add, as this does (it conflicts with itself,
  // not with the writers' ROW EXCLUSIVE). Read unlocked, a WAL relay starting on a fresh slot
  // could create its publication on the old tables between this read and the DROP: the DROP
  // then took them out, nothing added the new ones back, and the relay streamed nothing of the
  // new run (scenarios/pg-wal-reset-new-publication.sh). Now such a CREATE waits for the commit
  // and finds the new tables by name (the server looks a name up again once its lock is given).
  for (const char* table : {"outbox", "outbox_run"})
    if (exists(table))
      connection_.Exec(fmt::format("LOCK TABLE {} IN SHARE UPDATE EXCLUSIVE MODE", table),
                       "lock the outbox's publications");
  std::vector<std::pair<std::string, std::string>> listed;  // publication, table
  const pg::Result publications = connection_.Query(
      "SELECT p.pubname, c.relname FROM pg_publication p JOIN pg_publication_rel r ON "
      "r.prpubid = p.oid JOIN pg_class c ON c.oid = r.prrelid WHERE r.prrelid IN "
      "(to_regclass('outbox'), to_regclass('outbox_run')) ORDER BY 1, 2",
      {}, "read the publications of the outbox");
  for (int i = 0; i < publications.rows(); ++i)
    listed.emplace_back(publications.Text(i, 0), publications.Text(i, 1));
  connection_.Exec("DROP TABLE IF EXISTS outbox_archive; DROP TABLE IF EXISTS outbox_purged; "
                   "DROP TABLE IF EXISTS outbox_broker; DROP TABLE IF EXISTS outbox_partitioning; "
                   "DROP TABLE IF EXISTS outbox; DROP TABLE IF EXISTS outbox_run; "
                   "DROP TABLE IF EXISTS outbox_offset; "
                   "DROP TABLE IF EXISTS outbox_wal_unstreamed;",
                   "drop the outbox schema");
  // The lease row stays, so the fencing token keeps growing across runs. The term held now ends,
  // and its token with it (token + 1, a term nobody holds): a leader that read a page of the old
  // outbox settles by its token alone, and the new outbox reuses the ids, so without the step its
  // late settle would mark the new rows of those ids published, never sent. Now it is fenced out
  // and takes a new term.
  if (exists("outbox_lease"))
    connection_.Query(
        "UPDATE outbox_lease SET until = '-infinity', token = token + 1, owner = $1 "
        "WHERE id = 1 AND token > 0",
        {pg::Param::Text(kResetLeaseOwner)}, "end the leader's term");
  connection_.Exec(kSchema, "create the outbox schema");
  for (const auto& [publication, table] : listed)
    connection_.Exec(fmt::format("ALTER PUBLICATION {} ADD TABLE {}",
                                 connection_.QuoteIdentifier(publication),
                                 connection_.QuoteIdentifier(table)),
                     "add the new outbox to its publication");
  // The run id is the server's: epoch ms and 32 random bits, as on SQLite.
  connection_.Exec(
      "INSERT INTO outbox_run(run_id) SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint "
      "|| '-' || lpad(to_hex(floor(random() * 4294967296)::bigint), 8, '0')",
      "start a new run");
  txn.Commit();
  return counts;
}

}  // namespace outbox
