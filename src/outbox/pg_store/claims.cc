// PgStore: claim and settle (claims mode of the relay, and the naive fetch-and-mark loop),
// what is claimable or waiting, and releasing claims.
#include "outbox/pg_store.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "outbox/id_range.h"

#include "internal.h"

namespace outbox {

using namespace pg_store;  // this folder's shared helpers (internal.h)

namespace pg_store {

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
    const std::int64_t attempts = NextAttempt(owned.Int(0, 0));
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

void TallyMarks(const pg::Result& marked, const std::vector<std::int64_t>& acked,
                SettleReport& report) {
  std::vector<std::int64_t> ids;
  ids.reserve(static_cast<std::size_t>(marked.rows()));
  for (int i = 0; i < marked.rows(); ++i) ids.push_back(marked.Int(i, 0));
  TallyMarks(ids, acked, report);
}

void TallyMarks(const std::vector<std::int64_t>& marked, const std::vector<std::int64_t>& acked,
                SettleReport& report) {
  std::unordered_set<std::int64_t> marked_ids(marked.begin(), marked.end());
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

pg::Param IdArray(const std::vector<std::int64_t>& ids) {
  return pg::Param::Text(fmt::format("{{{}}}", fmt::join(ids, ",")));
}

}  // namespace pg_store

namespace {

// The claimable rows' condition, shared by the claim and HasClaimable. $1: block key (boolean),
// $2: the naive mode (boolean): only ids above the stored offset (every id before its first
// claim: no offset row, whose max() is NULL; not 0, a foreign writer's ids may be 0 or below). A
// delayed row (Delayed) is not claimable, and under block key holds back the later rows of its
// aggregate (it is unpublished).
// The naive mode ignores not_before: its offset moves past what it skips, so a delayed row it
// passed over would never be sent.
const std::string& ClaimableWhere() {
  static const std::string where = fmt::format(R"sql(
  NOT o.published AND o.parked_at IS NULL
    AND (NOT $2::boolean OR COALESCE(o.id > (SELECT max(last_id) FROM outbox_offset), true))
    AND {} AND {}
    AND ($2::boolean OR {})
    AND (NOT $1::boolean OR NOT EXISTS (
      SELECT 1 FROM outbox e WHERE e.aggregate_id = o.aggregate_id AND e.id < o.id AND NOT e.published))
)sql", Due("o."), Unclaimed("o."), NotDelayed("o."));
  return where;
}

// SKIP LOCKED passes over rows another relay's claim transaction holds right now. $1 block key,
// $2 naive mode, $3 token, $4 owner, $5 limit, $6 lease ms.
std::string ClaimSql() {
  return std::string(R"sql(
WITH picked AS (
  SELECT o.id FROM outbox o WHERE )sql") + ClaimableWhere() + R"sql(
  ORDER BY o.id LIMIT $5
  FOR UPDATE SKIP LOCKED)
UPDATE outbox u SET claim_token = $3, claim_owner = $4,
  claim_until = now() + $6::bigint * interval '1 millisecond', claimed_at = now()
FROM picked WHERE u.id = picked.id
RETURNING u.id, u.event_id, u.aggregate_id, u.event_type, u.payload, u.created_at, u.attempts,
  u.headers
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
// After the walk gave up, the claims and looks that skip it before it is tried again.
constexpr int kHeadWalkRetryEvery = 16;
// The heads walk that OneStatementClaimSql and HasClaimableSql begin with (HeadsCte, internal.h),
// its cap parameter number n.
std::string HeadsWalkSql(int n) { return "\nWITH RECURSIVE " + HeadsCte(n); }

// The whole claim in ONE statement, so one round trip (autocommit: the statement is its own
// transaction, as BEGIN, nextval, claim, COMMIT were in four): the fencing token (nextval, once:
// a MATERIALIZED CTE), the heads walk when $3 asks for it (a CASE evaluates its subquery only on
// its branch, and picked_heads' one-time filter skips the heads when the walk is off or gave up),
// else the id-order scan of ClaimableWhere, and the UPDATE of the rows picked. $1 block key, $2
// naive mode (always false here: the naive claim keeps its own transaction), $3 walk the heads,
// $4 limit, $5 the walk's cap, $6 owner, $7 lease ms. Every row carries the token; one row with
// a null id when nothing was claimed; the last column tells whether the walk gave up (1).
const std::string& OneStatementClaimSql() {
  static const std::string sql = HeadsWalkSql(5) + R"sql(,
fence AS MATERIALIZED (SELECT nextval('outbox_fence') AS token),
walk AS MATERIALIZED (
  SELECT CASE WHEN $3::boolean THEN (SELECT COALESCE(max(n), 0) <= $5 FROM heads) END AS complete),
picked_heads AS (
  SELECT o.id FROM outbox o
  WHERE (SELECT complete IS TRUE FROM walk) AND o.id IN (SELECT id FROM heads)
    AND NOT o.published AND o.parked_at IS NULL
    AND )sql" + Due("o.") + " AND " + Unclaimed("o.") + " AND " + NotDelayed("o.") + R"sql(
  ORDER BY o.id LIMIT $4
  FOR UPDATE OF o SKIP LOCKED),
picked_scan AS (
  SELECT o.id FROM outbox o WHERE (SELECT complete IS NOT TRUE FROM walk) AND )sql" +
                                 ClaimableWhere() + R"sql(
  ORDER BY o.id LIMIT $4
  FOR UPDATE SKIP LOCKED),
claimed AS (
  UPDATE outbox u SET claim_token = (SELECT token FROM fence), claim_owner = $6,
    claim_until = now() + $7::bigint * interval '1 millisecond', claimed_at = now()
  WHERE u.id IN (SELECT id FROM picked_heads UNION ALL SELECT id FROM picked_scan)
  RETURNING u.id, u.event_id, u.aggregate_id, u.event_type, u.payload, u.created_at, u.attempts,
    u.headers)
SELECT c.id, c.event_id, c.aggregate_id, c.event_type, c.payload, c.created_at, c.attempts,
       f.token, (SELECT complete IS FALSE FROM walk)::int, c.headers
FROM fence f LEFT JOIN claimed c ON true
)sql";
  return sql;
}

// HasClaimable in one statement: the heads walk when $3 asks for it and it saw every aggregate,
// else the scan of ClaimableWhere ($1 block key, $2 naive mode). Returns 1 or 0, and in the
// second column 1 when the walk gave up.
const std::string& HasClaimableSql() {
  static const std::string sql = HeadsWalkSql(4) + R"sql(,
walk AS MATERIALIZED (
  SELECT CASE WHEN $3::boolean THEN (SELECT COALESCE(max(n), 0) <= $4 FROM heads) END AS complete)
SELECT CASE WHEN (SELECT complete IS TRUE FROM walk) THEN
    EXISTS (SELECT 1 FROM outbox o WHERE o.id IN (SELECT id FROM heads)
      AND NOT o.published AND o.parked_at IS NULL
      AND )sql" + Due("o.") + " AND " + Unclaimed("o.") + " AND " + NotDelayed("o.") + R"sql()
  ELSE EXISTS (SELECT 1 FROM outbox o WHERE )sql" +
                                 ClaimableWhere() + R"sql() END::int,
  (SELECT complete IS FALSE FROM walk)::int
)sql";
  return sql;
}

}  // namespace

Claim PgStore::ClaimBatch(const ClaimRequest& request, PgClaimMode mode) {
  ReopenIfClosedWhileIdle();
  Claim claim;
  if (mode == PgClaimMode::kNaiveCursor) return NaiveClaim(request);
  const bool walk = request.block_key && WalkHeadsNow();
  const pg::Result rows = connection_.QueryPrepared(
      OneStatementClaimSql(),
      {Bool(request.block_key), Bool(false), Bool(walk), pg::Param::Int(request.limit),
       pg::Param::Int(kHeadWalkCap), pg::Param::Text(request.owner),
       pg::Param::Int(request.lease_ms)},
      "claim a batch");
  std::vector<std::pair<OutboxRow, std::int64_t>> claimed;
  for (int i = 0; i < rows.rows(); ++i)
    if (!rows.IsNull(i, 0)) claimed.emplace_back(ReadRow(rows, i, 9), rows.Int(i, 6));
  if (rows.rows() > 0) {
    claim.token = rows.Int(0, 7);
    if (walk) NoteHeadsWalk(rows.Int(0, 8) == 1);
  }
  // RETURNING keeps no order.
  std::sort(claimed.begin(), claimed.end(),
            [](const auto& a, const auto& b) { return a.first.id < b.first.id; });
  for (auto& [row, attempts] : claimed) {
    claim.rows.push_back(std::move(row));
    claim.attempts.push_back(attempts);
  }
  return claim;
}

Claim PgStore::NaiveClaim(const ClaimRequest& request) {
  Claim claim;
  pg::Transaction txn(connection_);
  claim.token = connection_.QueryInt("SELECT nextval('outbox_fence')", {}, "take a fencing token");
  std::vector<std::pair<OutboxRow, std::int64_t>> claimed;
  pg::Result rows = connection_.Query(
      ClaimSql(),
      {Bool(request.block_key), Bool(true), pg::Param::Int(claim.token),
       pg::Param::Text(request.owner), pg::Param::Int(request.limit),
       pg::Param::Int(request.lease_ms)},
      "claim a batch");
  for (int i = 0; i < rows.rows(); ++i) claimed.emplace_back(ReadRow(rows, i, 7), rows.Int(i, 6));
  std::sort(claimed.begin(), claimed.end(),
            [](const auto& a, const auto& b) { return a.first.id < b.first.id; });
  if (!claimed.empty()) {
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

bool PgStore::WalkHeadsNow() {
  // After the walk gave up (more than kHeadWalkCap aggregates pending), the scan is the cheaper
  // claim: skip the walk's kHeadWalkCap probes, trying it again after kHeadWalkRetryEvery claims
  // and looks, so a backlog that became one stalled behind a few failed heads is walked again
  // soon. Either way the answer is the same rows; only its cost differs.
  if (heads_walk_skips_ == 0) return true;
  --heads_walk_skips_;
  return false;
}

void PgStore::NoteHeadsWalk(bool gave_up) { heads_walk_skips_ = gave_up ? kHeadWalkRetryEvery : 0; }

bool PgStore::HasClaimable(const ClaimRequest& request) {
  ReopenIfClosedWhileIdle();
  const bool naive = mode_ == PgClaimMode::kNaiveCursor;
  const bool walk = request.block_key && !naive && WalkHeadsNow();
  const pg::Result result = connection_.QueryPrepared(
      HasClaimableSql(),
      {Bool(request.block_key), Bool(naive), Bool(walk), pg::Param::Int(kHeadWalkCap)},
      "look for claimable rows");
  if (walk) NoteHeadsWalk(result.Int(0, 1) == 1);
  return result.Int(0, 0) == 1;
}

SettleReport PgStore::SettleBatch(std::int64_t token, const std::vector<std::int64_t>& acked,
                                  const std::vector<FailedDelivery>& failed,
                                  const SettlePolicy& policy) {
  ReopenIfClosedWhileIdle();
  SettleReport report;
  // Only acks (the common batch): the marking UPDATE alone, its own transaction, one round trip.
  // Failures too: one transaction around the marks and the failures' rows.
  std::optional<pg::Transaction> txn;
  if (!failed.empty()) {
    txn.emplace(connection_);
    LimitIdleInTransaction(connection_, policy.lease_ms);
  }
  if (!acked.empty()) {
    // One statement for the batch, not one round trip per row (bench: relay on PostgreSQL 2,146
    // events/s with an UPDATE per row). The token is checked per row as before: a row another
    // relay took over carries its token, stays unmarked here and is reported fenced.
    static const std::string sql =
        std::string("UPDATE outbox SET published = true, published_at = ") + kEpochMsNow +
        ", claim_token = NULL, claim_owner = NULL, claim_until = NULL "
        "WHERE id = ANY($1::bigint[]) AND claim_token = $2 AND NOT published RETURNING id";
    const pg::Result marked = connection_.QueryPrepared(
        sql, {IdArray(acked), pg::Param::Int(token)}, "mark a claimed batch published");
    // Fenced: claimed by another relay since, or published already.
    TallyMarks(marked, acked, report);
  }
  RecordFailures(connection_, token, failed, policy, report);
  if (txn) txn->Commit();
  return report;
}

std::vector<OutboxRow> PgStore::FetchUnpublished(std::optional<std::int64_t> after_id,
                                                 std::int64_t limit) {
  const IdRange ids = IdsAfter(after_id, kHighestId);
  const pg::Result rows = connection_.Query(
      "SELECT id, event_id, aggregate_id, event_type, payload, created_at, headers FROM outbox "
      "WHERE NOT published AND id >= $1 AND id <= $3 ORDER BY id LIMIT $2",
      {pg::Param::Int(ids.first), pg::Param::Int(limit), pg::Param::Int(ids.last)},
      "read unpublished rows");
  std::vector<OutboxRow> out;
  for (int i = 0; i < rows.rows(); ++i) out.push_back(ReadRow(rows, i, 6));
  return out;
}

bool PgStore::MarkPublished(std::int64_t id) {
  return connection_
             .Query(std::string("UPDATE outbox SET published = true, published_at = ") + kEpochMsNow +
                        " WHERE id = $1 AND NOT published",
                    {pg::Param::Int(id)}, "mark a row published")
             .Affected() == 1;
}

void PgStore::ReadAtOneInstant(const std::function<void()>& reads) {
  // REPEATABLE READ, not READ COMMITTED: one now() is not enough, the rows must be of one
  // instant too (another relay's settle between two reads). Read only: it cannot fail to
  // serialize.
  pg::Transaction txn(connection_, pg::Isolation::kRepeatableRead);
  reads();
  txn.Commit();
}

std::int64_t PgStore::WaitingCount(std::int64_t /*now_ms*/) {
  return connection_.QueryInt(
      "SELECT COUNT(*) FROM outbox WHERE NOT published AND parked_at IS NULL "
      "AND (" + InBackoff("") + " OR " + Claimed("") + " OR " + Delayed("") + ")",
      {}, "count waiting rows");
}

std::int64_t PgStore::PendingCount() {
  return connection_.QueryInt("SELECT COUNT(*) FROM outbox WHERE NOT published AND parked_at IS NULL",
                              {}, "count pending rows");
}

std::int64_t PgStore::ParkedCount() {
  return connection_.QueryInt(
      "SELECT COUNT(*) FROM outbox WHERE NOT published AND parked_at IS NOT NULL", {},
      "count parked rows");
}

std::vector<ClaimOwner> PgStore::ClaimOwners(std::int64_t /*now_ms*/) {
  const pg::Result rows = connection_.Query(
      // A foreign writer's '-infinity' claimed_at is no age (now() minus it is an error).
      "SELECT claim_owner, COUNT(*), "
      "COALESCE(GREATEST(0, (extract(epoch FROM now() - min(claimed_at) "
      "FILTER (WHERE isfinite(claimed_at))) * 1000)::bigint), 0), "
      "GREATEST(0, (extract(epoch FROM max(claim_until) - now()) * 1000)::bigint), "
      "max(claim_token) FROM outbox WHERE NOT published AND " + Claimed("") +
          " GROUP BY claim_owner ORDER BY claim_owner",
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

}  // namespace outbox
