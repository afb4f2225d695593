// PgStore: a leader's page (relay --coordination leader): the rows it may send now, in id order,
// read in id order while that fills the page, from the aggregates' heads when it does not.
#include "outbox/pg_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "outbox/id_range.h"

#include "internal.h"

namespace outbox {

using namespace pg_store;  // this folder's shared helpers (internal.h)

namespace {

// A row o a leader may send now but for block key's hold-back, on the server's clock: not
// parked, its next attempt due, under no live claim of a claims-mode relay (a leader never sends
// what such a relay holds), not delayed.
std::string SendableNow() {
  return "o.parked_at IS NULL AND " + Due("o.") + " AND " + Unclaimed("o.") + " AND " +
         NotDelayed("o.");
}

// Block key's hold-back of row o: no earlier unpublished row of its aggregate (sendable or not:
// parked, in backoff, delayed, claimed or in flight, it holds back the later rows). One probe of
// outbox_pending_by_aggregate.
constexpr const char* kOldestOfAggregate =
    "NOT EXISTS (SELECT 1 FROM outbox e WHERE e.aggregate_id = o.aggregate_id AND e.id < o.id "
    "AND NOT e.published)";

constexpr const char* kColumns =
    "o.id, o.event_id, o.aggregate_id, o.event_type, o.payload, o.created_at, o.headers";

// The page row by row: each unpublished row of ids $1..$2 (IdsAfter) in id order, taken when
// sendable (and with block key the oldest unpublished row of its aggregate), until $3 rows are
// taken. Unbounded: it steps over every row it cannot take.
const std::string& PerRowPageSql(bool block_key) {
  static const std::string any_row = fmt::format(
      "SELECT {} FROM outbox o WHERE NOT o.published AND o.id >= $1 AND o.id <= $2 AND {} "
      "ORDER BY o.id LIMIT $3",
      kColumns, SendableNow());
  static const std::string oldest = fmt::format(
      "SELECT {} FROM outbox o WHERE NOT o.published AND o.id >= $1 AND o.id <= $2 AND {} "
      "AND {} ORDER BY o.id LIMIT $3",
      kColumns, SendableNow(), kOldestOfAggregate);
  return block_key ? oldest : any_row;
}

// The block-key page from the first rows in id order: the first $3 rows of ids $1..$2 that are
// sendable and the oldest unpublished row of their aggregate, looked for among the first $4
// unpublished rows only (the limit + the scan budget, saturated). A full page is the answer,
// and costs what PerRowPageSql costs: the rows stream from the index scan of outbox_unpublished
// and the LIMIT stops it once the page is full. A short page ends with a mark (NULL id): its
// last column is the id of the row past the $4 looked at, NULL when the range ends within
// them. Non-NULL, the page was cut: it stepped over more than the budget of rows it could not
// take before it filled. The mark's lookup (an index-only scan of outbox_unpublished) is the
// second branch of a UNION ALL under the outer LIMIT, so it runs only when the page is short.
const std::string& FirstRowsPageSql() {
  static const std::string sql = fmt::format(
      "SELECT * FROM ("
      "(SELECT id, event_id, aggregate_id, event_type, payload, created_at, headers, "
      "NULL::bigint FROM ("
      "SELECT {}, CASE WHEN {} THEN {} ELSE false END AS ok FROM outbox o "
      "WHERE NOT o.published AND o.id >= $1 AND o.id <= $2 ORDER BY o.id LIMIT $4) s "
      "WHERE ok LIMIT $3) "
      "UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, (SELECT id FROM outbox "
      "WHERE NOT published AND id >= $1 AND id <= $2 ORDER BY id OFFSET $4 LIMIT 1)) page "
      "LIMIT $3",
      kColumns, SendableNow(), kOldestOfAggregate);
  return sql;
}

// The block-key page from the aggregates' heads, in ONE statement (one snapshot: the rows of the
// per-row rule at one instant, whichever branch found them). $1, $2 the ids, $3 the limit, $4
// the walk's cap. heads (HeadsCte) walks outbox_pending_by_aggregate, one seek per aggregate; when
// it saw every aggregate (at most $4), the page is each head in the range that is sendable now,
// in id order: a row is the oldest unpublished row of its aggregate exactly when it is its head.
// When it found more, the page is the per-row rule's, read row by row (PerRowPageSql). Each
// branch runs under a one-time filter on walk, so only one of them runs. The last row has a
// NULL id and the aggregates the walk found in its last column ($4 + 1: it gave up). No outer
// join around the branches: under a nested loop, PostgreSQL 15 ran the InitPlans of a branch
// whose filter was false (EXPLAIN ANALYZE).
const std::string& PageByHeadsSql() {
  static const std::string sql = "WITH RECURSIVE " + HeadsCte(4) + fmt::format(R"sql(,
walk AS MATERIALIZED (
  SELECT COALESCE(max(n), 0) <= $4 AS complete, COALESCE(max(n), 0) AS aggregates FROM heads)
(SELECT {columns}, NULL::int FROM outbox o
 WHERE (SELECT complete FROM walk) AND o.id = ANY (ARRAY(SELECT id FROM heads))
   AND NOT o.published AND o.id >= $1 AND o.id <= $2 AND {sendable}
 ORDER BY o.id LIMIT $3)
UNION ALL
(SELECT {columns}, NULL::int FROM outbox o
 WHERE (SELECT NOT complete FROM walk)
   AND NOT o.published AND o.id >= $1 AND o.id <= $2 AND {sendable} AND {oldest}
 ORDER BY o.id LIMIT $3)
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, aggregates FROM walk)sql",
      fmt::arg("columns", kColumns), fmt::arg("sendable", SendableNow()),
      fmt::arg("oldest", kOldestOfAggregate));
  return sql;
}

// After a walk that found more aggregates than its cap, the block-key pages with no larger cap
// read row by row before the heads are walked again: a backlog of many aggregates, some hot,
// does not pay for the walk on every page (as Store's kPagesWithoutHeads on SQLite).
constexpr int kPagesWithoutHeads = 16;

// rows, in id order. Each statement's branches give their rows in id order, but SQL promises no
// order without an ORDER BY around the whole: checked, sorted only when not.
std::vector<OutboxRow> InIdOrder(std::vector<OutboxRow> rows) {
  const auto by_id = [](const OutboxRow& a, const OutboxRow& b) { return a.id < b.id; };
  if (!std::is_sorted(rows.begin(), rows.end(), by_id)) std::sort(rows.begin(), rows.end(), by_id);
  return rows;
}

// a + b for non-negative a and b, kHighestId past it.
std::int64_t SaturatedAdd(std::int64_t a, std::int64_t b) {
  return a > kHighestId - b ? kHighestId : a + b;
}

}  // namespace

std::vector<OutboxRow> PgStore::ReadPage(const PageRequest& request) {
  ReopenIfClosedWhileIdle();
  const IdRange ids = IdsAfter(request.after_id, request.up_to_id);
  const pg::Param first = pg::Param::Int(ids.first);
  const pg::Param last = pg::Param::Int(ids.last);
  const pg::Param limit = pg::Param::Int(request.limit);
  std::vector<OutboxRow> out;
  const auto read_per_row = [&] {
    const pg::Result rows = connection_.QueryPrepared(
        PerRowPageSql(request.block_key), {first, last, limit}, "read a leader's page");
    for (int i = 0; i < rows.rows(); ++i) out.push_back(ReadRow(rows, i, 6));
  };
  // Every statement here is prepared once per connection: a page per batch.
  if (!request.block_key || request.limit <= 0) {
    read_per_row();
    return out;
  }
  // The rows a page may step over without taking them, and the aggregates the walk may find, as
  // on SQLite (Store::ReadPage): a quarter page (at least 64 rows) and two pages (at least 128
  // aggregates), or PageRequest::scan_budget for both.
  const std::int64_t budget = request.scan_budget > 0
                                  ? request.scan_budget
                                  : std::max<std::int64_t>(request.limit / 4, 64);
  const std::int64_t cap =
      request.scan_budget > 0
          ? request.scan_budget
          : std::max(SaturatedAdd(request.limit, request.limit), std::int64_t{128});
  if (page_heads_skips_ > 0 && cap <= page_heads_skip_cap_) {
    --page_heads_skips_;
    read_per_row();
    return out;
  }
  // After a page from the heads, a page whose cap covers the aggregates that walk saw goes to
  // the heads at once: in a backlog of a few hot aggregates every page is cut, and the read in
  // id order would step over its whole window first.
  if (!heads_last_seen_ || *heads_last_seen_ > cap) {
    const pg::Result rows = connection_.QueryPrepared(
        FirstRowsPageSql(),
        {first, last, limit, pg::Param::Int(SaturatedAdd(request.limit, budget))},
        "read a leader's page");
    bool cut = false;
    for (int i = 0; i < rows.rows(); ++i) {
      if (!rows.IsNull(i, 0)) {
        out.push_back(ReadRow(rows, i, 6));
      } else {
        cut = !rows.IsNull(i, 7);  // rows past those looked at: the budget ran out
      }
    }
    if (!cut) return InIdOrder(std::move(out));
  }
  // This page is the heads statement's alone, on its own snapshot: rows read above are dropped,
  // so no page mixes two instants.
  out.clear();
  const pg::Result rows = connection_.QueryPrepared(
      PageByHeadsSql(), {first, last, limit, pg::Param::Int(cap)},
      "read a leader's page from the aggregates' heads");
  for (int i = 0; i < rows.rows(); ++i) {
    if (!rows.IsNull(i, 0)) {
      out.push_back(ReadRow(rows, i, 6));
    } else if (const std::int64_t aggregates = rows.Int(i, 7); aggregates <= cap) {
      ++pages_by_heads_;
      heads_last_seen_ = aggregates;
    } else {
      // More aggregates than the cap: the statement read the page row by row.
      heads_last_seen_.reset();
      page_heads_skips_ = kPagesWithoutHeads;
      page_heads_skip_cap_ = cap;
    }
  }
  return InIdOrder(std::move(out));
}

}  // namespace outbox
