// The lines `outbox-lab relay` prints about waits, the leader lease, broker outages and stalled
// aggregates: text by default, one JSON object per line with json. Each flushes stdout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "outbox/outbox_store.h"
#include "outbox/relay.h"

namespace outbox::cli {

// Stalled aggregates named at the end of --until-empty and by status, at most.
inline constexpr std::int64_t kStallsShown = 10;

// The stalls as a JSON array of {parked_id, event_id, aggregate_id, rows_held}.
nlohmann::ordered_json StallsJson(const std::vector<Stall>& stalls);

// "[relay] waiting: ..." for a relay that waits on a leader or on claims (now_ms: epoch ms).
void PrintWait(const WaitReport& wait, std::int64_t now_ms, bool json);

// "[relay] leader: acquired/lost/released ..."; dead_token: the lease this relay released from a
// dead owner at its start (0: none), named in the acquisition line.
void PrintLease(const LeaseEvent& event, bool json, std::int64_t dead_token);

// "[relay] broker outage since ..." / "... over" (now_ms: epoch ms), printed even under --quiet.
// An outage begun by the message timeout alone (_MSG_TIMED_OUT, no refused connection) adds that
// the broker may be stopped or slower than delivery_timeout_ms (ms), each try then a copy more.
void PrintOutage(const OutageEvent& event, bool json, std::int64_t now_ms,
                 std::int64_t delivery_timeout_ms);

// "[relay] warning: ..." once at start when a relay of the other coordination mode works on this
// outbox: for a claims relay (leader false) another owner's live leader lease, for a leader
// another owner's unexpired claims. The modes do not fence each other, so each sends rows the
// other sends too: duplicates, never losses (docs/relay.md). Printed even under --quiet. Reads
// the lease and the claims (OutboxStore::ReadLease, ClaimOwners); throws what they throw.
void WarnOtherCoordination(OutboxStore& store, bool leader, const std::string& owner,
                           std::int64_t now_ms, bool json);

// "[relay] the outbox was reset ..." (RelayOptions::on_new_run), printed even under --quiet.
void PrintNewRun(const std::string& previous, const std::string& run, std::int64_t dropped,
                 bool json);

}  // namespace outbox::cli
