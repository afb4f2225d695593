#include "outbox/pg_store.h"

#include <fmt/format.h>

#include <algorithm>

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
  aggregate_id TEXT NOT NULL,
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
)sql";

// Claimable: unpublished, not parked, backoff over, no live lease; with $3 (block key) only the
// oldest unpublished row of its aggregate (a parked row blocks its aggregate, as on SQLite).
// SKIP LOCKED passes over rows another relay's claim transaction holds right now.
constexpr const char* kClaimSql = R"sql(
WITH picked AS (
  SELECT o.id FROM outbox o
  WHERE NOT o.published AND o.parked_at IS NULL AND o.id > $4
    AND o.next_attempt_at <= now() AND (o.claim_until IS NULL OR o.claim_until <= now())
    AND (NOT $3::boolean OR NOT EXISTS (
      SELECT 1 FROM outbox e WHERE e.aggregate_id = o.aggregate_id AND e.id < o.id AND NOT e.published))
  ORDER BY o.id LIMIT $5
  FOR UPDATE SKIP LOCKED)
UPDATE outbox u SET claim_token = $1, claim_owner = $2,
  claim_until = now() + $6::bigint * interval '1 millisecond', claimed_at = now()
FROM picked WHERE u.id = picked.id
RETURNING u.id, u.event_id, u.aggregate_id, u.event_type, u.payload, u.created_at, u.attempts
)sql";

}  // namespace

PgStore::PgStore(const std::string& url) : connection_(url) { Migrate(); }

bool PgStore::SchemaCurrent() {
  return connection_.QueryInt(
             "SELECT (to_regclass('outbox') IS NOT NULL AND to_regclass('outbox_archive') IS NOT NULL "
             "AND to_regclass('outbox_fence') IS NOT NULL)::int",
             {}, "read the outbox schema") == 1;
}

void PgStore::Migrate() {
  // Even CREATE INDEX IF NOT EXISTS takes a SHARE lock on the table before it looks, and so waits
  // behind every open write transaction: a relay starting beside busy writers would stall. So the
  // DDL runs only when a table is missing.
  if (SchemaCurrent()) return;
  // A session-level advisory lock: held until the unlock below (or the connection's end, should
  // this process die here), so a second process waits instead of racing the CREATEs.
  connection_.Query("SELECT pg_advisory_lock($1)", {pg::Param::Int(kMigrationLockKey)},
                    "lock the schema for migration");
  try {
    if (!SchemaCurrent()) connection_.Exec(kSchema, "create the outbox schema");
  } catch (...) {
    connection_.Query("SELECT pg_advisory_unlock($1)", {pg::Param::Int(kMigrationLockKey)},
                      "unlock the schema");
    throw;
  }
  connection_.Query("SELECT pg_advisory_unlock($1)", {pg::Param::Int(kMigrationLockKey)},
                    "unlock the schema");
}

void PgStore::ResetSchema() {
  {
    pg::Transaction txn(connection_);
    connection_.Exec("DROP TABLE IF EXISTS outbox_archive; DROP TABLE IF EXISTS outbox; "
                     "DROP SEQUENCE IF EXISTS outbox_fence;",
                     "drop the outbox schema");
    txn.Commit();
  }
  Migrate();
  naive_cursor_ = 0;
}

std::int64_t PgStore::Enqueue(pg::Transaction& txn, const OutboxEvent& event) {
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
  pg::Transaction txn(connection_);
  claim.token = connection_.QueryInt("SELECT nextval('outbox_fence')", {}, "take a fencing token");
  const std::int64_t after_id = mode == PgClaimMode::kNaiveCursor ? naive_cursor_ : 0;
  pg::Result rows = connection_.Query(
      kClaimSql,
      {pg::Param::Int(claim.token), pg::Param::Text(request.owner),
       pg::Param::Text(request.block_key ? "true" : "false"), pg::Param::Int(after_id),
       pg::Param::Int(request.limit), pg::Param::Int(request.lease_ms)},
      "claim a batch");
  txn.Commit();
  std::vector<std::pair<OutboxRow, std::int64_t>> claimed;
  for (int i = 0; i < rows.rows(); ++i) {
    OutboxRow row;
    row.id = rows.Int(i, 0);
    row.event.event_id = rows.Text(i, 1);
    row.event.aggregate_id = rows.Text(i, 2);
    row.event.event_type = rows.Text(i, 3);
    row.event.payload = rows.Bytes(i, 4);
    row.event.created_at_ms = rows.Int(i, 5);
    claimed.emplace_back(std::move(row), rows.Int(i, 6));
  }
  // RETURNING keeps no order.
  std::sort(claimed.begin(), claimed.end(),
            [](const auto& a, const auto& b) { return a.first.id < b.first.id; });
  for (auto& [row, attempts] : claimed) {
    if (mode == PgClaimMode::kNaiveCursor) naive_cursor_ = std::max(naive_cursor_, row.id);
    claim.rows.push_back(std::move(row));
    claim.attempts.push_back(attempts);
  }
  return claim;
}

SettleReport PgStore::SettleBatch(std::int64_t token, const std::vector<std::int64_t>& acked,
                                  const std::vector<FailedDelivery>& failed,
                                  const SettlePolicy& policy) {
  SettleReport report;
  pg::Transaction txn(connection_);
  for (std::int64_t id : acked) {
    const pg::Result marked = connection_.Query(
        "UPDATE outbox SET published = true, "
        "published_at = (extract(epoch FROM clock_timestamp()) * 1000)::bigint, "
        "claim_token = NULL, claim_owner = NULL, claim_until = NULL "
        "WHERE id = $1 AND claim_token = $2",
        {pg::Param::Int(id), pg::Param::Int(token)}, "mark a row published");
    if (marked.Affected() == 1) {
      ++report.marked;
      report.marked_ids.push_back(id);
    } else {
      ++report.fenced;
      report.fenced_ids.push_back(id);
    }
  }
  for (const FailedDelivery& failure : failed) {
    const pg::Result owned = connection_.Query(
        "SELECT attempts FROM outbox WHERE id = $1 AND claim_token = $2 FOR UPDATE",
        {pg::Param::Int(failure.id), pg::Param::Int(token)}, "read a failed row's attempts");
    if (owned.rows() == 0) {
      ++report.fenced;
      report.fenced_ids.push_back(failure.id);
      continue;
    }
    const std::int64_t attempts = owned.Int(0, 0) + 1;
    const bool park = attempts >= policy.max_attempts;
    connection_.Query(
        "UPDATE outbox SET attempts = $3, last_error = $4, "
        "next_attempt_at = now() + $5::bigint * interval '1 millisecond', "
        "parked_at = CASE WHEN $6::boolean THEN now() END, "
        "claim_token = NULL, claim_owner = NULL, claim_until = NULL "
        "WHERE id = $1 AND claim_token = $2",
        {pg::Param::Int(failure.id), pg::Param::Int(token), pg::Param::Int(attempts),
         pg::Param::Text(failure.error), pg::Param::Int(BackoffMs(attempts, policy)),
         pg::Param::Text(park ? "true" : "false")},
        "record a failed delivery");
    if (park) {
      ++report.parked;
      report.parked_ids.push_back(failure.id);
    } else {
      ++report.retried;
    }
  }
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

}  // namespace outbox
