// The value types of claims mode (Store::ClaimBatch, SettleBatch and their PgStore and
// OutboxStore twins, outbox/store.h, outbox/pg_store.h): a claim and its request, the failures
// and policy of a settle and its report, the claims' owners and the rows waiting on a backoff.
// Plain values: copy them freely.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "outbox/event.h"
#include "outbox/id_range.h"

namespace outbox {

// A batch claimed by one relay (Store::ClaimBatch).
struct Claim {
  std::int64_t token = 0;  // fencing token: strictly increasing across all claims
  std::vector<OutboxRow> rows;  // in id order
  std::vector<std::int64_t> attempts;  // attempts so far, parallel to rows
};

struct ClaimRequest {
  std::string owner;            // shown in status, e.g. "relay-4242@host"
  // Keyset cursor: claim rows with id > *after_id; empty (the default), from the first row on, 0
  // and negative ids included (outbox/id_range.h).
  std::optional<std::int64_t> after_id;
  std::int64_t up_to_id = kHighestId;  // and id <= up_to_id
  std::int64_t limit = 1000;    // rows, > 0
  std::int64_t lease_ms = 30000;  // the claim expires this long after now_ms
  std::int64_t now_ms = 0;      // epoch ms
  // Per-aggregate order: only the oldest unpublished row of each aggregate is
  // claimable, so a later event never overtakes an earlier one.
  bool block_key = true;
};

// A delivery failure to record against a claimed row.
struct FailedDelivery {
  std::int64_t id = 0;
  std::string error;
  // Park at once, whatever the attempts: the row itself is bad (its headers
  // column, say) and a retry would fail the same way.
  bool park_now = false;
};

struct SettlePolicy {
  int max_attempts = 5;              // attempts after which a row is parked
  std::int64_t backoff_base_ms = 200;   // first retry delay
  std::int64_t backoff_max_ms = 60000;  // cap of the exponential delay
  // The relay's lease (ms; Relay::Settle sets it from RelayOptions::lease_ms): on PostgreSQL,
  // how long a settle's transaction may idle between its statements before the server ends the
  // session, so a frozen relay cannot hold its rows' locks past its lease.
  std::int64_t lease_ms = 30000;
};

// The longest a relay may hold a row back, by a lease (claim_until) or a
// backoff (next_attempt_at), ms: one day. A claim_until or next_attempt_at
// further ahead than this (or not a number) was not written by a relay: an
// application's far-future or malformed value must not hold its row back
// forever (no row may stall a command), so the store treats such a row as
// unclaimed and due. Relay::Relay refuses a longer lease; BackoffMs caps at it.
inline constexpr std::int64_t kMaxHoldMs = 24LL * 60 * 60 * 1000;

// The delay before the next attempt of a row that failed `attempts` times (>= 1), ms:
// backoff_base_ms doubled per earlier failure, capped at backoff_max_ms and at kMaxHoldMs.
inline std::int64_t BackoffMs(std::int64_t attempts, const SettlePolicy& policy) {
  const std::int64_t cap = policy.backoff_max_ms < kMaxHoldMs ? policy.backoff_max_ms : kMaxHoldMs;
  std::int64_t delay = policy.backoff_base_ms;
  for (std::int64_t i = 1; i < attempts && delay < cap; ++i) delay *= 2;
  return delay < cap ? delay : cap;
}

// The attempt count after one more failed delivery of a row whose stored count is `stored`:
// stored + 1, with a foreign writer's negative count read as 0 and a count past 2^31 - 2 read as
// 2^31 - 2 (PostgreSQL's attempts is an INTEGER). Never wraps: every failing row reaches
// max_attempts and is parked instead of holding its aggregate back forever.
inline std::int64_t NextAttempt(std::int64_t stored) {
  constexpr std::int64_t kHighest = 2147483647 - 1;
  return (stored < 0 ? 0 : stored > kHighest ? kHighest : stored) + 1;
}

struct SettleReport {
  std::int64_t marked = 0;   // acknowledged rows marked published
  std::int64_t retried = 0;  // failed rows put into backoff
  std::int64_t parked = 0;   // failed rows parked after max_attempts
  std::int64_t fenced = 0;   // rows whose claim was taken over: left untouched
  // The outbox ids behind marked, parked and fenced (in the order given), for histories.
  std::vector<std::int64_t> marked_ids;
  std::vector<std::int64_t> parked_ids;
  std::vector<std::int64_t> fenced_ids;
  // SettleUnderLease only: the lease had passed to a newer token, nothing was written.
  bool fenced_out = false;
};

// The unexpired claims of one relay (Store::ClaimOwners).
struct ClaimOwner {
  std::string owner;  // ClaimRequest::owner, e.g. "relay-4242@host"
  std::int64_t rows = 0;
  std::int64_t age_ms = 0;         // since its oldest claim was taken, ms
  std::int64_t expires_in_ms = 0;  // until its last lease runs out, ms
  std::int64_t max_token = 0;      // its newest claim's fencing token (ReleaseClaimsOf)
};

// Rows waiting on a backoff (Store::Backoffs).
struct BackoffWait {
  std::int64_t rows = 0;          // unpublished, unparked, unclaimed, next attempt in the future
  std::int64_t first_due_ms = 0;  // epoch ms the first of them may be tried again; 0 when none

  bool operator==(const BackoffWait&) const = default;
};

}  // namespace outbox
