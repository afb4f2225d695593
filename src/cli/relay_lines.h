// The lines `outbox-lab relay` prints about waits, the leader lease, broker outages and stalled
// aggregates: text by default, one JSON object per line with json. Each flushes stdout.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

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
void PrintOutage(const OutageEvent& event, bool json, std::int64_t now_ms);

// "[relay] the outbox was reset ..." (RelayOptions::on_new_run), printed even under --quiet.
void PrintNewRun(const std::string& previous, const std::string& run, std::int64_t dropped,
                 bool json);

}  // namespace outbox::cli
