#include "ops/probes.h"

#include <fmt/format.h>

#include "outbox/duration.h"

namespace outbox::ops {

std::int64_t HealthStallLimitMs(std::int64_t factor, std::int64_t idle_max_ms,
                                std::int64_t delivery_timeout_ms) {
  return factor * idle_max_ms + delivery_timeout_ms + 5000;
}

std::string ProbeVerdict::Body() const {
  if (ok) return "ok\n";
  std::string out;
  for (const std::string& r : reasons) out += r + "\n";
  return out;
}

ProbeVerdict Healthz(const RelaySnapshot& s, std::int64_t now_steady_ms,
                     std::int64_t stall_limit_ms) {
  ProbeVerdict v;
  const bool turned = s.last_turn_steady_ms > 0;
  const std::int64_t age = now_steady_ms - (turned ? s.last_turn_steady_ms : s.started_steady_ms);
  if (age > stall_limit_ms)
    v.reasons.push_back(fmt::format(
        "relay loop stalled: {} for {} (limit {}: --health-factor x --idle-max + "
        "--delivery-timeout + 5s)",
        turned ? "no turn" : "no first turn since the start", FormatDuration(age),
        FormatDuration(stall_limit_ms)));
  v.ok = v.reasons.empty();
  return v;
}

ProbeVerdict Readyz(const RelaySnapshot& s, const ReadyInputs& in) {
  ProbeVerdict v = Healthz(s, in.now_steady_ms, in.stall_limit_ms);
  if (s.stopping) v.reasons.push_back("relay stopping: a stop was requested");
  if (in.now_steady_ms < s.connection_lost_until_steady_ms)
    v.reasons.push_back(fmt::format("database unreachable: {}", s.db_error));
  if (s.leader_mode && s.lease_token == 0)
    v.reasons.push_back(
        "standby: another relay holds the leader lease (or none was taken yet); this relay "
        "publishes only after it lapses");
  if (!in.broker_error.empty())
    v.reasons.push_back(fmt::format("broker unreachable: {}", in.broker_error));
  if (!in.oldest_pending_age_ms)
    v.reasons.push_back(fmt::format("database read failed: {}", in.status_error));
  else if (in.ready_max_age_ms > 0 && *in.oldest_pending_age_ms > in.ready_max_age_ms)
    v.reasons.push_back(fmt::format("backlog too old: the oldest pending row is {} old, above "
                                    "--ready-max-age {}",
                                    FormatDuration(*in.oldest_pending_age_ms),
                                    FormatDuration(in.ready_max_age_ms)));
  v.ok = v.reasons.empty();
  return v;
}

}  // namespace outbox::ops
