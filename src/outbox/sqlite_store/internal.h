// Helpers shared by the files of Store (outbox/store.h), the outbox in an SQLite file. Each file
// of this folder holds one concept: open (the file and its connection), schema (tables and
// migrations), run (the run id and the notes of a run), enqueue, claims (claim and settle),
// lease (leader mode), inspection (status, parked rows, snapshots) and retention (purge, WAL).
// Private to the library: nothing outside src/outbox/sqlite_store includes it.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <vector>

#include "outbox/error.h"
#include "outbox/store.h"

namespace outbox::sqlite_store {

// A DbError whose message already says what is wrong in the user's words, file
// and code included: the constructor passes it on instead of rephrasing it.
class PhrasedDbError : public DbError {
 public:
  using DbError::DbError;
};

// Runs op and rephrases a DbError from it as "<what> in 'F': <SQLite's words>
// (NAME)", code kept (the relay retries by code): the user reads what failed,
// never our SQL (issue 9 §3).
template <typename Op>
auto Phrased(const std::string& what, const std::string& path, Op&& op) -> decltype(op()) {
  try {
    return op();
  } catch (const PhrasedDbError&) {
    throw;
  } catch (const DbError& e) {
    throw PhrasedDbError(fmt::format("{} in '{}': {} ({})", what, path, e.reason(),
                                     sqlite::ResultCodeName(e.code())),
                         e.code(), e.reason());
  }
}

// One outbox row from a statement whose columns 0-5 are id, event_id, aggregate_id, event_type,
// payload, created_at, and whose column headers_column is headers (FetchUnpublished, ClaimBatch).
inline OutboxRow ReadOutboxRow(const sqlite::Statement& statement, int headers_column) {
  OutboxRow row;
  row.id = statement.ColumnInt64(0);
  row.event.event_id = statement.ColumnText(1);
  row.event.aggregate_id = statement.ColumnText(2);
  row.event.event_type = statement.ColumnText(3);
  row.event.payload = statement.ColumnText(4);
  row.event.created_at_ms = statement.ColumnInt64(5);
  row.event.headers = statement.ColumnText(headers_column);
  return row;
}

// What a purge without --archive keeps of each row it deletes: the event id and aggregate of a
// published event, so that the checker still counts its record in Kafka as published (not as a
// phantom) once the row is gone. Not part of the versioned schema: created by the first such
// purge, dropped by a reset. About 60 bytes a row against the row's payload.
// event_type (NULL for rows purged before it existed; Store::PurgePublished adds the column to an
// older table): the purged events' types, so that check and verify under --topic-template still
// read their topics (EventTypes).
constexpr const char* kPurgedTable =
    "CREATE TABLE IF NOT EXISTS outbox_purged (id INTEGER PRIMARY KEY, event_id TEXT NOT NULL, "
    "aggregate_id TEXT NOT NULL, purged_at INTEGER NOT NULL, event_type TEXT)";

// The broker incarnations this run's publishes went to (NoteBrokerIncarnation). Not part of the
// versioned schema: created on first use, dropped by a reset.
constexpr const char* kBrokerTable =
    "CREATE TABLE IF NOT EXISTS outbox_broker (incarnation TEXT PRIMARY KEY, "
    "noted_at INTEGER NOT NULL)";

// The key->partition mapping of each topic (NotePartitionMapping). Not part of the versioned
// schema: created on first use, dropped by a reset.
constexpr const char* kPartitioningTable =
    "CREATE TABLE IF NOT EXISTS outbox_partitioning (topic TEXT PRIMARY KEY, "
    "partitioner TEXT NOT NULL, partitions INTEGER NOT NULL, noted_at INTEGER NOT NULL)";

// Due (not in backoff) and unclaimed, with the time now as parameter ?N; a
// value beyond kMaxHoldMs from now, or not a number, counts as neither a
// backoff nor a lease (see kMaxHoldMs). Format with {0} the column prefix
// ("o." or ""), {1} the parameter number, {2} kMaxHoldMs.
constexpr const char* kDueSql =
    "({0}next_attempt_at <= ?{1} OR {0}next_attempt_at > ?{1} + {2} "
    "OR typeof({0}next_attempt_at) NOT IN ('integer', 'real'))";
constexpr const char* kUnclaimedSql =
    "({0}claim_until IS NULL OR {0}claim_until <= ?{1} OR {0}claim_until > ?{1} + {2} "
    "OR typeof({0}claim_until) NOT IN ('integer', 'real'))";

inline std::string Due(std::string_view prefix, int parameter) {
  return fmt::format(fmt::runtime(kDueSql), prefix, parameter, kMaxHoldMs);
}
inline std::string Unclaimed(std::string_view prefix, int parameter) {
  return fmt::format(fmt::runtime(kUnclaimedSql), prefix, parameter, kMaxHoldMs);
}

// Delayed: the row's not_before (epoch ms, delayed publish) lies ahead of the time now, parameter
// ?{1}, by at most kMaxDelayMs. NULL, a value that is not a number (typeof text or blob: a
// foreign writer's), one at or before now (negative included) and one further ahead than
// kMaxDelayMs are not delayed: the row is due. Format with {0} the column prefix, {1} the
// parameter number, {2} kMaxDelayMs. The clock is the caller's now_ms (the store's Clock).
constexpr const char* kDelayedSql =
    "(typeof({0}not_before) IN ('integer', 'real') AND {0}not_before > ?{1} "
    "AND {0}not_before <= ?{1} + {2})";

inline std::string Delayed(std::string_view prefix, int parameter) {
  return fmt::format(fmt::runtime(kDelayedSql), prefix, parameter, kMaxDelayMs);
}

// The rows a relay may send now, as a condition on outbox o, with the parameter numbers of the
// caller's statement: id >= ?first and id <= ?last (an IdRange, IdsAfter), unpublished, not
// parked, due and unclaimed at ?now (Due, Unclaimed), not delayed (Delayed), and while
// ?block_key is 1, no earlier unpublished row of the same aggregate (a delayed one included: it
// holds its aggregate back).
// One text for the claim (claims.cc, ClaimableWhere) and the leader's page (lease.cc,
// SendableWhere), which differ only in their parameter numbers.
inline std::string SendableRowsWhere(int first, int last, int now, int block_key) {
  return fmt::format(
      "o.published = 0 AND o.id >= ?{} AND o.id <= ?{} AND o.parked_at IS NULL AND {} AND {} "
      "AND NOT {} "
      "AND (?{} = 0 OR NOT EXISTS (SELECT 1 FROM outbox e WHERE e.aggregate_id = o.aggregate_id "
      "AND e.id < o.id AND e.published = 0))",
      first, last, Due("o.", now), Unclaimed("o.", now), Delayed("o.", now), block_key);
}

// Inside a settle's transaction: each failed delivery whose row is still this
// settle's (still_ours, an SQL condition that may use the token as ?2) gets
// attempts+1, its error, its next attempt after BackoffMs, and is parked past
// max_attempts or when park_now; a row no longer ours is counted fenced. One
// body for claims mode ("claim_token = ?2") and leader mode ("published = 0",
// the lease already checked: token is bound only where still_ours uses ?2). Clearing the
// claim columns is a no-op for a leader's rows, which carry no live claim.
void RecordFailures(sqlite::Connection& connection, std::string_view still_ours,
                    std::int64_t token, const std::vector<FailedDelivery>& failed,
                    const SettlePolicy& policy, std::int64_t now_ms, SettleReport& report);

}  // namespace outbox::sqlite_store
