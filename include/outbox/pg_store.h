// The outbox on PostgreSQL (issue 12): the same rows, claims and settles as the SQLite Store,
// with the database server's rules where they differ.
//
// - Claims are `SELECT ... FOR UPDATE SKIP LOCKED` inside one short transaction, so relays on
//   many hosts share the work without waiting on each other (chapter 7.1: racing relays multiply
//   duplicates; the cure is SKIP LOCKED or sharding;
//   https://www.postgresql.org/docs/15/sql-select.html#SQL-FOR-UPDATE-SHARE).
// - Lease and backoff times are the server's clock (now()), never a relay's own: clocks on
//   different hosts disagree, and a relay whose clock runs ahead must not steal a live lease.
// - Ids come from a sequence, so transactions commit out of id order. A relay that keeps a
//   keyset cursor ("claim ids above the last one I saw") skips forever a row whose transaction
//   took a smaller id and committed later. The claim therefore keeps no cursor: it scans the
//   unpublished rows (a partial index) every time. ClaimMode::kNaiveCursor keeps the cursor on
//   purpose, so a class can watch the bug lose an event.
// - Schema changes run under an advisory lock, so two processes that start together do not race
//   to create the tables.
// Not thread-safe: one PgStore (one connection) per thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "outbox/event.h"
#include "outbox/pg/connection.h"
#include "outbox/store.h"

namespace outbox {

// How ClaimBatch finds rows.
enum class PgClaimMode {
  kScan,         // every unpublished row, whatever its id: late commits are never skipped
  kNaiveCursor,  // only ids above the highest id this store has claimed: the classic bug
};

class PgStore {
 public:
  // Connects and, when a table of the schema is missing, creates it under
  // pg_advisory_lock(kMigrationLockKey). An existing schema is not touched: no DDL, so no wait
  // behind the writers' open transactions.
  // Throws pg::PgError: the server is unreachable, refuses the login, or the database does not
  // exist (sqlstate "3D000").
  explicit PgStore(const std::string& url);

  // The advisory lock key that serializes schema changes (any fixed bigint; "outbox" in ASCII).
  static constexpr std::int64_t kMigrationLockKey = 0x6f7574626f78;

  // Drops and recreates the outbox, its archive and the lab's business table, empty.
  // Throws pg::PgError.
  void ResetSchema();

  // Begins a transaction for a business write and its outbox rows. Throws pg::PgError.
  pg::Transaction BeginWrite() { return pg::Transaction(connection_); }

  // Inserts one outbox row inside txn (the business row's transaction: they commit or roll back
  // together, chapter 7.1). created_at is the server's clock when event.created_at_ms is 0.
  // Returns the row's id (from the sequence: committed rows are NOT in id order). Throws
  // pg::PgError: sqlstate "23505" when event_id exists already.
  std::int64_t Enqueue(pg::Transaction& txn, const OutboxEvent& event);

  // Claims up to request.limit claimable rows (unpublished, not parked, no live lease, backoff
  // over; with block_key only the oldest unpublished row of each aggregate) for lease_ms of the
  // server's clock. request.now_ms and request.after_id are ignored: the server's clock and the
  // mode decide. Rows come back in id order with a fencing token greater than every earlier
  // claim's (a sequence). Throws pg::PgError.
  Claim ClaimBatch(const ClaimRequest& request, PgClaimMode mode = PgClaimMode::kScan);

  // Marks acked rows published and records failed ones (backoff on the server's clock, parked at
  // max_attempts), each only while token still owns the row; rows claimed since by another relay
  // are counted as fenced and left untouched. One transaction. Throws pg::PgError.
  SettleReport SettleBatch(std::int64_t token, const std::vector<std::int64_t>& acked,
                           const std::vector<FailedDelivery>& failed, const SettlePolicy& policy);

  // Rows in the outbox: total, published, unpublished. Throws pg::PgError.
  OutboxCounts Count();

 private:
  void Migrate();
  bool SchemaCurrent();  // every table of the schema exists

  pg::Connection connection_;
  std::int64_t naive_cursor_ = 0;  // PgClaimMode::kNaiveCursor only
};

}  // namespace outbox
