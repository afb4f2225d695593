// What the store reports of the outbox for status, metrics, parked and the checker (Store::Status,
// ListTroubled, Stalls, Count, Snapshot and their PgStore and OutboxStore twins,
// outbox/store.h, outbox/pg_store.h). Plain values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace outbox {

struct OutboxCounts {
  std::int64_t total = 0;
  std::int64_t published = 0;
  std::int64_t unpublished = 0;
};

// One outbox row as the checker and reconciliation see it.
struct SnapshotRow {
  std::int64_t id = 0;
  std::string event_id;
  std::string aggregate_id;
  bool published = false;  // true for every archived row
  bool parked = false;     // unpublished and parked after max attempts
  bool archived = false;   // no longer in the outbox table: archived or purged
  // Deleted by a purge without archive: only its id, event id and aggregate are left (table
  // outbox_purged), so the checker counts its record as a published event, never a phantom.
  bool purged = false;
};

// Every outbox and archive row, read in one read transaction.
struct OutboxSnapshot {
  std::vector<SnapshotRow> rows;  // outbox, archive and purged rows together, in id order

  // Counts over the rows still in the outbox table (archived rows excluded).
  OutboxCounts Counts() const;
};

// Everything status and metrics report, read in one transaction.
// "unpublished" means one thing everywhere (verify, status, Count): not yet
// published, parked rows included. "pending" is the backlog: unpublished, not
// parked and not delayed (PendingCount counts delayed rows too). "delayed":
// unpublished, not parked, and its not_before still ahead (delayed publish,
// OutboxEvent::not_before_ms; a NULL, past or absurd one is not: it is due).
struct OutboxStatus {
  std::int64_t unpublished = 0;     // not published: pending + delayed + parked
  std::int64_t pending = 0;         // not published, not parked, not delayed
  std::int64_t delayed = 0;         // not published, not parked, not_before ahead
  // Pending rows after their aggregate's first delayed row: under block-key
  // they wait for it (docs/delayed-publish.md). Counted in pending, not in the
  // oldest age.
  std::int64_t behind_delayed = 0;
  // now - the instant the oldest pending row became due, >= 0; 0 when none. A
  // row becomes due at its created_at, or later: at the latest not_before that
  // has passed among its aggregate's unpublished rows, when it is at or after
  // the first of them (it was delayed, or waited under block-key for one that was).
  // Over rows whose created_at keeps the contract only, so it is never an
  // impossible age, and not over rows behind a delayed row: delayed rows do
  // not trip an age alert, by themselves or by what they hold back.
  std::int64_t oldest_pending_age_ms = 0;
  std::int64_t in_backoff = 0;      // unpublished rows whose next attempt is in the future
  std::int64_t parked = 0;
  std::int64_t claimed = 0;         // unpublished rows under an unexpired claim
  std::int64_t published = 0;       // published rows still in the table
  std::int64_t archived = 0;        // rows in outbox_archive
  // Unpublished rows whose created_at breaks the contract (not an integer
  // epoch ms between 2000 and 2100: seconds, text), written before schema 3.
  std::int64_t bad_created_at = 0;
  std::vector<std::int64_t> bad_created_at_ids;  // the first kBadCreatedAtIdsShown, in id order
  // Rows whose published is neither 0 nor 1 (a foreign writer's 2, 'yes' or 'false' on SQLite;
  // always 0 on PostgreSQL, whose column is boolean). The relay reads any value but 0 as
  // published and never sends the row; purge never deletes it (only 1 is the relay's mark).
  std::int64_t bad_published = 0;
};

inline constexpr std::size_t kBadCreatedAtIdsShown = 20;
// An unpublished row that failed at least once: parked, or waiting in backoff.
struct TroubledRow {
  std::int64_t id = 0;
  std::string event_id;
  std::string aggregate_id;
  std::string event_type;
  bool parked = false;
  std::int64_t attempts = 0;
  std::string last_error;  // the delivery error of the last attempt, as the publisher said it
  // now - created_at in ms, >= 0; 0 when created_at breaks the contract (see Status).
  std::int64_t age_ms = 0;
  std::int64_t next_attempt_at_ms = 0;  // epoch ms; meaningful when not parked
};

// A parked row that is its aggregate's oldest unpublished row, and the pending
// rows of that aggregate behind it: under block-key they wait for an unpark
// (Store::Stalls).
struct Stall {
  std::int64_t parked_id = 0;
  std::string event_id;
  std::string aggregate_id;
  std::int64_t rows_held = 0;  // unpublished, unparked rows of the aggregate behind it, > 0
};

struct TroubledRows {
  std::int64_t parked = 0;   // all parked rows
  std::int64_t failing = 0;  // all unparked, unpublished rows with attempts > 0
  std::vector<TroubledRow> rows;  // the first limit of them, parked first, then in id order
};

}  // namespace outbox
