// PgStore: reading the outbox for operators and the checker: status, parked and stalled rows,
// unpark, snapshots, counts, and the oldest transaction holding back VACUUM.
#include "outbox/pg_store.h"

#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "outbox/error.h"

#include "internal.h"

namespace outbox {

using namespace pg_store;  // this folder's shared helpers (internal.h)

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

OutboxCounts PgStore::Count() {
  const pg::Result counts = connection_.Query(
      "SELECT COUNT(*), COUNT(*) FILTER (WHERE published), COUNT(*) FILTER (WHERE NOT published) "
      "FROM outbox",
      {}, "count the outbox");
  return OutboxCounts{counts.Int(0, 0), counts.Int(0, 1), counts.Int(0, 2)};
}

std::vector<std::string> PgStore::EventTypes() {
  const pg::Result rows = connection_.Query(
      "SELECT t FROM (SELECT event_type AS t FROM outbox UNION "
      "SELECT event_type FROM outbox_archive UNION "
      "SELECT event_type FROM outbox_purged WHERE event_type IS NOT NULL) AS types "
      "ORDER BY t COLLATE \"C\"",
      {}, "read the outbox's event types");
  std::vector<std::string> types;
  for (int i = 0; i < rows.rows(); ++i) types.push_back(rows.Text(i, 0));
  return types;
}

OutboxSnapshot PgStore::Snapshot() {
  pg::Transaction txn = BeginRead();
  OutboxSnapshot snapshot = Snapshot(txn);
  txn.Commit();
  return snapshot;
}

OutboxSnapshot PgStore::Snapshot(pg::Transaction& txn) {
  // A row at or below the naive offset counts as published: that is what the naive relay's
  // offset claims (PgClaimMode::kNaiveCursor). Without a naive relay there is no offset row, and
  // no row counts (not "at or below 0": a foreign writer's ids may be 0 or below).
  const pg::Result rows = txn.connection().Query(
      "SELECT id, event_id, aggregate_id, "
      "(published OR COALESCE(id <= (SELECT max(last_id) FROM outbox_offset), false))::int, "
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

BackoffWait PgStore::Backoffs(std::int64_t now_ms) {
  // The wait left on the server's clock, moved into the caller's (as LeaderLease's times are), so
  // a relay whose clock is off still says when the first retry is due.
  const pg::Result row = connection_.Query(
      "SELECT COUNT(*), (extract(epoch FROM min(next_attempt_at) - now()) * 1000)::bigint "
      "FROM outbox WHERE NOT published AND parked_at IS NULL AND " + InBackoff("") + " AND " +
          Unclaimed(""),
      {}, "read the backoffs");
  const std::int64_t rows = row.Int(0, 0);
  return BackoffWait{rows, rows == 0 || row.IsNull(0, 1) ? 0 : now_ms + row.Int(0, 1)};
}

// --- The operator's commands: parked, unpark ---

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
      "CASE WHEN " + std::string(kCreatedAtValid) +
          " THEN GREATEST(0, (extract(epoch FROM now()) * 1000)::bigint - created_at) ELSE 0 END, "
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

OutboxStatus PgStore::Status(std::int64_t /*now_ms*/) {
  // As on SQLite (Store::Status): delayed rows apart from pending, the rows held behind an
  // aggregate's first delayed row out of the oldest age, and a row's age from when it became due
  // (first_delayed and gate, as there).
  const std::string pending = "NOT published AND parked_at IS NULL AND " + NotDelayed("");
  pg::Transaction txn = BeginRead();
  const pg::Result row = connection_.Query(
      fmt::format(
          "WITH first_delayed AS (SELECT aggregate_id AS delayed_aggregate, min(id) AS delayed_id "
          "FROM outbox WHERE NOT published AND parked_at IS NULL AND {2} GROUP BY aggregate_id), "
          "gate AS (SELECT aggregate_id AS gate_aggregate, min(id) AS gate_id, "
          "max(not_before) AS gate_at FROM outbox WHERE NOT published AND parked_at IS NULL "
          "AND not_before <= (extract(epoch FROM now()) * 1000)::bigint GROUP BY aggregate_id) "
          "SELECT COUNT(*) FILTER (WHERE NOT published), "
          "COUNT(*) FILTER (WHERE {1}), "
          "COALESCE(GREATEST(0, {0} - min(CASE WHEN id >= gate_id AND gate_at > created_at "
          "THEN gate_at ELSE created_at END) "
          "FILTER (WHERE {1} AND (delayed_id IS NULL OR id < delayed_id) AND {5})), 0), "
          "COUNT(*) FILTER (WHERE NOT published AND parked_at IS NULL AND {3}), "
          "COUNT(*) FILTER (WHERE NOT published AND parked_at IS NOT NULL), "
          "COUNT(*) FILTER (WHERE NOT published AND {4}), "
          "COUNT(*) FILTER (WHERE published), "
          "(SELECT COUNT(*) FROM outbox_archive), "
          "COUNT(*) FILTER (WHERE NOT published AND parked_at IS NULL AND {2}), "
          "COUNT(*) FILTER (WHERE {1} AND id > delayed_id) "
          "FROM outbox LEFT JOIN first_delayed ON delayed_aggregate = aggregate_id "
          "LEFT JOIN gate ON gate_aggregate = aggregate_id",
          kEpochMsNow, pending, Delayed(""), InBackoff(""), Claimed(""), kCreatedAtValid),
      {}, "read the outbox status");
  const pg::Result bad = connection_.Query(
      fmt::format("SELECT COUNT(*) OVER (), id FROM outbox WHERE NOT published AND NOT {} "
                  "ORDER BY id LIMIT {}",
                  kCreatedAtValid, kBadCreatedAtIdsShown),
      {}, "read the rows with a bad created_at");
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
  status.delayed = row.Int(0, 8);
  status.behind_delayed = row.Int(0, 9);
  status.bad_created_at = bad.rows() > 0 ? bad.Int(0, 0) : 0;
  for (int i = 0; i < bad.rows(); ++i) status.bad_created_at_ids.push_back(bad.Int(i, 1));
  return status;
}

}  // namespace outbox
