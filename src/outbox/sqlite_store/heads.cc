// Store: a leader's page from each aggregate's oldest unpublished row (its head), for a backlog
// whose rows are mostly held back behind earlier rows of their aggregate (ReadPage's fallback).
#include "outbox/store.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "outbox/id_range.h"

#include "internal.h"

namespace outbox {

using namespace sqlite_store;  // this folder's shared helpers (internal.h)

std::optional<std::vector<OutboxRow>> Store::ReadPageByHeads(const PageRequest& request,
                                                             std::int64_t max_aggregates) {
  // A skip scan of outbox_pending_by_aggregate (aggregate_id, id) WHERE published = 0: each step
  // seeks the next aggregate past the last one, then its lowest unpublished id, so the cost is two
  // index seeks per aggregate however many rows each holds. In SQL, not in C++, so that each
  // aggregate_id is compared as stored (a foreign writer's BLOB sorts after every TEXT; bound back
  // as text it would be found again forever). The LIMIT stops the scan one past max_aggregates.
  static const std::string heads_sql =
      "WITH RECURSIVE aggs(agg) AS ("
      "SELECT (SELECT aggregate_id FROM outbox WHERE published = 0 ORDER BY aggregate_id LIMIT 1) "
      "UNION ALL SELECT (SELECT e.aggregate_id FROM outbox e WHERE e.published = 0 "
      "AND e.aggregate_id > aggs.agg ORDER BY e.aggregate_id LIMIT 1) "
      "FROM aggs WHERE aggs.agg IS NOT NULL LIMIT ?1) "
      "SELECT (SELECT e.id FROM outbox e WHERE e.published = 0 AND e.aggregate_id = aggs.agg "
      "ORDER BY e.id LIMIT 1) FROM aggs WHERE aggs.agg IS NOT NULL";
  const IdRange range = IdsAfter(request.after_id, request.up_to_id);
  std::vector<std::int64_t> heads;
  std::int64_t aggregates = 0;
  {
    auto scan = connection_.Reuse(heads_sql);
    scan->Bind(1, max_aggregates + 2);  // the last row of the recursion is the NULL past the end
    while (scan->Step()) {
      if (scan->ColumnIsNull(0)) continue;  // not expected: the aggregate's rows were just found
      if (++aggregates > max_aggregates) return std::nullopt;
      const std::int64_t id = scan->ColumnInt64(0);
      if (id >= range.first && id <= range.last) heads.push_back(id);
    }
  }
  std::sort(heads.begin(), heads.end());
  // Each head in id order, sent only when sendable now (the conditions of SendableRowsWhere
  // but the hold-back, which a head passes by definition); an unsendable head (parked, in
  // backoff, delayed, claimed) holds its aggregate back, as in the per-row rule.
  static const std::string row_sql = fmt::format(
      "SELECT o.id, o.event_id, o.aggregate_id, o.event_type, o.payload, o.created_at, o.headers "
      "FROM outbox o WHERE o.id = ?1 AND o.published = 0 AND o.parked_at IS NULL "
      "AND {} AND {} AND NOT {}",
      Due("o.", 2), Unclaimed("o.", 2), Delayed("o.", 2));
  auto row = connection_.Reuse(row_sql);
  std::vector<OutboxRow> rows;
  for (const std::int64_t id : heads) {
    if (static_cast<std::int64_t>(rows.size()) >= request.limit) break;
    row->Reset();
    row->Bind(1, id).Bind(2, request.now_ms);
    if (row->Step()) rows.push_back(ReadOutboxRow(*row, 6));
  }
  ++pages_by_heads_;
  return rows;
}

}  // namespace outbox
