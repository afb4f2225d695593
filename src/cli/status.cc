#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/duration.h"
#include "cli/option_values.h"
#include "cli/outage_text.h"
#include "lab/broker/json_bytes.h"
#include "outbox/open_store.h"
#include "lab/chapter/relay_owner.h"
#include "lab/report/page_file.h"
#include "ops/prometheus_text.h"
#include "outbox/error.h"
#include "outbox/pg_store.h"

#include "cli/wal_relay_run.h"
#include "outbox/pg/pgoutput.h"
#include "outbox/wal_progress.h"

#include <algorithm>
#include <limits>

namespace outbox::cli {
namespace {

struct StatusView {
  OutboxStatus status;
  std::vector<ClaimOwner> owners;
  LeaderLease lease;       // relay --coordination leader: the lease as it stands
  std::int64_t now_ms = 0; // when read
  std::int64_t wal_bytes = 0;  // OutboxStore::WalSizeBytes; not measured on PostgreSQL
  Backend backend = Backend::kSqlite;
  std::vector<Stall> stalls;  // parked rows holding back their aggregates (OutboxStore::Stalls)
  // PostgreSQL: the oldest transaction pinning the MVCC horizon past the threshold; never on
  // SQLite (a reader there holds back only the WAL checkpoint, see wal-bytes).
  std::optional<HorizonHolder> horizon;
  // The broker outage a relay recorded and has not cleared (OutboxStore::ReadOutage).
  std::optional<BrokerOutage> outage;
  // PostgreSQL: the WAL relay's slot, when one exists (relay --source wal).
  std::optional<WalProgress> wal;
};

StatusView ReadStatusView(const GlobalOptions& global, std::int64_t horizon_threshold_ms) {
  auto store = OpenStore(global.db, OpenMode::kReadOnly, global.MakeStoreOptions());
  // The lease before the instant the view is judged at: ReadLease returns the end a relay wrote
  // (SQLite) or moves the server's time left into the store's clock as it reads it (PostgreSQL).
  // With now_ms read first, a renewal between the two reads, or the round trips of the reads in
  // between, showed more time left than the lease has (lease-left-ms above the relay's --lease).
  const LeaderLease lease = store->ReadLease();
  const std::int64_t now_ms = store->clock().EpochMs();
  StatusView view;
  view.status = store->Status(now_ms);
  view.owners = store->ClaimOwners(now_ms);
  view.lease = lease;
  view.now_ms = now_ms;
  view.wal_bytes = store->WalSizeBytes();
  view.backend = store->backend();
  if (view.status.parked > 0) view.stalls = store->Stalls(10);
  view.outage = store->ReadOutage();
  if (auto* pg_store = dynamic_cast<PgStore*>(store.get()))
    view.horizon = pg_store->OldestHorizonHolder(horizon_threshold_ms);
  if (store->backend() == Backend::kPostgres) view.wal = ReadWalProgress(global.db);
  if (view.wal && view.wal->pending_ids) {
    // The WAL relay marks no row: a row the flag calls unpublished counts as published once its
    // slot holds no insert of it and streams it (as verify and check count). Parked rows stay as
    // they are.
    std::int64_t sent = 0;
    for (const OutboxRow& row :
         store->FetchUnpublished(std::nullopt, std::numeric_limits<std::int64_t>::max()))
      if (view.wal->Confirmed(row.id)) ++sent;
    sent = std::min(sent, view.status.pending);
    // Nothing left pending: the age was a confirmed row's, no one's wait. (With rows left, the
    // flag's figure stays: it may be a confirmed row's, an age too high, never too low.)
    if (sent == view.status.pending) view.status.oldest_pending_age_ms = 0;
    view.status.unpublished -= sent;
    view.status.pending -= sent;
    view.status.published += sent;
  }
  return view;
}

// Default of status --horizon-threshold: a transaction open a minute is no OLTP transaction.
constexpr std::int64_t kHorizonThresholdMs = 60000;

// Prometheus text exposition format, version 0.0.4: the families relay --http serves too.
std::string PrometheusText(const StatusView& view) {
  std::string text =
      ops::StatusMetricsText(view.status, view.lease, view.stalls, view.now_ms, view.outage);
  if (view.wal) text += ops::WalSlotMetricsText(*view.wal);
  return text;
}

}  // namespace

Command AddStatusCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "status", "Backlog of the outbox: unpublished (pending + delayed + parked), pending, "
                "delayed, oldest pending age, backoff, parked, claimed, published");
  auto json = std::make_shared<bool>(false);
  sub->add_flag("--json", *json, "Print one JSON object");
  auto horizon_threshold_ms = std::make_shared<std::int64_t>(kHorizonThresholdMs);
  AddDurationOption(*sub, "--horizon-threshold", *horizon_threshold_ms,
                    "PostgreSQL: name the oldest transaction holding back VACUUM's horizon once "
                    "it has been open this long",
                    0, 7LL * 24 * 3600 * 1000);
  auto wal_lag_warn = std::make_shared<std::int64_t>(0);
  sub->add_option("--wal-lag-warn", *wal_lag_warn,
                  "PostgreSQL, relay --source wal: warn once the WAL slot lags this many bytes "
                  "(0: half of the server's max_slot_wal_keep_size, or 1 GiB without a limit)")
      ->transform(IntegerInRange(0, std::numeric_limits<std::int64_t>::max()))
      ->capture_default_str();
  return {sub, [&global, json, horizon_threshold_ms, wal_lag_warn]() -> ExitCode {
            const StatusView view = ReadStatusView(global, *horizon_threshold_ms);
            const OutboxStatus& s = view.status;
            const LeaderLease& lease = view.lease;
            const bool live = lease.Live(view.now_ms);
            const std::int64_t lease_left_ms = live ? lease.until_ms - view.now_ms : 0;
            if (*json) {
              nlohmann::ordered_json out;
              out["unpublished"] = s.unpublished;
              out["pending"] = s.pending;
              out["delayed"] = s.delayed;
              out["behind_delayed"] = s.behind_delayed;
              out["oldest_pending_age_ms"] = s.oldest_pending_age_ms;
              out["in_backoff"] = s.in_backoff;
              out["parked"] = s.parked;
              out["claimed"] = s.claimed;
              out["published"] = s.published;
              out["archived"] = s.archived;
              out["bad_created_at"] = s.bad_created_at;
              out["bad_created_at_ids"] = s.bad_created_at_ids;
              out["bad_published"] = s.bad_published;
              // null on PostgreSQL: the server's WAL is not a file next to --db.
              if (view.backend == Backend::kSqlite) out["wal_bytes"] = view.wal_bytes;
              else out["wal_bytes"] = nullptr;
              out["claims"] = nlohmann::ordered_json::array();
              for (const ClaimOwner& c : view.owners)
                out["claims"].push_back(
                    {{"owner", c.owner}, {"rows", c.rows}, {"age_ms", c.age_ms},
                     {"expires_in_ms", c.expires_in_ms},
                     {"owner_process", lab::OwnerLivenessName(lab::OwnerLivenessHere(c.owner))}});
              out["leader"] = nullptr;
              if (live)
                out["leader"] = {
                    {"owner", lease.owner}, {"token", lease.token},
                    {"lease_left_ms", lease_left_ms},
                    {"owner_process", lab::OwnerLivenessName(lab::OwnerLivenessHere(lease.owner))}};
              out["lease_token"] = lease.token;
              out["stalls"] = nlohmann::ordered_json::array();
              for (const Stall& st : view.stalls)
                out["stalls"].push_back({{"parked_id", st.parked_id}, {"event_id", st.event_id},
                                         {"aggregate_id", st.aggregate_id},
                                         {"rows_held", st.rows_held}});
              out["outage"] = nullptr;
              if (view.outage) out["outage"] = OutageJson(*view.outage, s.pending);
              out["horizon"] = nullptr;
              if (view.horizon)
                out["horizon"] = {{"pid", view.horizon->pid},
                                  {"application_name", view.horizon->application_name},
                                  {"state", view.horizon->state},
                                  {"database", view.horizon->database},
                                  {"transaction_age_ms", view.horizon->transaction_age_ms},
                                  {"xmin_age", view.horizon->xmin_age},
                                  {"outbox_dead_tuples", view.horizon->outbox_dead_tuples},
                                  {"threshold_ms", *horizon_threshold_ms}};
              out["wal_slot"] = nullptr;
              if (view.wal)
                out["wal_slot"] = {
                    {"slot", view.wal->slot},
                    {"active", view.wal->active},
                    {"active_pid", view.wal->active ? nlohmann::ordered_json(view.wal->active_pid)
                                                    : nlohmann::ordered_json(nullptr)},
                    {"confirmed_lsn", pg::FormatLsn(view.wal->confirmed)},
                    {"lag_bytes", view.wal->lag_bytes},
                    {"wal_status", view.wal->wal_status},
                    {"safe_wal_size", view.wal->safe_wal_size_bytes
                                          ? nlohmann::ordered_json(*view.wal->safe_wal_size_bytes)
                                          : nlohmann::ordered_json(nullptr)},
                    {"max_slot_wal_keep_size",
                     view.wal->keep_size_bytes ? nlohmann::ordered_json(*view.wal->keep_size_bytes)
                                               : nlohmann::ordered_json(nullptr)},
                    {"lag_warn_bytes", WalLagWarnBytes(*view.wal, *wal_lag_warn)},
                    {"warning", WalSlotLagWarning(*view.wal, *wal_lag_warn).empty()
                                    ? nlohmann::ordered_json(nullptr)
                                    : nlohmann::ordered_json(
                                          WalSlotLagWarning(*view.wal, *wal_lag_warn))},
                    {"pending", view.wal->pending_ids
                                    ? nlohmann::ordered_json(view.wal->pending_ids->size())
                                    : nlohmann::ordered_json(nullptr)}};
              fmt::print("{}\n", lab::DumpJson(out));
            } else {
              fmt::print("[status] unpublished={} pending={} delayed={} oldest-pending-age-ms={} "
                         "in-backoff={} parked={} claimed={} published={} archived={}\n",
                         s.unpublished, s.pending, s.delayed, s.oldest_pending_age_ms,
                         s.in_backoff, s.parked, s.claimed, s.published, s.archived);
              if (s.behind_delayed > 0)
                fmt::print("[status] behind-delayed={}: pending rows after a delayed row of their "
                           "aggregate; under block-key they wait for it, and are left out of the "
                           "oldest age\n",
                           s.behind_delayed);
              if (view.backend == Backend::kSqlite)
                fmt::print("[status] wal-bytes={}\n", view.wal_bytes);
              else
                fmt::print("[status] wal-bytes not measured: on PostgreSQL the WAL is the "
                           "server's, not a file next to --db\n");
              if (view.wal) {
                PrintWalProgress("status", *view.wal);
                const std::string warning = WalSlotLagWarning(*view.wal, *wal_lag_warn);
                if (!warning.empty()) fmt::print("[status] warning: {}\n", warning);
              }
              if (s.bad_created_at > 0)
                fmt::print("[status] bad-created-at={} ids={}{}: created_at is not epoch ms; "
                           "left out of the oldest age\n",
                           s.bad_created_at, fmt::join(s.bad_created_at_ids, ","),
                           s.bad_created_at > static_cast<std::int64_t>(s.bad_created_at_ids.size())
                               ? ",..."
                               : "");
              if (s.bad_published > 0)
                fmt::print("[status] bad-published={}: published is neither 0 nor 1 (another "
                           "program's value); the relay reads it as published and never sends "
                           "these rows (set published = 0 to send them)\n",
                           s.bad_published);
              for (const ClaimOwner& c : view.owners)
                fmt::print("[status] claim owner={} rows={} age-ms={} expires-in-ms={} "
                           "owner-process={}\n",
                           lab::EscapeBytes(c.owner), c.rows, c.age_ms, c.expires_in_ms,
                           lab::OwnerLivenessName(lab::OwnerLivenessHere(c.owner)));
              if (live)
                fmt::print("[status] leader owner={} token={} lease-left-ms={} owner-process={}\n",
                           lab::EscapeBytes(lease.owner), lease.token, lease_left_ms,
                           lab::OwnerLivenessName(lab::OwnerLivenessHere(lease.owner)));
              else if (lease.token > 0)
                fmt::print("[status] leader none: the lease of token {} ({}) has run out or was "
                           "released\n",
                           lease.token, lab::EscapeBytes(lease.owner));
              if (view.outage)
                fmt::print("[status] {}; noted by {} at {}, next try at {}\n",
                           lab::EscapeBytes(OutageText(*view.outage, s.pending)),
                           lab::EscapeBytes(view.outage->owner), UtcTime(view.outage->noted_at_ms),
                           UtcTime(view.outage->retry_at_ms));
              for (const Stall& st : view.stalls)
                fmt::print("[status] stalled: parked row id={} event={} holds back {} rows of "
                           "aggregate {}\n",
                           st.parked_id, lab::EscapeBytes(st.event_id), st.rows_held,
                           lab::EscapeBytes(st.aggregate_id));
              if (view.horizon)
                fmt::print("[status] horizon held by pid={} application-name='{}' state='{}' "
                           "database='{}' transaction-age-ms={} xmin-age={} "
                           "outbox-dead-tuples={}: VACUUM cannot remove dead outbox rows while "
                           "it stays open; end it or run `SELECT pg_terminate_backend({})`\n",
                           view.horizon->pid, lab::EscapeBytes(view.horizon->application_name),
                           view.horizon->state, lab::EscapeBytes(view.horizon->database),
                           view.horizon->transaction_age_ms, view.horizon->xmin_age,
                           view.horizon->outbox_dead_tuples, view.horizon->pid);
            }
            return ExitCode::kOk;
          }};
}

Command AddMetricsCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "metrics", "The status numbers in Prometheus text format, to stdout or a node_exporter "
                 "textfile");
  auto textfile = std::make_shared<std::string>();
  sub->add_option("--textfile", *textfile,
                  "Write to this .prom file atomically (for node_exporter's textfile collector)");
  return {sub, [&global, textfile]() -> ExitCode {
            const std::string text = PrometheusText(ReadStatusView(global, kHorizonThresholdMs));
            if (textfile->empty()) {
              fmt::print("{}", text);
              return ExitCode::kOk;
            }
            // node_exporter may read at any moment: never let it see half a file. As report
            // --html: a missing folder is named, with the fix (exit 3).
            lab::WriteFileAtomically(*textfile, text);
            return ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
