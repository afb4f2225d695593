// The value types of leader mode (relay --coordination leader: Store::ReadLease, AcquireLease,
// ReadPage and their PgStore and OutboxStore twins, outbox/store.h, outbox/pg_store.h): the
// lease, the outcome of an acquisition and a leader's page request. Plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/id_range.h"

namespace outbox {

// The leader lease of relay --coordination leader (Store::ReadLease).
struct LeaderLease {
  std::string owner;               // the holder's owner name, "" when never held,
                                   // kResetLeaseOwner after a PostgreSQL reset ended the term
  std::int64_t token = 0;          // fencing token of the current term; 0 before the first
  std::int64_t until_ms = 0;       // epoch ms the term runs out; 0 after ReleaseLease
  std::int64_t acquired_at_ms = 0; // epoch ms the term began

  // True when a relay holds it at now_ms (epoch ms).
  bool Live(std::int64_t now_ms) const { return token > 0 && until_ms > now_ms; }
  bool operator==(const LeaderLease&) const = default;
};

// The lease row's owner once PgStore::ResetSchema has ended the term held (and stepped the token
// past it, a term nobody holds). Only the relay's lease line reads it (to name the reset);
// fencing goes by the token alone.
inline constexpr const char* kResetLeaseOwner = "(reset)";

// The outcome of Store::AcquireLease.
struct LeaseAcquisition {
  bool acquired = false;
  LeaderLease lease;     // after the attempt: ours when acquired, else the live holder's
  LeaderLease previous;  // before it: whose term ended (owner "" and token 0 for the first)
};

// A row a leader has in flight (sent, not yet settled): its id and its aggregate, a view that
// must outlive the ReadPage call it is passed to (PageRequest::in_flight).
struct InFlightRow {
  std::int64_t id = 0;
  std::string_view aggregate_id;
};

// A leader's page (Store::ReadPage).
struct PageRequest {
  // Keyset cursor: rows with id > *after_id; empty (the default), from the first row on, 0 and
  // negative ids included (outbox/id_range.h).
  std::optional<std::int64_t> after_id;
  std::int64_t up_to_id = kHighestId;  // and id <= up_to_id
  std::int64_t limit = 1000;  // rows, > 0
  std::int64_t now_ms = 0;    // epoch ms: backoffs and claims are judged at it
  // Only each aggregate's oldest unpublished row (FailureMode::kBlockKey in
  // leader mode), as ClaimRequest::block_key.
  bool block_key = true;
  // Under block_key, on SQLite: the rows the caller has in flight, any order (the relay's
  // sent and unsettled rows). When every unpublished row at or below after_id is one of them
  // (always, with no after_id), Store::ReadPage holds aggregates back once per page instead of
  // once per row (same rows); otherwise it checks each row. An entry with another aggregate than
  // its row's is a bug of the caller's that can reorder that aggregate; an entry for a row not in
  // flight only holds back more. Ignored by PgStore.
  std::vector<InFlightRow> in_flight;
  // Under block_key, on SQLite and PostgreSQL: how many unpublished rows ReadPage may step over
  // without taking them (held back or not sendable) before it takes the page from each
  // aggregate's oldest unpublished row instead (same rows, cost per aggregate, not per row), and
  // how many aggregates that look may find before it gives up and reads on. 0 (or negative): a
  // quarter page (at least 64 rows) and two pages (at least 128 aggregates).
  std::int64_t scan_budget = 0;
};

}  // namespace outbox
