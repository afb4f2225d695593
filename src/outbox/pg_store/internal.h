// Helpers shared by the files of PgStore (outbox/pg_store.h), the outbox on PostgreSQL. The files
// of this folder hold one concept each, as those of src/outbox/sqlite_store do: open, schema
// (tables, the schema lock, reset), run, enqueue, claims (claim and settle), lease (leader mode's
// lease and settle), page (a leader's page), inspection (status, parked rows, snapshots, the MVCC
// horizon) and retention (purge).
// Private to the library: nothing outside src/outbox/pg_store includes it.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "outbox/claim.h"
#include "outbox/pg_store.h"

namespace outbox::pg_store {

// The shortest idle limit LimitIdleInTransaction sets, ms: a live relay on a loaded machine can
// pause that long between two statements, and a session ended then costs a reconnect and a
// re-sent batch. A short lease (tests use 1 ms) gets this floor instead.
inline constexpr std::int64_t kMinIdleInTransactionMs = 5000;

// Inside a relay's write transaction that holds row locks across round trips (a settle with
// failures, a takeover): the server ends the session when it idles in the transaction longer
// than limit_ms, at least kMinIdleInTransactionMs (idle_in_transaction_session_timeout, SET
// LOCAL: this transaction only). A relay frozen there (SIGSTOP, a VM pause) then cannot hold the
// lease row or its rows' locks much past its lease, and the relay that takes over does not wait
// on them for the length of the freeze.
inline void LimitIdleInTransaction(pg::Connection& connection, std::int64_t limit_ms) {
  connection.Query(fmt::format("SET LOCAL idle_in_transaction_session_timeout = {}",
                               std::max(limit_ms, kMinIdleInTransactionMs)),
                   {}, "limit the transaction's idle time");
}

// epoch ms of a timestamptz, on the server.
constexpr const char* kEpochMsNow = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

// Delayed publish: the row o's not_before (epoch ms) lies ahead of the server's now() by at most
// kMaxDelayMs. NULL, one at or before now() (negative included) and one further ahead are not
// delayed: the row is due (the column is bigint, so no text can be in it). Format with {0} the
// column prefix ("o." or "") and {1} kMaxDelayMs. now() is the transaction's start, the instant
// every other test of a claim (next_attempt_at, claim_until) is made at.
constexpr const char* kDelayedSql =
    "({0}not_before > (extract(epoch FROM now()) * 1000)::bigint "
    "AND {0}not_before <= (extract(epoch FROM now()) * 1000)::bigint + {1})";

inline std::string Delayed(const char* prefix) {
  return fmt::format(fmt::runtime(kDelayedSql), prefix, kMaxDelayMs);
}
// The same, true or false and never NULL: not_before IS NULL makes the comparison NULL.
inline std::string NotDelayed(const char* prefix) {
  return fmt::format("({0}not_before IS NULL OR NOT {1})", prefix, Delayed(prefix));
}

// A created_at the lab can take for epoch ms: 2000-01-01 to 2100-01-01, as SQLite's trigger
// requires (sqlite_store/schema.cc). PostgreSQL's column takes any bigint: a foreign writer's
// seconds or INT64_MIN is counted apart (OutboxStatus::bad_created_at) and never aged, so no
// read overflows and no age is impossible.
constexpr const char* kCreatedAtValid = "(created_at BETWEEN 946684800000 AND 4102444800000)";

// A relay never holds a row back longer than kMaxHoldMs (a lease, a backoff), so a claim_until or
// next_attempt_at further ahead of now() was not written by a relay: a foreign writer's far-future
// or 'infinity' value counts as unclaimed and due, as on SQLite (sqlite_store/internal.h, kDueSql),
// instead of holding its row (and under block key its aggregate) back for years, and is never
// subtracted from now() (an error on infinite timestamps). Format with {0} the column prefix.
inline std::string Due(const char* prefix) {
  return fmt::format("({0}next_attempt_at <= now() OR {0}next_attempt_at > now() + "
                     "interval '{1} milliseconds')",
                     prefix, kMaxHoldMs);
}
inline std::string InBackoff(const char* prefix) {  // NOT Due: next_attempt_at is NOT NULL
  return fmt::format("({0}next_attempt_at > now() AND {0}next_attempt_at <= now() + "
                     "interval '{1} milliseconds')",
                     prefix, kMaxHoldMs);
}
inline std::string Unclaimed(const char* prefix) {
  return fmt::format("({0}claim_until IS NULL OR {0}claim_until <= now() OR {0}claim_until > "
                     "now() + interval '{1} milliseconds')",
                     prefix, kMaxHoldMs);
}
inline std::string Claimed(const char* prefix) {  // NOT Unclaimed, never NULL
  return fmt::format("({0}claim_until > now() AND {0}claim_until <= now() + "
                     "interval '{1} milliseconds')",
                     prefix, kMaxHoldMs);
}

// heads(aggregate_id, id, n), a CTE of a WITH RECURSIVE: each aggregate's oldest unpublished row
// in aggregate order, n counting them. A loose index scan of outbox_pending_by_aggregate
// (aggregate_id, id) WHERE NOT published: each step seeks the first entry past the last
// aggregate, which is the next aggregate and its lowest unpublished id at once, so the cost is
// one index seek per aggregate however many rows each holds. The recursion stops once n passes
// the cap, parameter $cap_param: at most cap + 1 rows, and max(n) <= cap when it saw every
// aggregate. Shared by the block-key claim (claims.cc) and the leader's page (page.cc).
inline std::string HeadsCte(int cap_param) {
  return fmt::format(R"sql(heads(aggregate_id, id, n) AS (
  (SELECT aggregate_id, id, 1 FROM outbox WHERE NOT published ORDER BY aggregate_id, id LIMIT 1)
  UNION ALL
  SELECT nx.aggregate_id, nx.id, h.n + 1 FROM heads h CROSS JOIN LATERAL (
    SELECT e.aggregate_id, e.id FROM outbox e
    WHERE NOT e.published AND e.aggregate_id > h.aggregate_id
    ORDER BY e.aggregate_id, e.id LIMIT 1) nx
  WHERE h.n <= ${})
)sql", cap_param);
}

inline pg::Param Bool(bool value) { return pg::Param::Text(value ? "true" : "false"); }

// Row i of a result whose columns 0-5 are id, event_id, aggregate_id, event_type, payload,
// created_at and whose column headers_column is headers (NULL: none). The headers are read as the
// writer stored them; the relay parses them when it sends the row (record_headers.h).
inline OutboxRow ReadRow(const pg::Result& rows, int i, int headers_column) {
  OutboxRow row;
  row.id = rows.Int(i, 0);
  row.event.event_id = rows.Text(i, 1);
  row.event.aggregate_id = rows.Text(i, 2);
  row.event.event_type = rows.Text(i, 3);
  row.event.payload = rows.Bytes(i, 4);
  row.event.created_at_ms = rows.Int(i, 5);
  if (!rows.IsNull(i, headers_column)) row.event.headers = rows.Text(i, headers_column);
  return row;
}

// Splits acked into report's marked and fenced ids by the ids a mark's RETURNING gave back;
// an id given twice is marked once and fenced the second time.
void TallyMarks(const pg::Result& marked, const std::vector<std::int64_t>& acked,
                SettleReport& report);
// The same with the marked ids already read.
void TallyMarks(const std::vector<std::int64_t>& marked, const std::vector<std::int64_t>& acked,
                SettleReport& report);

// "{1,2,3}": ids as one bigint[] parameter.
pg::Param IdArray(const std::vector<std::int64_t>& ids);

// Inside a settle's transaction: each failed delivery whose row is still this settle's gets
// attempts + 1, its error, its next attempt after BackoffMs on the server's clock, and is parked
// at max_attempts or when park_now; a row no longer ours is counted fenced. claim_token: claims
// mode, the row must still carry it; null (leader mode, the lease already checked in this
// transaction): the row must still be unpublished. One body for both settles, as on SQLite.
void RecordFailures(pg::Connection& connection, std::optional<std::int64_t> claim_token,
                    const std::vector<FailedDelivery>& failed, const SettlePolicy& policy,
                    SettleReport& report);

}  // namespace outbox::pg_store
