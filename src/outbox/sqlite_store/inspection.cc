// Store: reading the outbox for operators and the checker: status, parked and stalled rows,
// unpark, snapshots, counts, publish delays and the file's integrity checks.
#include "outbox/store.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "outbox/error.h"

#include "internal.h"

namespace outbox {

using namespace sqlite_store;  // this folder's shared helpers (internal.h)

namespace {

// Rows that break the created_at contract (rows written before schema 3, or
// with the triggers dropped): the same range as the triggers.
constexpr const char* kCreatedAtValid =
    "(typeof(created_at) = 'integer' AND created_at BETWEEN 946684800000 AND 4102444800000)";

}  // namespace

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

namespace {

// The rows of PRAGMA quick_check or integrity_check on one line, "; " between them: a row may hold
// several lines itself ("*** in database main ***\nPage 4: ..."), and the answer goes into a
// one-line error.
std::string OneLineCheck(sqlite::Statement& check) {
  std::string answer;
  while (check.Step()) {
    std::string row = check.ColumnText(0);
    for (std::size_t at = row.find('\n'); at != std::string::npos; at = row.find('\n', at))
      row.replace(at, 1, "; ");
    answer += (answer.empty() ? "" : "; ") + row;
  }
  return answer;
}

}  // namespace

std::string Store::QuickCheck() {
  auto check = connection_.Prepare("PRAGMA quick_check");
  return OneLineCheck(check);
}

std::string Store::IntegrityCheck() {
  auto check = connection_.Prepare("PRAGMA integrity_check");
  return OneLineCheck(check);
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

std::vector<std::string> Store::EventTypes() {
  // CAST: a type written as a BLOB by a foreign writer still names its bytes. The types of rows
  // a purge without --archive removed, once it noted them (outbox_purged.event_type).
  const bool purged = HasColumn("outbox_purged", "event_type");
  auto select = connection_.Prepare(
      std::string("SELECT CAST(event_type AS BLOB) AS t FROM outbox UNION "
                  "SELECT CAST(event_type AS BLOB) FROM outbox_archive ") +
      (purged ? "UNION SELECT CAST(event_type AS BLOB) FROM outbox_purged "
                "WHERE event_type IS NOT NULL "
              : "") +
      "ORDER BY t");
  std::vector<std::string> types;
  while (select.Step()) types.push_back(select.ColumnText(0));
  return types;
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

BackoffWait Store::Backoffs(std::int64_t now_ms) {
  auto select = connection_.Prepare(
      fmt::format("SELECT COUNT(*), COALESCE(MIN(next_attempt_at), 0) FROM outbox WHERE "
                  "published = 0 AND parked_at IS NULL AND NOT {} AND {}",
                  Due("", 1), Unclaimed("", 1)));
  select.Bind(1, now_ms);
  select.Step();
  return {select.ColumnInt64(0), select.ColumnInt64(1)};
}

OutboxStatus Store::Status(std::int64_t now_ms) {
  // A read transaction: every count comes from the same snapshot.
  sqlite::ReadTransaction txn(connection_);
  OutboxStatus status;
  {
    // first_delayed: per aggregate, its first delayed row; the rows after it are held behind it
    // under block-key, not sent late, so they stay out of the oldest age. gate: per aggregate,
    // the latest not_before that has passed and the first row that has one; a row from there on
    // has been due only since then (it, or an earlier row it waited for, was delayed until
    // then), so its age runs from there, not from its created_at.
    constexpr const char* kStatusSql = R"sql(
WITH first_delayed AS (
  SELECT aggregate_id AS delayed_aggregate, MIN(id) AS delayed_id FROM outbox
  WHERE published = 0 AND parked_at IS NULL AND {3} GROUP BY aggregate_id),
gate AS (
  SELECT aggregate_id AS gate_aggregate, MIN(id) AS gate_id, MAX(not_before) AS gate_at FROM outbox
  WHERE published = 0 AND parked_at IS NULL AND typeof(not_before) IN ('integer', 'real')
    AND not_before <= ?1 GROUP BY aggregate_id)
SELECT
  COALESCE(SUM(published = 0 AND parked_at IS NULL AND NOT {3}), 0),
  MIN(CASE WHEN published = 0 AND parked_at IS NULL AND NOT {3} AND {0}
           AND (delayed_id IS NULL OR id < delayed_id)
      THEN CASE WHEN id >= gate_id AND gate_at > created_at THEN gate_at ELSE created_at END END),
  COALESCE(SUM(published = 0 AND parked_at IS NULL AND NOT {1}), 0),
  COALESCE(SUM(published = 0 AND parked_at IS NOT NULL), 0),
  COALESCE(SUM(published = 0 AND NOT {2}), 0),
  COALESCE(SUM(published <> 0), 0),
  COALESCE(SUM(published = 0 AND parked_at IS NULL AND {3}), 0),
  COALESCE(SUM(published = 0 AND parked_at IS NULL AND NOT {3} AND id > delayed_id), 0),
  COALESCE(SUM(published NOT IN (0, 1)), 0)
FROM outbox LEFT JOIN first_delayed ON delayed_aggregate = aggregate_id
  LEFT JOIN gate ON gate_aggregate = aggregate_id
)sql";
    auto select = connection_.Prepare(fmt::format(kStatusSql, kCreatedAtValid, Due("", 1),
                                                  Unclaimed("", 1), Delayed("", 1)));
    select.Bind(1, now_ms);
    select.Step();
    status.pending = select.ColumnInt64(0);
    if (!select.ColumnIsNull(1))
      status.oldest_pending_age_ms = std::max<std::int64_t>(0, now_ms - select.ColumnInt64(1));
    status.in_backoff = select.ColumnInt64(2);
    status.parked = select.ColumnInt64(3);
    status.claimed = select.ColumnInt64(4);
    status.published = select.ColumnInt64(5);
    status.delayed = select.ColumnInt64(6);
    status.behind_delayed = select.ColumnInt64(7);
    status.bad_published = select.ColumnInt64(8);
    status.unpublished = status.pending + status.delayed + status.parked;
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
}  // namespace outbox
