#include "ops/prometheus_text.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <ctime>

namespace outbox::ops {
namespace {

// One family: HELP, TYPE and its one sample. Help texts hold no backslash or newline, which the
// format would need escaped.
void Family(std::string& out, const char* type, const char* name, const char* help, double value) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name,
                 type, name, value);
}

void Gauge(std::string& out, const char* name, const char* help, double value) {
  Family(out, "gauge", name, help, value);
}

void Counter(std::string& out, const char* name, const char* help, std::int64_t value) {
  Family(out, "counter", name, help, static_cast<double>(value));
}

double Seconds(std::int64_t ms) { return static_cast<double>(ms) / 1000.0; }

// A label value of the text format: backslash, double quote and newline escaped.
std::string LabelValue(const std::string& value) {
  std::string escaped;
  for (const char c : value) {
    if (c == '\\' || c == '"') escaped += '\\';
    if (c == '\n') {
      escaped += "\\n";
      continue;
    }
    escaped += c;
  }
  return escaped;
}

std::string UtcSeconds(std::int64_t epoch_ms) {
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}Z", fmt::gmtime(static_cast<std::time_t>(epoch_ms / 1000)));
}

}  // namespace

std::string StatusMetricsText(const OutboxStatus& s, const LeaderLease& lease,
                              const std::vector<Stall>& stalls, std::int64_t now_ms,
                              const std::optional<BrokerOutage>& outage) {
  std::string out;
  Gauge(out, "outbox_unpublished_rows", "Rows not yet published, parked rows included.",
        static_cast<double>(s.unpublished));
  Gauge(out, "outbox_pending_rows", "Rows not yet published, not parked and not delayed.",
        static_cast<double>(s.pending));
  Gauge(out, "outbox_delayed_rows",
        "Rows not yet published whose not_before is still ahead (delayed publish).",
        static_cast<double>(s.delayed));
  Gauge(out, "outbox_behind_delayed_rows",
        "Pending rows after a delayed row of their aggregate (block-key holds them back).",
        static_cast<double>(s.behind_delayed));
  Gauge(out, "outbox_oldest_pending_age_seconds",
        "Time since the oldest pending row became due (delayed rows, and rows behind them, left "
        "out); alert on this, not on the row count.",
        Seconds(s.oldest_pending_age_ms));
  Gauge(out, "outbox_backoff_rows", "Unpublished rows waiting for their next attempt.",
        static_cast<double>(s.in_backoff));
  Gauge(out, "outbox_parked_rows", "Rows parked after max attempts; need outbox-lab unpark.",
        static_cast<double>(s.parked));
  Gauge(out, "outbox_claimed_rows", "Unpublished rows under an unexpired relay claim.",
        static_cast<double>(s.claimed));
  std::int64_t stalled = 0;
  for (const Stall& st : stalls) stalled += st.rows_held;
  Gauge(out, "outbox_stalled_rows",
        "Pending rows held back behind a parked row of their aggregate (block-key; the first 10 "
        "parked rows counted); status names the parked rows.",
        static_cast<double>(stalled));
  Gauge(out, "outbox_published_rows", "Published rows still in the outbox table (until purge).",
        static_cast<double>(s.published));
  Gauge(out, "outbox_archived_rows", "Rows in outbox_archive.", static_cast<double>(s.archived));
  Gauge(out, "outbox_bad_created_at_rows",
        "Unpublished rows whose created_at is not epoch ms (left out of the oldest age).",
        static_cast<double>(s.bad_created_at));
  Gauge(out, "outbox_bad_published_rows",
        "Rows whose published is neither 0 nor 1 (another program's value): never sent.",
        static_cast<double>(s.bad_published));
  Gauge(out, "outbox_leader_token",
        "Fencing token of the leader lease (relay --coordination leader); 0 before the first.",
        static_cast<double>(lease.token));
  Gauge(out, "outbox_leader_lease_left_seconds",
        "Time until the leader's lease runs out unless renewed; 0 when no relay leads.",
        lease.Live(now_ms) ? Seconds(lease.until_ms - now_ms) : 0.0);
  // The outage as a labelled series (its cause and start in the labels), as Prometheus' own
  // ALERTS series are; unlabelled 0 while none is recorded.
  out += "# HELP outbox_broker_outage 1 while a relay waits out a broker outage (no attempt "
         "counted, nothing parked); its labels name the cause and start.\n"
         "# TYPE outbox_broker_outage gauge\n";
  if (outage && outage->active())
    out += fmt::format("outbox_broker_outage{{cause=\"{}\",since=\"{}\"}} 1\n",
                       LabelValue(outage->cause), UtcSeconds(outage->since_ms));
  else
    out += "outbox_broker_outage 0\n";
  Gauge(out, "outbox_broker_outage_seconds", "Time since the recorded broker outage began; 0 when none.",
        outage && outage->active() ? Seconds(std::max<std::int64_t>(0, now_ms - outage->since_ms)) : 0.0);
  return out;
}

std::string WalSlotMetricsText(const WalProgress& wal) {
  std::string out;
  const std::string slot = fmt::format("slot=\"{}\"", LabelValue(wal.slot));
  const auto labelled = [&](const char* name, const char* help, const std::string& labels,
                            double value) {
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} gauge\n{}{{{}}} {}\n", name,
                   help, name, name, labels, value);
  };
  labelled("outbox_wal_slot_lag_bytes",
           "WAL written since the WAL relay's slot last confirmed (pg_current_wal_lsn() - "
           "confirmed_flush_lsn); the server keeps it while the slot lags.",
           slot, static_cast<double>(wal.lag_bytes));
  labelled("outbox_wal_slot_active", "1 while a WAL relay (walsender) streams the slot, else 0.",
           slot, wal.active ? 1.0 : 0.0);
  labelled("outbox_wal_slot_status",
           "1, labelled with the slot's wal_status: reserved, extended, unreserved or lost.",
           fmt::format("{},wal_status=\"{}\"", slot,
                       LabelValue(wal.wal_status.empty() ? "unknown" : wal.wal_status)),
           1.0);
  if (wal.safe_wal_size_bytes)
    labelled("outbox_wal_slot_safe_wal_size_bytes",
             "WAL the server may still write before it invalidates the slot "
             "(pg_replication_slots.safe_wal_size).",
             slot, static_cast<double>(*wal.safe_wal_size_bytes));
  if (wal.keep_size_bytes)
    labelled("outbox_wal_slot_keep_size_bytes",
             "The server's max_slot_wal_keep_size: the most WAL a slot may keep before it is "
             "invalidated.",
             slot, static_cast<double>(*wal.keep_size_bytes));
  return out;
}

std::string RelayMetricsText(const RelaySnapshot& r, const RelayVerdicts& v) {
  std::string out;
  const std::int64_t since = r.last_turn_steady_ms > 0 ? r.last_turn_steady_ms : r.started_steady_ms;
  Gauge(out, "outbox_relay_last_loop_age_seconds",
        "Time since the relay loop last turned (since the start before its first turn).",
        Seconds(v.now_steady_ms - since));
  Counter(out, "outbox_relay_loop_turns_total", "Turns of the relay loop.", r.turns);
  Counter(out, "outbox_relay_batches_total", "Batches settled by this relay.", r.batches);
  Gauge(out, "outbox_relay_in_flight_batches",
        "Batches claimed or read and not yet settled, at the loop's last turn.",
        static_cast<double>(r.in_flight));
  Counter(out, "outbox_relay_acked_rows_total", "Rows the broker acknowledged.", r.acked);
  Counter(out, "outbox_relay_failed_deliveries_total",
          "Rows whose delivery failed, counted at every try (a broker outage's rows too, "
          "though no attempt is recorded on them).",
          r.failed);
  Counter(out, "outbox_relay_marked_rows_total", "Rows this relay marked published.", r.marked);
  Counter(out, "outbox_relay_parked_rows_total", "Rows this relay parked after max attempts.",
          r.parked);
  Counter(out, "outbox_relay_fenced_rows_total",
          "Rows whose settle was fenced out: another relay had taken them over.", r.fenced);
  const bool leader =
      r.lease_token > 0 &&
      (!v.lease || (v.lease->token == r.lease_token && v.lease->Live(v.lease_now_ms)));
  Gauge(out, "outbox_relay_leader",
        "1 while this relay holds the leader lease (leader mode), else 0.", leader ? 1.0 : 0.0);
  Counter(out, "outbox_relay_lease_acquired_total", "Leader terms this relay began.",
          r.lease_acquired);
  Counter(out, "outbox_relay_lease_lost_total", "Leader terms this relay lost to another relay.",
          r.lease_lost);
  Counter(out, "outbox_relay_db_retries_total",
          "Runs of database errors (busy, I/O) the loop waited out.", r.db_retries);
  Counter(out, "outbox_relay_db_reconnect_attempts_total",
          "Reconnect attempts to a database server that was unreachable.", r.connection_losses);
  Gauge(out, "outbox_relay_healthy", "1 while /healthz answers 200 (the loop turns), else 0.",
        v.healthy ? 1.0 : 0.0);
  Gauge(out, "outbox_relay_ready", "1 while /readyz answers 200 (this relay can publish), else 0.",
        v.ready ? 1.0 : 0.0);
  Gauge(out, "outbox_relay_status_read_failed",
        "1 when this scrape could not read the outbox status families from the database.",
        v.status_read_failed ? 1.0 : 0.0);
  return out;
}

}  // namespace outbox::ops
