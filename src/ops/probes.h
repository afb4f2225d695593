// The verdicts of relay --http's probes, as pure functions of what the relay loop published
// (RelaySnapshot) and what the endpoint read itself: /healthz (liveness: is the loop turning?)
// and /readyz (readiness: can this relay publish now?). No I/O; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "outbox/relay_observer.h"

namespace outbox::ops {

// How long the loop may go without a turn before /healthz answers 503, ms. An idle loop turns at
// least every idle_max_ms; a busy one may wait on the oldest batch's delivery reports for up to
// the delivery timeout plus 5 s (KafkaPublisher::AwaitOldest). So: factor x idle_max_ms +
// delivery_timeout_ms + 5000. Inputs in ms; factor >= 1.
std::int64_t HealthStallLimitMs(std::int64_t factor, std::int64_t idle_max_ms,
                                std::int64_t delivery_timeout_ms);

struct ProbeVerdict {
  bool ok = false;
  std::vector<std::string> reasons;  // why not ok; empty when ok
  // The body: "ok\n", or one reason a line.
  std::string Body() const;
};

// /healthz at now_steady_ms: ok while the loop turned within stall_limit_ms (HealthStallLimitMs);
// before its first turn, within stall_limit_ms of the start.
ProbeVerdict Healthz(const RelaySnapshot& snapshot, std::int64_t now_steady_ms,
                     std::int64_t stall_limit_ms);

// What /readyz read besides the snapshot.
struct ReadyInputs {
  std::int64_t now_steady_ms = 0;
  std::int64_t stall_limit_ms = 0;  // as for Healthz: a stalled loop is not ready either
  // The oldest pending (unpublished, not parked) row's age, ms; nullopt: the read failed.
  std::optional<std::int64_t> oldest_pending_age_ms;
  std::string status_error;         // why the read failed ("" when it did not)
  std::int64_t ready_max_age_ms = 0;  // --ready-max-age; 0: no age rule
  std::string broker_error;         // "" when the broker answered the probe
};

// /readyz: ok when the loop turns, the relay can publish (leader mode: it holds the lease; claims
// mode: connected), the database and broker answer, and the oldest pending row is not older
// than ready_max_age_ms. Parked rows do not count: they have their own alert, and a relay
// restarted for them would not publish them either.
ProbeVerdict Readyz(const RelaySnapshot& snapshot, const ReadyInputs& in);

}  // namespace outbox::ops
