#include "outbox/pg_store.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <unordered_set>

#include "outbox/failpoint.h"

namespace outbox {
namespace {

// The SQLite schema 3, in PostgreSQL's types. Times the relay compares (claim_until,
// next_attempt_at) are timestamptz of the server's clock; created_at and published_at stay epoch
// ms like SQLite's, for the checker and the reports. payload is bytea: Kafka values are bytes,
// and a text column would refuse bytes that are not UTF-8.
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
  claimed_at TIMESTAMPTZ
);
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
)sql";

// outbox_lease (relay --coordination leader, PgStore::AcquireLease): one row from the start, so
// every lease operation is an UPDATE of row 1, whose row lock serializes a takeover with the
// holder's settle. until and acquired_at are the server's clock; '-infinity' means never held
// (acquired_at) or released (until). outbox_failed_by_aggregate once served the leader's hold-back
// test (ReadPage), which now holds back behind any unpublished row, as the claim does, and reads
// outbox_pending_by_aggregate; the index stays (it holds only failed rows: no cost on writes).

// The claimable rows' condition, shared by the claim and HasClaimable. $1: block key (boolean),
// $2: the naive mode (boolean): only ids above the stored offset.
constexpr const char* kClaimableWhere = R"sql(
  NOT o.published AND o.parked_at IS NULL
    AND (NOT $2::boolean OR o.id > COALESCE((SELECT max(last_id) FROM outbox_offset), 0))
    AND o.next_attempt_at <= now() AND (o.claim_until IS NULL OR o.claim_until <= now())
    AND (NOT $1::boolean OR NOT EXISTS (
      SELECT 1 FROM outbox e WHERE e.aggregate_id = o.aggregate_id AND e.id < o.id AND NOT e.published))
)sql";

// epoch ms of a timestamptz, on the server.
constexpr const char* kEpochMsNow = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

// SKIP LOCKED passes over rows another relay's claim transaction holds right now. $1 block key,
// $2 naive mode, $3 token, $4 owner, $5 limit, $6 lease ms.
std::string ClaimSql() {
  return std::string(R"sql(
WITH picked AS (
  SELECT o.id FROM outbox o WHERE )sql") + kClaimableWhere + R"sql(
  ORDER BY o.id LIMIT $5
  FOR UPDATE SKIP LOCKED)
UPDATE outbox u SET claim_token = $3, claim_owner = $4,
  claim_until = now() + $6::bigint * interval '1 millisecond', claimed_at = now()
FROM picked WHERE u.id = picked.id
RETURNING u.id, u.event_id, u.aggregate_id, u.event_type, u.payload, u.created_at, u.attempts
)sql";
}

// With block key only the head of each aggregate (its oldest unpublished row) can be claimed. The
// id-order scan of ClaimSql tests every row it passes for an earlier unpublished row of its
// aggregate, so a backlog stalled behind failed heads costs a probe per stalled row on every
// claim (100,000 stalled rows: 1.4 s). Walking the heads instead (a loose index scan over
// outbox_pending_by_aggregate, one probe per aggregate) costs one probe per aggregate; it gives
// up after kHeadWalkCap aggregates, where the id-order scan is cheaper (most rows are heads).
// $1 token, $2 owner, $3 limit, $4 lease ms, $5 the cap. The last column of every row, and a
// single row with null id when nothing was claimed, tells whether the walk saw every aggregate.
constexpr std::int64_t kHeadWalkCap = 1000;
constexpr const char* kHeadClaimSql = R"sql(
WITH RECURSIVE heads(aggregate_id, id, n) AS (
  (SELECT aggregate_id, id, 1 FROM outbox WHERE NOT published ORDER BY aggregate_id, id LIMIT 1)
  UNION ALL
  SELECT nx.aggregate_id, nx.id, h.n + 1 FROM heads h CROSS JOIN LATERAL (
    SELECT e.aggregate_id, e.id FROM outbox e
    WHERE NOT e.published AND e.aggregate_id > h.aggregate_id
    ORDER BY e.aggregate_id, e.id LIMIT 1) nx
  WHERE h.n <= $5
), walk AS (SELECT COALESCE(max(n), 0) <= $5 AS complete FROM heads),
picked AS (
  SELECT o.id FROM outbox o
  WHERE (SELECT complete FROM walk) AND o.id IN (SELECT id FROM heads)
    AND NOT o.published AND o.parked_at IS NULL
    AND o.next_attempt_at <= now() AND (o.claim_until IS NULL OR o.claim_until <= now())
  ORDER BY o.id LIMIT $3
  FOR UPDATE OF o SKIP LOCKED),
claimed AS (
  UPDATE outbox u SET claim_token = $1, claim_owner = $2,
    claim_until = now() + $4::bigint * interval '1 millisecond', claimed_at = now()
  FROM picked WHERE u.id = picked.id
  RETURNING u.id, u.event_id, u.aggregate_id, u.event_type, u.payload, u.created_at, u.attempts)
SELECT c.id, c.event_id, c.aggregate_id, c.event_type, c.payload, c.created_at, c.attempts,
       (SELECT complete FROM walk)::int
FROM (SELECT 1) one LEFT JOIN claimed c ON true
)sql";

// HasClaimable's walk: -1 when it gave up after $1 aggregates, else 1 when a head is claimable.
constexpr const char* kHeadClaimableSql = R"sql(
WITH RECURSIVE heads(aggregate_id, id, n) AS (
  (SELECT aggregate_id, id, 1 FROM outbox WHERE NOT published ORDER BY aggregate_id, id LIMIT 1)
  UNION ALL
  SELECT nx.aggregate_id, nx.id, h.n + 1 FROM heads h CROSS JOIN LATERAL (
    SELECT e.aggregate_id, e.id FROM outbox e
    WHERE NOT e.published AND e.aggregate_id > h.aggregate_id
    ORDER BY e.aggregate_id, e.id LIMIT 1) nx
  WHERE h.n <= $1
)
SELECT CASE WHEN (SELECT COALESCE(max(n), 0) FROM heads) > $1 THEN -1
  ELSE EXISTS (SELECT 1 FROM outbox o WHERE o.id IN (SELECT id FROM heads)
    AND NOT o.published AND o.parked_at IS NULL
    AND o.next_attempt_at <= now() AND (o.claim_until IS NULL OR o.claim_until <= now()))::int END
)sql";

pg::Param Bool(bool value) { return pg::Param::Text(value ? "true" : "false"); }

// Splits acked into report's marked and fenced ids by the ids a mark's RETURNING gave back;
// an id given twice is marked once and fenced the second time.
void TallyMarks(const pg::Result& marked, const std::vector<std::int64_t>& acked,
                SettleReport& report) {
  std::unordered_set<std::int64_t> marked_ids;
  for (int i = 0; i < marked.rows(); ++i) marked_ids.insert(marked.Int(i, 0));
  for (std::int64_t id : acked) {
    if (marked_ids.erase(id) == 1) {
      ++report.marked;
      report.marked_ids.push_back(id);
    } else {
      ++report.fenced;
      report.fenced_ids.push_back(id);
    }
  }
}

// "{1,2,3}": ids as one bigint[] parameter.
pg::Param IdArray(const std::vector<std::int64_t>& ids) {
  return pg::Param::Text(fmt::format("{{{}}}", fmt::join(ids, ",")));
}

// Inside a settle's transaction: each failed delivery whose row is still this settle's gets
// attempts + 1, its error, its next attempt after BackoffMs on the server's clock, and is parked
// at max_attempts or when park_now; a row no longer ours is counted fenced. claim_token: claims
// mode, the row must still carry it; null (leader mode, the lease already checked in this
// transaction): the row must still be unpublished. One body for both settles, as on SQLite.
void RecordFailures(pg::Connection& connection, std::optional<std::int64_t> claim_token,
                    const std::vector<FailedDelivery>& failed, const SettlePolicy& policy,
                    SettleReport& report) {
  constexpr const char* kStillOurs =
      "(CASE WHEN $2::bigint IS NULL THEN NOT published ELSE claim_token = $2 END)";
  const pg::Param token = claim_token ? pg::Param::Int(*claim_token) : pg::Param::Null();
  for (const FailedDelivery& failure : failed) {
    const pg::Result owned = connection.Query(
        fmt::format("SELECT attempts FROM outbox WHERE id = $1 AND {} FOR UPDATE", kStillOurs),
        {pg::Param::Int(failure.id), token}, "read a failed row's attempts");
    if (owned.rows() == 0) {
      ++report.fenced;
      report.fenced_ids.push_back(failure.id);
      continue;
    }
    const std::int64_t attempts = owned.Int(0, 0) + 1;
    const bool park = failure.park_now || attempts >= policy.max_attempts;
    connection.Query(
        fmt::format("UPDATE outbox SET attempts = $3, last_error = $4, "
                    "next_attempt_at = now() + $5::bigint * interval '1 millisecond', "
                    "parked_at = CASE WHEN $6::boolean THEN now() END, "
                    "claim_token = NULL, claim_owner = NULL, claim_until = NULL "
                    "WHERE id = $1 AND {}",
                    kStillOurs),
        {pg::Param::Int(failure.id), token, pg::Param::Int(attempts),
         pg::Param::Text(failure.error), pg::Param::Int(BackoffMs(attempts, policy)), Bool(park)},
        "record a failed delivery");
    if (park) {
      ++report.parked;
      report.parked_ids.push_back(failure.id);
    } else {
      ++report.retried;
    }
  }
}

OutboxRow ReadRow(const pg::Result& rows, int i) {
  OutboxRow row;
  row.id = rows.Int(i, 0);
  row.event.event_id = rows.Text(i, 1);
  row.event.aggregate_id = rows.Text(i, 2);
  row.event.event_type = rows.Text(i, 3);
  row.event.payload = rows.Bytes(i, 4);
  row.event.created_at_ms = rows.Int(i, 5);
  return row;
}

}  // namespace

PgStore::PgStore(const std::string& url, Clock* clock, PgClaimMode mode)
    : url_(url), clock_(clock ? clock : &system_clock_), mode_(mode), connection_(url) {
  Migrate();
}

void PgStore::Reconnect() { connection_ = pg::Connection(url_); }

bool PgStore::ConnectionLost(const std::exception& e) const noexcept {
  const auto* pg_error = dynamic_cast<const pg::PgError*>(&e);
  return pg_error != nullptr && pg_error->connection_lost();
}

pg::Transaction PgStore::BeginRead() {
  return pg::Transaction(connection_, pg::Isolation::kRepeatableRead);
}

bool PgStore::SchemaCurrent() {
  return connection_.QueryInt(
             "SELECT (to_regclass('outbox') IS NOT NULL AND to_regclass('outbox_archive') IS NOT NULL "
             "AND to_regclass('outbox_fence') IS NOT NULL AND to_regclass('outbox_run') IS NOT NULL "
             "AND to_regclass('outbox_offset') IS NOT NULL AND to_regclass('outbox_lease') IS NOT NULL "
             "AND to_regclass('outbox_failed_by_aggregate') IS NOT NULL "
             "AND to_regclass('outbox_purged') IS NOT NULL "
             "AND to_regclass('outbox_broker') IS NOT NULL)::int",
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

ResetCounts PgStore::ResetSchema() {
  // The schema lock before the drop: a reset that could not take it after dropping would leave
  // no schema behind.
  LockMigration();
  try {
    ResetCounts counts = ResetLocked();
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

ResetCounts PgStore::ResetLocked() {
  ResetCounts counts;
  {
    pg::Transaction txn(connection_);
    // What the drop removes, counted in its own transaction (as Store::ResetSchema does).
    const auto exists = [this](const char* table) {
      return connection_.QueryInt(
                 "SELECT (to_regclass($1) IS NOT NULL)::int", {pg::Param::Text(table)},
                 "look for a table") == 1;
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
    connection_.Exec("DROP TABLE IF EXISTS outbox_archive; DROP TABLE IF EXISTS outbox_purged; "
                     "DROP TABLE IF EXISTS outbox_broker; DROP TABLE IF EXISTS outbox_partitioning; "
                     "DROP TABLE IF EXISTS outbox; "
                     "DROP SEQUENCE IF EXISTS outbox_fence; DROP TABLE IF EXISTS outbox_run; "
                     "DROP TABLE IF EXISTS outbox_offset;",
                     "drop the outbox schema");
    // The lease row stays, so the fencing token keeps growing across runs (a relay of the last
    // run still holding token N can never settle under a new term that restarted at N); its
    // current term ends, as ReleaseLease ends one.
    if (exists("outbox_lease"))
      connection_.Query("UPDATE outbox_lease SET until = '-infinity' WHERE id = 1", {},
                        "end the leader's term");
    txn.Commit();
  }
  connection_.Exec(kSchema, "create the outbox schema");
  // The run id is the server's: epoch ms and 32 random bits, as on SQLite.
  connection_.Exec(
      "INSERT INTO outbox_run(run_id) SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint "
      "|| '-' || lpad(to_hex(floor(random() * 4294967296)::bigint), 8, '0')",
      "start a new run");
  return counts;
}

std::optional<HorizonHolder> PgStore::OldestHorizonHolder(std::int64_t threshold_ms) {
  const pg::Result rows = connection_.Query(
      "SELECT a.pid, COALESCE(a.application_name, ''), COALESCE(a.state, ''), "
      "COALESCE(a.datname::text, ''), greatest(age(a.backend_xmin), age(a.backend_xid)), "
      "(extract(epoch FROM now() - a.xact_start) * 1000)::bigint, "
      "COALESCE((SELECT n_dead_tup FROM pg_stat_user_tables "
      "          WHERE relid = to_regclass('outbox')), 0) "
      "FROM pg_stat_activity a "
      "WHERE (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL) "
      "AND a.pid <> pg_backend_pid() AND a.xact_start IS NOT NULL "
      // Only this database's sessions hold back the horizon of its tables (PostgreSQL 14+).
      "AND a.datname = current_database() "
      "AND now() - a.xact_start >= $1::bigint * interval '1 millisecond' "
      "ORDER BY greatest(age(a.backend_xmin), age(a.backend_xid)) DESC, a.xact_start LIMIT 1",
      {pg::Param::Int(threshold_ms)}, "look for the oldest transaction holding the horizon");
  if (rows.rows() == 0) return std::nullopt;
  HorizonHolder holder;
  holder.pid = static_cast<int>(rows.Int(0, 0));
  holder.application_name = rows.Text(0, 1);
  holder.state = rows.Text(0, 2);
  holder.database = rows.Text(0, 3);
  holder.xmin_age = rows.Int(0, 4);
  holder.transaction_age_ms = rows.Int(0, 5);
  holder.outbox_dead_tuples = rows.Int(0, 6);
  return holder;
}

std::int64_t PgStore::Enqueue(pg::Transaction& txn, const OutboxEvent& event) {
  if (event.aggregate_id.empty()) throw ConfigError(EmptyAggregateMessage(event.event_id));
  const pg::Param created_at =
      event.created_at_ms == 0 ? pg::Param::Null() : pg::Param::Int(event.created_at_ms);
  return txn.connection().QueryInt(
      "INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at) "
      "VALUES($1, $2, $3, $4, COALESCE($5::bigint, "
      "(extract(epoch FROM clock_timestamp()) * 1000)::bigint)) RETURNING id",
      {pg::Param::Text(event.event_id), pg::Param::Text(event.aggregate_id),
       pg::Param::Text(event.event_type), pg::Param::Bytes(event.payload), created_at},
      fmt::format("enqueue event '{}'", event.event_id));
}

Claim PgStore::ClaimBatch(const ClaimRequest& request, PgClaimMode mode) {
  Claim claim;
  const bool naive = mode == PgClaimMode::kNaiveCursor;
  pg::Transaction txn(connection_);
  claim.token = connection_.QueryInt("SELECT nextval('outbox_fence')", {}, "take a fencing token");
  std::vector<std::pair<OutboxRow, std::int64_t>> claimed;
  bool walked = false;  // the heads walk saw every aggregate: its claim is the whole answer
  if (request.block_key && !naive) {
    const pg::Result heads = connection_.Query(
        kHeadClaimSql,
        {pg::Param::Int(claim.token), pg::Param::Text(request.owner),
         pg::Param::Int(request.limit), pg::Param::Int(request.lease_ms),
         pg::Param::Int(kHeadWalkCap)},
        "claim a batch");
    walked = heads.rows() > 0 && heads.Int(0, 7) == 1;
    for (int i = 0; i < heads.rows(); ++i)
      if (!heads.IsNull(i, 0)) claimed.emplace_back(ReadRow(heads, i), heads.Int(i, 6));
  }
  if (!walked) {
    pg::Result rows = connection_.Query(
        ClaimSql(),
        {Bool(request.block_key), Bool(naive), pg::Param::Int(claim.token),
         pg::Param::Text(request.owner), pg::Param::Int(request.limit),
         pg::Param::Int(request.lease_ms)},
        "claim a batch");
    for (int i = 0; i < rows.rows(); ++i) claimed.emplace_back(ReadRow(rows, i), rows.Int(i, 6));
  }
  // RETURNING keeps no order.
  std::sort(claimed.begin(), claimed.end(),
            [](const auto& a, const auto& b) { return a.first.id < b.first.id; });
  if (naive && !claimed.empty()) {
    // The naive relay's position moves past what it has read, in the claim's transaction.
    connection_.Query("DELETE FROM outbox_offset", {}, "move the naive offset");
    connection_.Query("INSERT INTO outbox_offset(last_id) VALUES($1)",
                      {pg::Param::Int(claimed.back().first.id)}, "move the naive offset");
  }
  txn.Commit();
  for (auto& [row, attempts] : claimed) {
    claim.rows.push_back(std::move(row));
    claim.attempts.push_back(attempts);
  }
  return claim;
}

bool PgStore::HasClaimable(const ClaimRequest& request) {
  if (request.block_key && mode_ == PgClaimMode::kScan) {
    const std::int64_t walked =
        connection_.QueryInt(kHeadClaimableSql, {pg::Param::Int(kHeadWalkCap)},
                             "look for claimable rows");
    if (walked >= 0) return walked == 1;
  }
  return connection_.QueryInt(std::string("SELECT EXISTS (SELECT 1 FROM outbox o WHERE ") +
                                  kClaimableWhere + ")::int",
                              {Bool(request.block_key), Bool(mode_ == PgClaimMode::kNaiveCursor)},
                              "look for claimable rows") == 1;
}

SettleReport PgStore::SettleBatch(std::int64_t token, const std::vector<std::int64_t>& acked,
                                  const std::vector<FailedDelivery>& failed,
                                  const SettlePolicy& policy) {
  SettleReport report;
  pg::Transaction txn(connection_);
  if (!acked.empty()) {
    // One statement for the batch, not one round trip per row (bench: relay on PostgreSQL 2,146
    // events/s with an UPDATE per row). The token is checked per row as before: a row another
    // relay took over carries its token, stays unmarked here and is reported fenced.
    const pg::Result marked = connection_.Query(
        std::string("UPDATE outbox SET published = true, published_at = ") + kEpochMsNow +
            ", claim_token = NULL, claim_owner = NULL, claim_until = NULL "
            "WHERE id = ANY($1::bigint[]) AND claim_token = $2 AND NOT published RETURNING id",
        {IdArray(acked), pg::Param::Int(token)}, "mark a claimed batch published");
    // Fenced: claimed by another relay since, or published already.
    TallyMarks(marked, acked, report);
  }
  RecordFailures(connection_, token, failed, policy, report);
  txn.Commit();
  return report;
}

OutboxCounts PgStore::Count() {
  const pg::Result counts = connection_.Query(
      "SELECT COUNT(*), COUNT(*) FILTER (WHERE published), COUNT(*) FILTER (WHERE NOT published) "
      "FROM outbox",
      {}, "count the outbox");
  return OutboxCounts{counts.Int(0, 0), counts.Int(0, 1), counts.Int(0, 2)};
}

std::string PgStore::RunId() {
  const pg::Result run = connection_.Query("SELECT run_id FROM outbox_run LIMIT 1", {}, "read the run id");
  return run.rows() == 0 ? std::string() : run.Text(0, 0);
}

std::int64_t PgStore::NextId() {
  // last_value is the last id handed out once is_called; before the first nextval it is the first.
  return connection_.QueryInt(
      "SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM outbox_id_seq", {},
      "read the next outbox id");
}

void PgStore::NoteBrokerIncarnation(const std::string& incarnation) {
  connection_.Query(std::string("INSERT INTO outbox_broker(incarnation, noted_at) VALUES ($1, ") +
                        kEpochMsNow + ") ON CONFLICT (incarnation) DO NOTHING",
                    {pg::Param::Text(incarnation)}, "note the broker incarnation");
}

void PgStore::NotePartitionMapping(const PartitionMapping& mapping) {
  // Not part of SchemaCurrent's tables: created on first use (IF NOT EXISTS takes no lock on any
  // outbox table), dropped by a reset, as outbox_partitioning is on SQLite.
  // Two relays starting together may both create it: the loser's unique violation on the
  // catalog (23505) or duplicate table (42P07) means the table is there.
  if (connection_.QueryInt("SELECT (to_regclass('outbox_partitioning') IS NULL)::int", {},
                           "look for the partition mapping") == 1) {
    try {
      connection_.Exec(
          "CREATE TABLE IF NOT EXISTS outbox_partitioning (topic TEXT PRIMARY KEY, "
          "partitioner TEXT NOT NULL, partitions INTEGER NOT NULL, noted_at BIGINT NOT NULL)",
          "create the partition mapping table");
    } catch (const pg::PgError& e) {
      if (e.sqlstate() != "23505" && e.sqlstate() != "42P07") throw;
    }
  }
  connection_.Query(
      std::string("INSERT INTO outbox_partitioning(topic, partitioner, partitions, noted_at) "
                  "VALUES ($1, $2, $3, ") +
          kEpochMsNow +
          ") ON CONFLICT (topic) DO UPDATE SET partitioner = excluded.partitioner, "
          "partitions = excluded.partitions, noted_at = excluded.noted_at",
      {pg::Param::Text(mapping.topic), pg::Param::Text(mapping.partitioner),
       pg::Param::Int(mapping.partitions)},
      "note the partition mapping");
}

std::optional<PartitionMapping> PgStore::ReadPartitionMapping(const std::string& topic) {
  if (connection_.QueryInt("SELECT (to_regclass('outbox_partitioning') IS NOT NULL)::int", {},
                           "look for the partition mapping") == 0)
    return std::nullopt;
  const pg::Result rows = connection_.Query(
      "SELECT partitioner, partitions, noted_at FROM outbox_partitioning WHERE topic = $1",
      {pg::Param::Text(topic)}, "read the partition mapping");
  if (rows.rows() == 0) return std::nullopt;
  return PartitionMapping{topic, rows.Text(0, 0), static_cast<std::int32_t>(rows.Int(0, 1)),
                          rows.Int(0, 2)};
}

std::vector<std::string> PgStore::BrokerIncarnations() {
  const pg::Result rows = connection_.Query(
      "SELECT incarnation FROM outbox_broker ORDER BY noted_at, incarnation", {},
      "read the broker incarnations");
  std::vector<std::string> incarnations;
  for (int i = 0; i < rows.rows(); ++i) incarnations.push_back(rows.Text(i, 0));
  return incarnations;
}

OutboxSnapshot PgStore::Snapshot() {
  pg::Transaction txn = BeginRead();
  OutboxSnapshot snapshot = Snapshot(txn);
  txn.Commit();
  return snapshot;
}

OutboxSnapshot PgStore::Snapshot(pg::Transaction& txn) {
  // A row at or below the naive offset counts as published: that is what the naive relay's
  // offset claims (PgClaimMode::kNaiveCursor). Without a naive relay there is no offset row.
  const pg::Result rows = txn.connection().Query(
      "SELECT id, event_id, aggregate_id, "
      "(published OR id <= COALESCE((SELECT max(last_id) FROM outbox_offset), 0))::int, "
      "(parked_at IS NOT NULL)::int, 0 FROM outbox "
      "UNION ALL SELECT id, event_id, aggregate_id, 1, 0, 1 FROM outbox_archive "
      "UNION ALL SELECT id, event_id, aggregate_id, 1, 0, 2 FROM outbox_purged ORDER BY 1",
      {}, "read the outbox snapshot");
  OutboxSnapshot snapshot;
  for (int i = 0; i < rows.rows(); ++i) {
    SnapshotRow row;
    row.id = rows.Int(i, 0);
    row.event_id = rows.Text(i, 1);
    row.aggregate_id = rows.Text(i, 2);
    row.published = rows.Int(i, 3) == 1;
    row.parked = !row.published && rows.Int(i, 4) == 1;
    row.archived = rows.Int(i, 5) != 0;
    row.purged = rows.Int(i, 5) == 2;
    snapshot.rows.push_back(std::move(row));
  }
  return snapshot;
}

std::vector<OutboxRow> PgStore::FetchUnpublished(std::int64_t after_id, std::int64_t limit) {
  const pg::Result rows = connection_.Query(
      "SELECT id, event_id, aggregate_id, event_type, payload, created_at FROM outbox "
      "WHERE NOT published AND id > $1 ORDER BY id LIMIT $2",
      {pg::Param::Int(after_id), pg::Param::Int(limit)}, "read unpublished rows");
  std::vector<OutboxRow> out;
  for (int i = 0; i < rows.rows(); ++i) out.push_back(ReadRow(rows, i));
  return out;
}

bool PgStore::MarkPublished(std::int64_t id) {
  return connection_
             .Query(std::string("UPDATE outbox SET published = true, published_at = ") + kEpochMsNow +
                        " WHERE id = $1 AND NOT published",
                    {pg::Param::Int(id)}, "mark a row published")
             .Affected() == 1;
}

std::int64_t PgStore::WaitingCount(std::int64_t /*now_ms*/) {
  return connection_.QueryInt(
      "SELECT COUNT(*) FROM outbox WHERE NOT published AND parked_at IS NULL "
      "AND (next_attempt_at > now() OR claim_until > now())",
      {}, "count waiting rows");
}

std::int64_t PgStore::PendingCount() {
  return connection_.QueryInt("SELECT COUNT(*) FROM outbox WHERE NOT published AND parked_at IS NULL",
                              {}, "count pending rows");
}

BackoffWait PgStore::Backoffs(std::int64_t now_ms) {
  // The wait left on the server's clock, moved into the caller's (as LeaderLease's times are), so
  // a relay whose clock is off still says when the first retry is due.
  const pg::Result row = connection_.Query(
      "SELECT COUNT(*), (extract(epoch FROM min(next_attempt_at) - now()) * 1000)::bigint "
      "FROM outbox WHERE NOT published AND parked_at IS NULL AND next_attempt_at > now() "
      "AND (claim_until IS NULL OR claim_until <= now())",
      {}, "read the backoffs");
  const std::int64_t rows = row.Int(0, 0);
  return BackoffWait{rows, rows == 0 || row.IsNull(0, 1) ? 0 : now_ms + row.Int(0, 1)};
}

std::vector<ClaimOwner> PgStore::ClaimOwners(std::int64_t /*now_ms*/) {
  const pg::Result rows = connection_.Query(
      "SELECT claim_owner, COUNT(*), "
      "GREATEST(0, (extract(epoch FROM now() - min(claimed_at)) * 1000)::bigint), "
      "GREATEST(0, (extract(epoch FROM max(claim_until) - now()) * 1000)::bigint), "
      "max(claim_token) FROM outbox WHERE NOT published AND claim_until > now() "
      "GROUP BY claim_owner ORDER BY claim_owner",
      {}, "read the claim owners");
  std::vector<ClaimOwner> owners;
  for (int i = 0; i < rows.rows(); ++i)
    owners.push_back({rows.Text(i, 0), rows.Int(i, 1), rows.Int(i, 2), rows.Int(i, 3), rows.Int(i, 4)});
  return owners;
}

std::int64_t PgStore::ReleaseClaimsOf(const std::string& owner, std::int64_t up_to_token) {
  return connection_
      .Query("UPDATE outbox SET claim_token = NULL, claim_owner = NULL, claim_until = NULL "
             "WHERE claim_owner = $1 AND claim_token <= $2 AND NOT published",
             {pg::Param::Text(owner), pg::Param::Int(up_to_token)}, "release a dead relay's claims")
      .Affected();
}

// --- The operator's commands: parked, unpark, purge ---

std::vector<Stall> PgStore::Stalls(std::int64_t limit) {
  const pg::Result rows = connection_.Query(
      "SELECT id, event_id, aggregate_id, held FROM (SELECT p.id, p.event_id, p.aggregate_id, "
      "(SELECT COUNT(*) FROM outbox o WHERE o.aggregate_id = p.aggregate_id AND o.id > p.id "
      "AND NOT o.published AND o.parked_at IS NULL) AS held FROM outbox p "
      "WHERE NOT p.published AND p.parked_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM outbox e "
      "WHERE e.aggregate_id = p.aggregate_id AND e.id < p.id AND NOT e.published)) s "
      "WHERE held > 0 ORDER BY id LIMIT $1",
      {pg::Param::Int(limit)}, "read the stalled aggregates");
  std::vector<Stall> stalls;
  for (int i = 0; i < rows.rows(); ++i)
    stalls.push_back({rows.Int(i, 0), rows.Text(i, 1), rows.Text(i, 2), rows.Int(i, 3)});
  return stalls;
}

TroubledRows PgStore::ListTroubled(std::int64_t now_ms, std::int64_t limit) {
  if (limit <= 0)
    throw ConfigError(fmt::format("list parked rows: limit {}: must be at least 1", limit));
  TroubledRows out;
  pg::Transaction txn = BeginRead();  // the counts and the rows of one snapshot
  const pg::Result counts = connection_.Query(
      "SELECT COUNT(*) FILTER (WHERE parked_at IS NOT NULL), "
      "COUNT(*) FILTER (WHERE parked_at IS NULL AND attempts > 0) FROM outbox WHERE NOT published",
      {}, "count the parked rows");
  out.parked = counts.Int(0, 0);
  out.failing = counts.Int(0, 1);
  // next_attempt_at is '-infinity' for a row never failed or unparked: no wait, 0.
  const pg::Result rows = connection_.Query(
      "SELECT id, event_id, aggregate_id, event_type, (parked_at IS NOT NULL)::int, attempts, "
      "COALESCE(last_error, ''), "
      "GREATEST(0, (extract(epoch FROM now()) * 1000)::bigint - created_at), "
      "CASE WHEN isfinite(next_attempt_at) "
      "THEN (extract(epoch FROM next_attempt_at - now()) * 1000)::bigint ELSE 0 END "
      "FROM outbox WHERE NOT published AND (parked_at IS NOT NULL OR attempts > 0) "
      "ORDER BY parked_at IS NULL, id LIMIT $1",
      {pg::Param::Int(limit)}, "list the parked rows");
  txn.Commit();
  for (int i = 0; i < rows.rows(); ++i) {
    TroubledRow row;
    row.id = rows.Int(i, 0);
    row.event_id = rows.Text(i, 1);
    row.aggregate_id = rows.Text(i, 2);
    row.event_type = rows.Text(i, 3);
    row.parked = rows.Int(i, 4) == 1;
    row.attempts = rows.Int(i, 5);
    row.last_error = rows.Text(i, 6);
    row.age_ms = rows.Int(i, 7);
    row.next_attempt_at_ms = now_ms + rows.Int(i, 8);
    out.rows.push_back(std::move(row));
  }
  return out;
}

namespace {

// A parked row made claimable at once: '-infinity' is the column's default, "never failed".
constexpr const char* kUnparkSet =
    "UPDATE outbox SET parked_at = NULL, attempts = 0, next_attempt_at = '-infinity' "
    "WHERE NOT published AND parked_at IS NOT NULL";

// One purge batch in one statement: the oldest batch ($2) published rows before the cutoff ($1,
// epoch ms), deleted; with $3 copied to the archive first (the same statement, so the same
// transaction), marked published there, archived_at ($4, epoch ms). Returns the rows deleted and
// archived.
constexpr const char* kPurgeBatchSql = R"sql(
WITH picked AS (
  SELECT id FROM outbox WHERE published AND COALESCE(published_at, created_at) < $1
  ORDER BY id LIMIT $2),
gone AS (
  DELETE FROM outbox o USING picked WHERE o.id = picked.id AND o.published
  RETURNING o.id, o.event_id, o.aggregate_id, o.event_type, o.payload, o.created_at,
            o.published_at, o.attempts, o.last_error),
kept AS (
  INSERT INTO outbox_archive(id, event_id, aggregate_id, event_type, payload, created_at,
                             published, published_at, attempts, last_error, archived_at)
  SELECT id, event_id, aggregate_id, event_type, payload, created_at, true, published_at,
         attempts, last_error, $4 FROM gone WHERE $3::boolean
  RETURNING 1),
noted AS (
  INSERT INTO outbox_purged(id, event_id, aggregate_id, purged_at)
  SELECT id, event_id, aggregate_id, $4 FROM gone WHERE NOT $3::boolean
  ON CONFLICT (id) DO NOTHING
  RETURNING 1)
SELECT (SELECT COUNT(*) FROM gone), (SELECT COUNT(*) FROM kept), (SELECT COUNT(*) FROM noted)
)sql";

}  // namespace

bool PgStore::Unpark(std::int64_t id) {
  return connection_
             .Query(std::string(kUnparkSet) + " AND id = $1", {pg::Param::Int(id)},
                    fmt::format("unpark outbox row {}", id))
             .Affected() == 1;
}

std::int64_t PgStore::UnparkAll() {
  return connection_.Query(kUnparkSet, {}, "unpark every parked row").Affected();
}

PurgeReport PgStore::PurgeOlderThan(std::int64_t older_than_ms, std::int64_t batch_size,
                                    bool archive) {
  if (older_than_ms < 0)
    throw ConfigError(fmt::format("purge older than {} ms: must be at least 0", older_than_ms));
  if (batch_size <= 0)
    throw ConfigError(fmt::format("purge batch size {}: must be at least 1", batch_size));
  PurgeReport report;
  std::int64_t committed = 0;  // rows deleted by committed batches
  try {
    // bigint arithmetic on the server: now - older_than cannot overflow for any older_than >= 0.
    const pg::Result times = connection_.Query(
        std::string("SELECT ") + kEpochMsNow + " - $1::bigint, " + kEpochMsNow,
        {pg::Param::Int(older_than_ms)}, "read the purge cutoff");
    const std::int64_t cutoff_ms = times.Int(0, 0);
    const std::int64_t archived_at_ms = times.Int(0, 1);
    for (;;) {
      pg::Transaction txn(connection_);
      const pg::Result batch = connection_.Query(
          kPurgeBatchSql,
          {pg::Param::Int(cutoff_ms), pg::Param::Int(batch_size), Bool(archive),
           pg::Param::Int(archived_at_ms)},
          "purge a batch of published rows");
      const std::int64_t deleted = batch.Int(0, 0);
      if (deleted == 0) break;  // the destructor ends the empty transaction
      report.deleted += deleted;
      report.archived += batch.Int(0, 1);
      HitFailpoint("purge.mid_batch");
      txn.Commit();
      ++report.batches;
      committed = report.deleted;
    }
    return report;
  } catch (const pg::PgError& e) {
    // Say what is durable: the batches before the failing one are committed.
    throw pg::PgError(fmt::format("purge published rows on '{}': failed after {} batches of up "
                                  "to {} rows ({} rows deleted and committed): {}",
                                  connection_.display_url(), report.batches, batch_size,
                                  committed, e.what()),
                      e.sqlstate());
  }
}

OutboxStatus PgStore::Status(std::int64_t /*now_ms*/) {
  pg::Transaction txn = BeginRead();
  const pg::Result row = connection_.Query(
      std::string("SELECT COUNT(*) FILTER (WHERE NOT published), "
                  "COUNT(*) FILTER (WHERE NOT published AND parked_at IS NULL), "
                  "COALESCE(GREATEST(0, ") + kEpochMsNow +
          " - min(created_at) FILTER (WHERE NOT published AND parked_at IS NULL)), 0), "
          "COUNT(*) FILTER (WHERE NOT published AND parked_at IS NULL AND next_attempt_at > now()), "
          "COUNT(*) FILTER (WHERE NOT published AND parked_at IS NOT NULL), "
          "COUNT(*) FILTER (WHERE NOT published AND claim_until > now()), "
          "COUNT(*) FILTER (WHERE published), "
          "(SELECT COUNT(*) FROM outbox_archive) FROM outbox",
      {}, "read the outbox status");
  txn.Commit();
  OutboxStatus status;
  status.unpublished = row.Int(0, 0);
  status.pending = row.Int(0, 1);
  status.oldest_pending_age_ms = row.Int(0, 2);
  status.in_backoff = row.Int(0, 3);
  status.parked = row.Int(0, 4);
  status.claimed = row.Int(0, 5);
  status.published = row.Int(0, 6);
  status.archived = row.Int(0, 7);
  return status;
}

// --- Leader mode (relay --coordination leader) on the server's clock ---

namespace {

void RequirePositiveLease(std::int64_t lease_ms) {
  if (lease_ms <= 0) throw ConfigError(fmt::format("lease {} ms: must be positive", lease_ms));
}

// The lease row judged on the server's clock: owner, token, ms left until it runs out (NULL once
// released), ms since its term began (NULL before the first term).
constexpr const char* kLeaseSelect =
    "SELECT owner, token, "
    "CASE WHEN isfinite(until) THEN (extract(epoch FROM until - now()) * 1000)::bigint END, "
    "CASE WHEN isfinite(acquired_at) "
    "THEN (extract(epoch FROM now() - acquired_at) * 1000)::bigint END "
    "FROM outbox_lease WHERE id = 1";

// The row of kLeaseSelect with its times moved into the caller's clock: until_ms = now_ms + the
// time the server says is left, so lease.Live(now_ms) is the server's verdict whatever the
// caller's clock says.
LeaderLease LeaseAt(const pg::Result& row, std::int64_t now_ms) {
  LeaderLease lease;
  if (row.rows() == 0) return lease;
  lease.owner = row.Text(0, 0);
  lease.token = row.Int(0, 1);
  lease.until_ms = row.IsNull(0, 2) ? 0 : now_ms + row.Int(0, 2);
  lease.acquired_at_ms = row.IsNull(0, 3) ? 0 : now_ms - row.Int(0, 3);
  return lease;
}

// Extends term token's lease to the server's now() + lease_ms, never shortening it. Returns
// false (nothing written) when token is no longer the lease's token.
bool ExtendLease(pg::Connection& connection, std::int64_t token, std::int64_t lease_ms) {
  return connection
             .Query("UPDATE outbox_lease "
                    "SET until = GREATEST(until, now() + $2::bigint * interval '1 millisecond') "
                    "WHERE id = 1 AND token = $1",
                    {pg::Param::Int(token), pg::Param::Int(lease_ms)}, "renew the leader lease")
             .Affected() == 1;
}

}  // namespace

LeaderLease PgStore::ReadLease() {
  return LeaseAt(connection_.Query(kLeaseSelect, {}, "read the leader lease"), clock_->EpochMs());
}

LeaseAcquisition PgStore::AcquireLease(const std::string& owner, std::int64_t lease_ms,
                                       std::int64_t now_ms) {
  RequirePositiveLease(lease_ms);
  LeaseAcquisition out;
  out.previous = LeaseAt(connection_.Query(kLeaseSelect, {}, "read the leader lease"), now_ms);
  out.lease = out.previous;
  if (out.previous.Live(now_ms)) return out;  // a standby's poll writes nothing, locks nothing
  pg::Transaction txn(connection_);
  // Again under the row lock: of two relays that saw the lease free, the second reads the
  // first's new term here and stands by.
  out.previous = LeaseAt(connection_.Query(std::string(kLeaseSelect) + " FOR UPDATE", {},
                                           "lock the leader lease"),
                         now_ms);
  out.lease = out.previous;
  if (out.previous.Live(now_ms)) return out;  // rolled back by txn's destructor
  const std::int64_t token = connection_.QueryInt(
      "UPDATE outbox_lease SET owner = $1, token = token + 1, "
      "until = now() + $2::bigint * interval '1 millisecond', acquired_at = now() "
      "WHERE id = 1 RETURNING token",
      {pg::Param::Text(owner), pg::Param::Int(lease_ms)},
      fmt::format("acquire the leader lease for {}", owner));
  txn.Commit();
  out.lease = {owner, token, now_ms + lease_ms, now_ms};
  out.acquired = true;
  return out;
}

bool PgStore::RenewLease(std::int64_t token, std::int64_t lease_ms, std::int64_t /*now_ms*/) {
  RequirePositiveLease(lease_ms);
  return ExtendLease(connection_, token, lease_ms);
}

bool PgStore::ReleaseLease(std::int64_t token) {
  return connection_
             .Query("UPDATE outbox_lease SET until = '-infinity' WHERE id = 1 AND token = $1",
                    {pg::Param::Int(token)}, "release the leader lease")
             .Affected() == 1;
}

std::vector<OutboxRow> PgStore::ReadPage(const PageRequest& request) {
  // Claims of a claims-mode relay are respected, so a leader never sends what such a relay holds.
  const pg::Result rows = connection_.Query(
      "SELECT o.id, o.event_id, o.aggregate_id, o.event_type, o.payload, o.created_at "
      "FROM outbox o WHERE NOT o.published AND o.id > $1 AND o.id <= $2 AND o.parked_at IS NULL "
      "AND o.next_attempt_at <= now() AND (o.claim_until IS NULL OR o.claim_until <= now()) "
      "AND (NOT $3::boolean OR NOT EXISTS (SELECT 1 FROM outbox e WHERE e.aggregate_id = "
      "o.aggregate_id AND e.id < o.id AND NOT e.published)) "
      "ORDER BY o.id LIMIT $4",
      {pg::Param::Int(request.after_id),
       pg::Param::Int(request.up_to_id > 0 ? request.up_to_id
                                           : std::numeric_limits<std::int64_t>::max()),
       Bool(request.block_key), pg::Param::Int(request.limit)},
      "read a leader's page");
  std::vector<OutboxRow> out;
  for (int i = 0; i < rows.rows(); ++i) out.push_back(ReadRow(rows, i));
  return out;
}

SettleReport PgStore::SettleUnderLease(std::int64_t token, const std::vector<std::int64_t>& acked,
                                       const std::vector<FailedDelivery>& failed,
                                       const SettlePolicy& policy, std::int64_t /*now_ms*/,
                                       std::int64_t lease_ms) {
  RequirePositiveLease(lease_ms);
  SettleReport report;
  pg::Transaction txn(connection_);
  // The token check and the renewal in one UPDATE: it holds the lease row's lock until the
  // commit, so no takeover (AcquireLease locks the same row) can fall between check and marks.
  if (!ExtendLease(connection_, token, lease_ms)) {
    // Another relay took over: its term's sends stand, ours are not recorded.
    report.fenced_out = true;
    for (std::int64_t id : acked) report.fenced_ids.push_back(id);
    for (const FailedDelivery& failure : failed) report.fenced_ids.push_back(failure.id);
    report.fenced = static_cast<std::int64_t>(report.fenced_ids.size());
    return report;  // txn's destructor rolls back: nothing written
  }
  if (!acked.empty()) {
    const pg::Result marked = connection_.Query(
        std::string("UPDATE outbox SET published = true, published_at = ") + kEpochMsNow +
            " WHERE id = ANY($1::bigint[]) AND NOT published RETURNING id",
        {IdArray(acked)}, "mark a leader's batch published");
    TallyMarks(marked, acked, report);  // fenced: published already (by another writer)
  }
  RecordFailures(connection_, std::nullopt, failed, policy, report);
  txn.Commit();
  return report;
}

}  // namespace outbox
