#include "cli/relay_lines.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <string>

#include "cli/outage_text.h"
#include "lab/broker/json_bytes.h"
#include "outbox/duration.h"
#include "outbox/lease.h"

namespace outbox::cli {
namespace {

// "23:59:01.123Z (in 28980ms)": an epoch-ms instant as UTC time of day and as a
// distance from now_ms.
std::string Until(std::int64_t until_ms, std::int64_t now_ms) {
  const std::time_t seconds = static_cast<std::time_t>(until_ms / 1000);
  std::tm tm = {};
  gmtime_r(&seconds, &tm);
  return fmt::format("{:02}:{:02}:{:02}.{:03}Z (in {})", tm.tm_hour, tm.tm_min, tm.tm_sec,
                     until_ms % 1000, FormatDuration(std::max<std::int64_t>(0, until_ms - now_ms)));
}

}  // namespace

nlohmann::ordered_json StallsJson(const std::vector<Stall>& stalls) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const Stall& s : stalls)
    out.push_back({{"parked_id", s.parked_id}, {"event_id", s.event_id},
                   {"aggregate_id", s.aggregate_id}, {"rows_held", s.rows_held}});
  return out;
}


// One line per part of a wait: an idle relay with work left says why.
void PrintWait(const WaitReport& wait, std::int64_t now_ms, bool json) {
  if (wait.leader.token > 0) {
    if (json)
      fmt::print("{}\n", lab::DumpJson(nlohmann::ordered_json{{"report", "wait"},
                                                              {"on", "leader"},
                                                              {"owner", wait.leader.owner},
                                                              {"token", wait.leader.token},
                                                              {"rows", wait.leader.rows},
                                                              {"until_ms", wait.leader.until_ms}}));
    else
      fmt::print("[relay] waiting: standby; {} leads with token {} ({} rows pending), lease until "
                 "{} unless renewed\n",
                 lab::EscapeBytes(wait.leader.owner), wait.leader.token, wait.leader.rows,
                 Until(wait.leader.until_ms, now_ms));
  }
  for (const WaitReport::Lease& lease : wait.leases) {
    if (json)
      fmt::print("{}\n", lab::DumpJson(nlohmann::ordered_json{{"report", "wait"},
                                                              {"on", "lease"},
                                                              {"owner", lease.owner},
                                                              {"rows", lease.rows},
                                                              {"until_ms", lease.until_ms}}));
    else
      fmt::print("[relay] waiting: {} rows claimed by {} until {}, when its lease runs out\n",
                 lease.rows,
                 lease.owner.empty() ? std::string("no owner (claim columns another program set)")
                                     : lab::EscapeBytes(lease.owner),
                 Until(lease.until_ms, now_ms));
  }
  if (wait.backoff.rows > 0) {
    if (json)
      fmt::print("{}\n", lab::DumpJson(nlohmann::ordered_json{{"report", "wait"},
                                                              {"on", "backoff"},
                                                              {"rows", wait.backoff.rows},
                                                              {"until_ms", wait.backoff.first_due_ms}}));
    else
      fmt::print("[relay] waiting: {} rows in backoff after failed deliveries; the first is due "
                 "at {}\n",
                 wait.backoff.rows, Until(wait.backoff.first_due_ms, now_ms));
  }
  std::fflush(stdout);
}

// One line per change of leadership (leader mode). dead_token: the token of a dead leader's
// lease this relay released at start (0: none), so that its until_ms of 0 is not read as that
// leader's clean release.
void PrintLease(const LeaseEvent& event, bool json, std::int64_t dead_token) {
  const char* kind = event.kind == LeaseEvent::Kind::kAcquired ? "acquired"
                     : event.kind == LeaseEvent::Kind::kLost   ? "lost"
                                                               : "released";
  if (json) {
    nlohmann::ordered_json line = {{"report", "lease"}, {"event", kind},
                                   {"owner", event.lease.owner}, {"token", event.lease.token},
                                   {"until_ms", event.lease.until_ms}};
    if (event.kind == LeaseEvent::Kind::kAcquired) {
      line["previous_owner"] = event.previous.owner;
      line["previous_token"] = event.previous.token;
    }
    fmt::print("{}\n", lab::DumpJson(line));
  } else if (event.kind == LeaseEvent::Kind::kAcquired) {
    fmt::print("[relay] leader: acquired the lease with token {}{}\n", event.lease.token,
               event.previous.token == 0
                   ? std::string()
               // until_ms 0: the last leader released its lease (a clean stop), no failover.
               : event.previous.until_ms == 0 && event.previous.owner == kResetLeaseOwner
                   ? fmt::format(", after a reset of the outbox ended the last term (token {})",
                                 event.previous.token)
               : event.previous.until_ms == 0 && event.previous.token != dead_token
                   ? fmt::format(", after its clean release by {} (token {})",
                                 lab::EscapeBytes(event.previous.owner), event.previous.token)
               : event.previous.token == dead_token
                   ? fmt::format(", taking over from {} (token {})",
                                 lab::EscapeBytes(event.previous.owner), event.previous.token)
                   : fmt::format(", taking over from {} (token {}), whose lease ran out",
                                 lab::EscapeBytes(event.previous.owner), event.previous.token));
  } else if (event.kind == LeaseEvent::Kind::kLost) {
    fmt::print("[relay] leader: lost the lease of token {} to a newer term; standby now, "
               "settles of batches in flight are fenced out\n",
               event.lease.token);
  } else {
    fmt::print("[relay] leader: released the lease of token {}\n", event.lease.token);
  }
  std::fflush(stdout);
}

void PrintNewRun(const std::string& previous, const std::string& run, std::int64_t dropped,
                 bool json) {
  if (json) {
    nlohmann::ordered_json line = {{"report", "reset"}, {"previous_run", previous},
                                   {"run", run}, {"dropped", dropped}};
    fmt::print("{}\n", lab::DumpJson(line));
  } else {
    fmt::print("[relay] the outbox was reset: run {} ended, run {} began; the {} rows of the batch "
               "read across it are not sent (the new outbox is read from its first row)\n",
               lab::EscapeBytes(previous), lab::EscapeBytes(run), dropped);
  }
  std::fflush(stdout);
}

// One line per change of a broker outage (printed under --quiet too: an operator must see why
// the relay stands still). now_ms: when it is printed, for an outage's length.
void PrintOutage(const OutageEvent& event, bool json, std::int64_t now_ms,
                 std::int64_t delivery_timeout_ms) {
  const char* kind = event.kind == OutageEvent::Kind::kBegun    ? "begun"
                     : event.kind == OutageEvent::Kind::kGoesOn ? "goes-on"
                                                                : "over";
  if (json) {
    nlohmann::ordered_json line = {{"report", "outage"}, {"event", kind}};
    line.update(OutageJson(event.outage, event.rows_waiting));
    line["retry_in_ms"] = event.retry_in_ms;
    fmt::print("{}\n", lab::DumpJson(line));
  } else if (event.kind == OutageEvent::Kind::kOver) {
    fmt::print("[relay] broker outage over: delivering again after {:.1f} s (it began {}: {})\n",
               static_cast<double>(std::max<std::int64_t>(0, now_ms - event.outage.since_ms)) / 1000.0,
               UtcTime(event.outage.since_ms), lab::EscapeBytes(event.outage.cause));
  } else {
    // Only the message's own timeout, no refused connection: the broker may be up but slow,
    // and then each try can leave one more copy on the topic.
    const bool timed_out_only =
        event.kind == OutageEvent::Kind::kBegun &&
        event.outage.cause.find("_MSG_TIMED_OUT") != std::string::npos;
    fmt::print("[relay] {}; no attempt counted, none parked; next try in {}{}\n",
               lab::EscapeBytes(OutageText(event.outage, event.rows_waiting)),
               FormatDuration(event.retry_in_ms),
               timed_out_only ? fmt::format(" (no broker refused: it is stopped, or answers slower "
                                            "than --delivery-timeout {}, and then each try may "
                                            "add a copy of these events)",
                                            FormatDuration(delivery_timeout_ms))
                              : std::string());
  }
  std::fflush(stdout);
}

void WarnOtherCoordination(OutboxStore& store, bool leader, const std::string& owner,
                           std::int64_t now_ms, bool json) {
  std::vector<std::string> others;
  if (leader) {
    for (const ClaimOwner& claim : store.ClaimOwners(now_ms))
      if (claim.owner != owner) others.push_back(claim.owner);
  } else if (const LeaderLease lease = store.ReadLease();
             lease.Live(now_ms) && !lease.owner.empty() && lease.owner != owner) {
    others.push_back(lease.owner);
  }
  if (others.empty()) return;
  const char* other_mode = leader ? "claims" : "leader";
  if (json) {
    fmt::print("{}\n", lab::DumpJson(nlohmann::ordered_json{
                           {"report", "warning"}, {"other_coordination", other_mode},
                           {"owners", others}}));
  } else {
    std::vector<std::string> names;
    for (const std::string& other : others) names.push_back(lab::EscapeBytes(other));
    fmt::print("[relay] warning: {} also works on this outbox with --coordination {}; the two "
               "modes do not fence each other, so both send the same rows (duplicates, never "
               "losses): run every relay of one outbox in one mode\n",
               fmt::join(names, ", "), other_mode);
  }
  std::fflush(stdout);
}

}  // namespace outbox::cli
