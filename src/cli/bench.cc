#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <tuple>
#include <utility>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/duration.h"
#include "lab/bench/bench_report.h"
#include "lab/bench/benchmark.h"
#include "lab/bench/statistics.h"
#include "lab/broker/json_bytes.h"
#include "lab/report/page_file.h"
#include "outbox/error.h"
#include "outbox/pg/connection.h"

namespace outbox::cli {
namespace {

struct BenchCliOptions {
  bool json = false;
  std::string html;
  bool quick = false;
  std::int64_t chapter_events = 2000;
  std::int64_t events = 200000;
  std::int64_t batch_size = 1000;
  std::int64_t workload_events = 20000;
  std::int64_t write_txns = 20000;
  std::int64_t write_rounds = 3;
  std::int64_t history_rows = 1000000;
  std::int64_t poll_repetitions = 300;
  std::int64_t rss_events = 1000000;
  std::int64_t drain_events = 100000;
  std::int64_t drain_rounds = 5;
#ifdef OUTBOX_LAB_PYTHON_RELAY
  std::string python_relay = OUTBOX_LAB_PYTHON_RELAY;  // the source tree's bench/python_relay.py
#else
  std::string python_relay;
#endif
  std::string python = "/usr/bin/python3";
  std::int64_t latency_events = 10000;
  std::int64_t latency_rate = 1000;
  std::int64_t idle_ms = 10000;
  std::string work_dir;
};

// --quick divides these by 10 unless they were given explicitly.
constexpr std::int64_t kQuickDivisor = 10;

// "1,000,000"
std::string Grouped(std::int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

using Check = lab::BenchmarkCheck;

// Checks() has 8 entries; the latency checks follow.
constexpr std::size_t kFirstLatencyCheck = 8;

std::vector<Check> Checks(const lab::BenchmarkResult& r, const lab::BenchmarkTargets& t) {
  return {
      {"relay_over_chapter", r.relay_over_chapter, t.relay_over_chapter_min, true,
       r.relay_over_chapter_spread},
      {"relay_over_raw", r.relay_over_raw, t.relay_over_raw_min, true, r.relay_over_raw_spread},
      {"write_ratio", r.write.ratio, t.write_ratio_min, true, r.write.ratio_spread},
      {"history_ratio", r.history.ratio, t.history_ratio_max, false, r.history.ratio_spread},
      {"relay_peak_rss_mib", r.rss.peak_rss_mib, t.relay_rss_max_mib, false, {}},
      {"relay_over_loop", r.drains.relay_over_loop, t.relay_over_loop_min, true,
       r.drains.relay_over_loop_spread},
      {"idle_cpu_percent", r.idle.cpu_percent, t.idle_cpu_max_percent, false, {}},
      {"relay_over_python", r.drains.relay_over_python, t.relay_over_python_min, true,
       r.drains.relay_over_python_spread},
  };
}

// "0.81-0.95 x10" and " noisy" when the range is wider than the distance to the target: the
// spread of a ratio taken per round, for the check column. Empty for a figure taken once.
std::string SpreadText(const Check& check, const char* format) {
  if (check.spread.rounds == 0) return "";
  return fmt::format(fmt::runtime(std::string(" [{}-{} x{}]") + "{}"),
                     fmt::format(fmt::runtime(format), check.spread.min),
                     fmt::format(fmt::runtime(format), check.spread.max), check.spread.rounds,
                     check.noisy() ? " noisy" : "");
}

std::string LoadText(const std::vector<double>& load) {
  std::string text;
  for (const double l : load) text += fmt::format("{}{:.2f}", text.empty() ? "" : " ", l);
  return text.empty() ? "n/a" : text;
}

// One check per workload of the commit-to-mark figure, after Checks().
std::vector<Check> LatencyChecks(const lab::BenchmarkResult& r, const lab::BenchmarkTargets& t) {
  std::vector<Check> checks;
  for (const lab::LatencyFigure& f : r.latency)
    checks.push_back({"latency_p99_ms_" + f.workload, f.p99_ms, t.latency_p99_max_ms, false, {}});
  return checks;
}

void PrintTable(const lab::BenchmarkOptions& o, const lab::BenchmarkResult& r,
                const std::vector<Check>& checks) {
  fmt::print("outbox-lab bench: synchronous={} broker={}{} topic={} batch-size={}\n",
             o.synchronous, r.embedded_broker ? "embedded " : "", r.brokers, r.topic, o.batch_size);
  fmt::print("load average (1 5 15 min) at start: {}; at end: {}\n", LoadText(r.load_start),
             LoadText(r.load_end));
  // With --db postgresql://, a second column: the figures measured again on that server, n/a
  // for those measured on SQLite only (benchmark.h).
  const lab::PostgresFigures* pg = r.postgres ? &*r.postgres : nullptr;
  if (pg)
    fmt::print("postgresql: {} (server {}, synchronous_commit={}); the other figures are SQLite's "
               "only (n/a)\n",
               pg->server, pg->server_version, pg->synchronous_commit);
  const auto row = [pg](const std::string& figure, const std::string& value,
                        const std::string& target = "", const std::string& check = "",
                        const std::string& pg_value = "n/a") {
    if (pg)
      fmt::print("{:<48} {:>12} {:>12}  {:<10} {}\n", figure, value, pg_value, target, check);
    else
      fmt::print("{:<48} {:>12}  {:<10} {}\n", figure, value, target, check);
  };
  const auto verdict = [&checks](std::size_t i) { return checks[i].pass() ? "PASS" : "MISS"; };
  const auto judged = [&checks, &verdict](std::size_t i, const char* format) {
    return verdict(i) + SpreadText(checks[i], format);
  };
  // The three ratios compared on both backends: "SQLITE / POSTGRESQL" verdicts.
  const auto both = [&checks, pg, &verdict](std::size_t i, double pg_value) {
    if (!pg) return verdict(i) + SpreadText(checks[i], i == 0 ? "{:.0f}" : i == 1 ? "{:.2f}" : "{:.3f}");
    Check on_pg = checks[i];
    on_pg.value = pg_value;
    return fmt::format("{} / {}", verdict(i), on_pg.pass() ? "PASS" : "MISS");
  };
  const auto pg_figure = [pg](auto field, const char* format) {
    return pg ? fmt::format(fmt::runtime(format), field(*pg)) : std::string("n/a");
  };
  if (pg)
    row("figure", "sqlite", "target", "check (sqlite / pg)", "postgresql");
  else
    row("figure", "value", "target", "check");
  row(fmt::format("chapter algorithm, {} events (events/s)", Grouped(r.chapter.events)),
      fmt::format("{:.0f}", r.chapter.events_per_s), "", "",
      pg_figure([](const lab::PostgresFigures& f) { return f.chapter.events_per_s; }, "{:.0f}"));
  row(fmt::format("relay, {} events (events/s)", Grouped(r.relay.events)),
      fmt::format("{:.0f}", r.relay.events_per_s), "", "",
      pg_figure([](const lab::PostgresFigures& f) { return f.relay.events_per_s; }, "{:.0f}"));
  for (const lab::WorkloadThroughputFigure& f : r.relay_by_workload)
    row(fmt::format("relay (leader), {} events, workload {} ({} aggregates) (events/s)",
                    Grouped(f.relay.events), f.workload, Grouped(f.aggregates)),
        fmt::format("{:.0f}", f.relay.events_per_s));
  // No database in this one: the same ceiling for both columns.
  row(fmt::format("raw produce, {} events (events/s)", Grouped(r.raw.events)),
      fmt::format("{:.0f}", r.raw.events_per_s), "", "", fmt::format("{:.0f}", r.raw.events_per_s));
  row("relay / chapter", fmt::format("{:.1f}x", r.relay_over_chapter),
      fmt::format(">= {:g}x", checks[0].target), both(0, pg ? pg->relay_over_chapter : 0),
      pg_figure([](const lab::PostgresFigures& f) { return f.relay_over_chapter; }, "{:.1f}x"));
  row("relay / raw", fmt::format("{:.2f}", r.relay_over_raw), fmt::format(">= {:g}", checks[1].target),
      both(1, pg ? pg->relay_over_raw : 0),
      pg_figure([](const lab::PostgresFigures& f) { return f.relay_over_raw; }, "{:.2f}"));
  row(fmt::format("write business-only, {} txns x {} (txn/s)", Grouped(r.write.txns),
                  r.write.business_only_tps.size()),
      fmt::format("{:.0f}", r.write.business_only_median_tps), "", "",
      pg_figure([](const lab::PostgresFigures& f) { return f.write.business_only_median_tps; },
                "{:.0f}"));
  row(fmt::format("write business+outbox, {} txns x {} (txn/s)", Grouped(r.write.txns),
                  r.write.with_outbox_tps.size()),
      fmt::format("{:.0f}", r.write.with_outbox_median_tps), "", "",
      pg_figure([](const lab::PostgresFigures& f) { return f.write.with_outbox_median_tps; },
                "{:.0f}"));
  row("write ratio (business+outbox / business-only)", fmt::format("{:.3f}", r.write.ratio),
      fmt::format(">= {:g}", checks[2].target), both(2, pg ? pg->write.ratio : 0),
      pg_figure([](const lab::PostgresFigures& f) { return f.write.ratio; }, "{:.3f}"));
  row(fmt::format("WAL frames per txn, business-only (over {} txns)", r.wal_frames.txns),
      fmt::format("{:.2f}", r.wal_frames.business_only_frames));
  row(fmt::format("WAL frames per txn, business+outbox (over {} txns)", r.wal_frames.txns),
      fmt::format("{:.2f}", r.wal_frames.with_outbox_frames));
  row(fmt::format("settle of {} acked rows, mark by id (us, median)", Grouped(r.mark.rows)),
      fmt::format("{:.0f}", r.mark.by_id_us));
  row(fmt::format("settle of {} acked rows, mark by range (us, median)", Grouped(r.mark.rows)),
      fmt::format("{:.0f}", r.mark.by_range_us));
  row("poll, 0 published rows (us, median / p99)",
      fmt::format("{:.0f} / {:.0f}", r.history.without_history.poll_us,
                  r.history.without_history.poll_p99_us));
  row(fmt::format("poll, {} published rows (us, median / p99)",
                  Grouped(r.history.with_history.retained_published)),
      fmt::format("{:.0f} / {:.0f}", r.history.with_history.poll_us,
                  r.history.with_history.poll_p99_us));
  row("poll latency ratio (with / without history)", fmt::format("{:.2f}", r.history.ratio),
      fmt::format("<= {:g}", checks[3].target), judged(3, "{:.2f}"));
  const auto drain_row = [&row](const lab::DrainFigure& d) {
    std::string rounds;
    for (const double seconds : d.seconds)
      rounds += fmt::format("{}{:.2f}", rounds.empty() ? "" : " ", seconds);
    row(fmt::format("process: {} (events/s)", d.program), fmt::format("{:.0f}", d.events_per_s),
        fmt::format("{} s", rounds));
  };
  drain_row(r.drains.chapter);
  drain_row(r.drains.loop);
  drain_row(r.drains.relay);
  if (!r.drains.python.program.empty()) drain_row(r.drains.python);
  row(fmt::format("relay, {} events, as shipped: checkpoint after a short batch (events/s)",
                  Grouped(r.checkpoint.events)),
      fmt::format("{:.0f}", r.checkpoint.with_events_per_s),
      fmt::format("WAL {} KiB", r.checkpoint.with_wal_bytes / 1024));
  row(fmt::format("relay, {} events, no checkpoint of its own (events/s)",
                  Grouped(r.checkpoint.events)),
      fmt::format("{:.0f}", r.checkpoint.without_events_per_s),
      fmt::format("WAL {} KiB", r.checkpoint.without_wal_bytes / 1024));
  row("process: relay / batch-loop", fmt::format("{:.2f}", r.drains.relay_over_loop),
      fmt::format(">= {:g}", checks[5].target), judged(5, "{:.2f}"));
  if (!r.drains.python.program.empty())
    row("process: relay / Python relay", fmt::format("{:.2f}", r.drains.relay_over_python),
        fmt::format(">= {:g}", checks[7].target), judged(7, "{:.2f}"));
  else
    row("process: relay / Python relay", "n/a", "", "python3 with confluent_kafka not found");
  row("process: relay / chapter", fmt::format("{:.1f}x", r.drains.relay_over_chapter), "",
      SpreadText({"", r.drains.relay_over_chapter, 0, true, r.drains.relay_over_chapter_spread},
                 "{:.0f}"));
  row(fmt::format("relay peak RSS draining {} (MiB)", Grouped(r.rss.events)),
      fmt::format("{:.1f}", r.rss.peak_rss_mib), fmt::format("<= {:g}", checks[4].target),
      verdict(4));
  row(fmt::format("relay child draining {} (events/s)", Grouped(r.rss.events)),
      fmt::format("{:.0f}", r.rss.events_per_s));
  for (std::size_t i = 0; i < r.latency.size(); ++i) {
    const lab::LatencyFigure& f = r.latency[i];
    const std::size_t check = kFirstLatencyCheck + i;
    row(fmt::format("commit-to-mark, workload {}, {} at {:.0f}/s (writer: {:.0f}/s) (ms, p50 / p99)",
                    f.workload, Grouped(f.events), f.rate_per_s,
                    lab::Rate(f.events, f.writer_seconds)),
        fmt::format("{:.0f} / {:.0f}", f.p50_ms, f.p99_ms),
        fmt::format("p99 <= {:g} ms", checks[check].target), verdict(check));
  }
  row(fmt::format("idle relay CPU over {:.1f} s (% of one core)", r.idle.seconds),
      fmt::format("{:.2f}", r.idle.cpu_percent), fmt::format("<= {:g}%", checks[6].target),
      verdict(6));
  for (const lab::CompressionFigure& f : r.compression) {
    std::string rounds;
    for (const double rate : f.events_per_s)
      rounds += fmt::format("{}{:.0f}", rounds.empty() ? "" : " ", rate);
    row(fmt::format("relay, {} events, compression.type={} (events/s)", Grouped(f.events), f.codec),
        fmt::format("{:.0f}", f.median_events_per_s), rounds);
    row(fmt::format("  bytes sent to the broker, compression.type={} (per event)", f.codec),
        fmt::format("{:.1f}", f.bytes_per_event), fmt::format("{} KiB", f.tx_bytes / 1024));
  }
  // PostgreSQL's whole-process drains: measured there only, so the value is in the pg column.
  if (pg) {
    const lab::BenchmarkTargets targets;
    for (const auto& [d, min_per_s] :
         {std::pair{&pg->leader_drain, targets.pg_leader_min_per_s},
          std::pair{&pg->claims_drain, targets.pg_claims_min_per_s}}) {
      if (d->program.empty()) continue;
      std::string rounds;
      for (const double seconds : d->seconds)
        rounds += fmt::format("{}{:.2f}", rounds.empty() ? "" : " ", seconds);
      row(fmt::format("process: {} (events/s)", d->program), "n/a",
          fmt::format(">= {:.0f}", min_per_s),
          fmt::format("{} ({} s)", d->events_per_s >= min_per_s ? "PASS" : "MISS", rounds),
          fmt::format("{:.0f}", d->events_per_s));
    }
  }
  fmt::print("poll = has-claimable + claim of {} rows (median of {}); has-claimable {:.0f} / {:.0f} "
             "us, claim {:.0f} / {:.0f} us, release (untimed) {:.0f} / {:.0f} us\n",
             o.history_backlog, o.poll_repetitions, r.history.without_history.has_claimable_us,
             r.history.with_history.has_claimable_us, r.history.without_history.claim_us,
             r.history.with_history.claim_us, r.history.without_history.release_us,
             r.history.with_history.release_us);
  std::string probes;
  for (const double us : r.fsync_us) probes += fmt::format("{}{:.0f}", probes.empty() ? "" : " / ", us);
  fmt::print("disk: median fdatasync of 4 KiB (us) at start / before write path / after / end: {}\n",
             probes);
  fmt::print("process: each program a child process on its own copy of the backlog, timed from "
             "spawn to exit (median of {} rounds; the seconds of each round after the rate)\n",
             o.drain_rounds);
  fmt::print("commit-to-mark: a `write --rate` child and a `relay` child with default options; "
             "delay = published_at - created_at per row (whole ms; max {})\n",
             [&r] {
               std::string max;
               for (const lab::LatencyFigure& f : r.latency)
                 max += fmt::format("{}{} {:.0f} ms", max.empty() ? "" : ", ", f.workload, f.max_ms);
               return max;
             }());
  fmt::print("[min-max xN]: the range of a ratio over the N interleaved rounds it is the median of "
             "(relay/chapter and relay/raw: slices of one run; write: slices of every round; "
             "process: rounds); noisy: that range is wider than the median's distance from the "
             "target, so another run could land on the other side\n");
  fmt::print("targets are informational (2-core machine); the exit status does not depend on them\n");
}

nlohmann::ordered_json PollJson(const lab::PollFigure& p) {
  return {{"retained_published", p.retained_published},
          {"has_claimable_us", p.has_claimable_us},
          {"claim_us", p.claim_us},
          {"poll_us", p.poll_us},
          {"poll_p99_us", p.poll_p99_us},
          {"release_us", p.release_us}};
}

nlohmann::ordered_json ThroughputJson(const lab::ThroughputFigure& f) {
  return {{"events", f.events}, {"seconds", f.seconds}, {"events_per_s", f.events_per_s}};
}

void PrintJson(const lab::BenchmarkOptions& o, const lab::BenchmarkResult& r,
               const std::vector<Check>& checks) {
  nlohmann::ordered_json out;
  nlohmann::ordered_json properties = nlohmann::ordered_json::object();
  for (const auto& [name, value] : o.properties) properties[name] = value;
  out["parameters"] = {
      {"synchronous", o.synchronous},
      {"brokers", r.brokers},
      {"embedded_broker", r.embedded_broker},
      {"topic", r.topic},
      {"properties", properties},
      {"delivery_timeout_ms", o.delivery_timeout_ms},
      {"chapter_events", o.chapter_events},
      {"events", o.events},
      {"batch_size", o.batch_size},
      {"workload_events", o.workload_events},
      {"write_txns", o.write_txns},
      {"write_rounds", o.write_rounds},
      {"history_rows", o.history_rows},
      {"history_backlog", o.history_backlog},
      {"poll_repetitions", o.poll_repetitions},
      {"rss_events", o.rss_events},
      {"drain_events", o.drain_events},
      {"drain_rounds", o.drain_rounds},
      {"latency_events", o.latency_events},
      {"latency_rate", o.latency_rate},
      {"idle_ms", o.idle_ms},
      {"work_dir", r.work_dir},
  };
  out["load_average"] = {{"start", r.load_start}, {"end", r.load_end}};
  out["fsync_us"] = r.fsync_us;
  out["chapter"] = ThroughputJson(r.chapter);
  out["relay"] = ThroughputJson(r.relay);
  out["raw"] = ThroughputJson(r.raw);
  nlohmann::ordered_json by_workload = nlohmann::ordered_json::array();
  for (const lab::WorkloadThroughputFigure& f : r.relay_by_workload) {
    nlohmann::ordered_json figure = ThroughputJson(f.relay);
    figure["workload"] = f.workload;
    figure["aggregates"] = f.aggregates;
    by_workload.push_back(figure);
  }
  out["relay_by_workload"] = by_workload;
  out["relay_over_chapter"] = r.relay_over_chapter;
  out["relay_over_raw"] = r.relay_over_raw;
  out["write"] = {{"txns", r.write.txns},
                  {"business_only_tps", r.write.business_only_tps},
                  {"with_outbox_tps", r.write.with_outbox_tps},
                  {"business_only_median_tps", r.write.business_only_median_tps},
                  {"with_outbox_median_tps", r.write.with_outbox_median_tps},
                  {"ratio", r.write.ratio}};
  out["history"] = {{"without_history", PollJson(r.history.without_history)},
                    {"with_history", PollJson(r.history.with_history)},
                    {"ratio", r.history.ratio}};
  const auto drain_json = [](const lab::DrainFigure& d) {
    return nlohmann::ordered_json{{"program", d.program},
                                  {"events", d.events},
                                  {"seconds", d.seconds},
                                  {"median_seconds", d.median_seconds},
                                  {"events_per_s", d.events_per_s}};
  };
  out["processes"] = {{"chapter", drain_json(r.drains.chapter)},
                      {"batch_loop", drain_json(r.drains.loop)},
                      {"relay", drain_json(r.drains.relay)},
                      {"python", drain_json(r.drains.python)},
                      {"relay_over_python", r.drains.relay_over_python},
                      {"relay_over_loop", r.drains.relay_over_loop},
                      {"relay_over_chapter", r.drains.relay_over_chapter}};
  out["wal_frames"] = {{"txns", r.wal_frames.txns},
                       {"business_only_frames", r.wal_frames.business_only_frames},
                       {"with_outbox_frames", r.wal_frames.with_outbox_frames}};
  out["mark"] = {{"batches", r.mark.batches},
                 {"rows", r.mark.rows},
                 {"by_id_us", r.mark.by_id_us},
                 {"by_range_us", r.mark.by_range_us}};
  out["checkpoint"] = {{"events", r.checkpoint.events},
                       {"with_events_per_s", r.checkpoint.with_events_per_s},
                       {"without_events_per_s", r.checkpoint.without_events_per_s},
                       {"with_wal_bytes", r.checkpoint.with_wal_bytes},
                       {"without_wal_bytes", r.checkpoint.without_wal_bytes}};
  nlohmann::ordered_json latency = nlohmann::ordered_json::array();
  for (const lab::LatencyFigure& f : r.latency)
    latency.push_back({{"workload", f.workload},
                       {"events", f.events},
                       {"rate_per_s", f.rate_per_s},
                       {"writer_seconds", f.writer_seconds},
                       {"p50_ms", f.p50_ms},
                       {"p99_ms", f.p99_ms},
                       {"max_ms", f.max_ms}});
  out["latency"] = latency;
  out["idle"] = {{"seconds", r.idle.seconds},
                 {"cpu_ticks", r.idle.cpu_ticks},
                 {"cpu_percent", r.idle.cpu_percent}};
  nlohmann::ordered_json compression = nlohmann::ordered_json::array();
  for (const lab::CompressionFigure& f : r.compression)
    compression.push_back({{"codec", f.codec},
                           {"events", f.events},
                           {"events_per_s", f.events_per_s},
                           {"median_events_per_s", f.median_events_per_s},
                           {"tx_bytes", f.tx_bytes},
                           {"bytes_per_event", f.bytes_per_event}});
  out["compression"] = compression;
  out["rss"] = {{"events", r.rss.events},
                {"peak_rss_mib", r.rss.peak_rss_mib},
                {"seconds", r.rss.seconds},
                {"events_per_s", r.rss.events_per_s}};
  nlohmann::ordered_json targets = nlohmann::ordered_json::object();
  for (const Check& check : checks)
  {
    targets[check.name] = {{"value", check.value},
                           {check.at_least ? "min" : "max", check.target},
                           {"pass", check.pass()}};
    if (check.spread.rounds > 0)
      targets[check.name]["spread"] = {{"min", check.spread.min},
                                       {"max", check.spread.max},
                                       {"rounds", check.spread.rounds},
                                       {"noisy", check.noisy()}};
  }
  out["targets"] = targets;
  if (r.postgres) {
    // Only what was measured on the server; raw produce (no database) is the top-level "raw".
    const lab::PostgresFigures& pg = *r.postgres;
    nlohmann::ordered_json pg_targets = nlohmann::ordered_json::object();
    for (std::size_t i : {0u, 1u, 2u}) {
      Check check = checks[i];
      check.value = i == 0 ? pg.relay_over_chapter : i == 1 ? pg.relay_over_raw : pg.write.ratio;
      pg_targets[check.name] = {{"value", check.value},
                                {check.at_least ? "min" : "max", check.target},
                                {"pass", check.pass()}};
    }
    const lab::BenchmarkTargets drain_targets;
    nlohmann::ordered_json processes = nlohmann::ordered_json::object();
    for (const auto& [name, d, min_per_s] :
         {std::tuple{"relay_leader", &pg.leader_drain, drain_targets.pg_leader_min_per_s},
          std::tuple{"relay_claims", &pg.claims_drain, drain_targets.pg_claims_min_per_s}}) {
      if (d->program.empty()) continue;
      processes[name] = drain_json(*d);
      pg_targets[std::string("process_") + name + "_events_per_s"] = {
          {"value", d->events_per_s}, {"min", min_per_s}, {"pass", d->events_per_s >= min_per_s}};
    }
    out["postgresql"] = {
        {"server", pg.server},
        {"server_version", pg.server_version},
        {"synchronous_commit", pg.synchronous_commit},
        {"chapter", ThroughputJson(pg.chapter)},
        {"relay", ThroughputJson(pg.relay)},
        {"relay_over_chapter", pg.relay_over_chapter},
        {"relay_over_raw", pg.relay_over_raw},
        {"processes", processes},
        {"write",
         {{"txns", pg.write.txns},
          {"business_only_tps", pg.write.business_only_tps},
          {"with_outbox_tps", pg.write.with_outbox_tps},
          {"business_only_median_tps", pg.write.business_only_median_tps},
          {"with_outbox_median_tps", pg.write.with_outbox_median_tps},
          {"ratio", pg.write.ratio}}},
        {"targets", pg_targets}};
  }
  fmt::print("{}\n", lab::DumpJson(out));
}

}  // namespace

Command AddBenchCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "bench",
      "Measure, in one run on one broker: the chapter's relay vs `relay` vs raw produce "
      "(events/s), business-only vs business+outbox transactions/s, poll latency with and "
      "without 1,000,000 published rows, the chapter's relay vs the hand-written batched loop "
      "vs `relay` as whole processes, the relay's peak RSS draining a large backlog, and the "
      "relay with compression.type none vs lz4 (events/s, bytes sent to the broker). "
      "Starts the embedded broker unless --brokers is given; uses a fresh topic and temporary "
      "databases; takes minutes (--quick: seconds). With --db postgresql://URL, also the "
      "chapter and relay throughput and the write path on that server (in schemas "
      "outbox_bench_PID_*, dropped at the end), in a second column");
  auto o = std::make_shared<BenchCliOptions>();
  sub->add_flag("--json", o->json, "Print one JSON object with every number and the parameters");
  sub->add_option("--html", o->html,
                  "Also write the figures as one self-contained HTML page of bar charts, each "
                  "ratio beside its target (replaced if it exists)");
  sub->add_flag("--quick", o->quick,
                "Divide every count not given explicitly by 10 (a smoke run, not a measurement)");
  auto* chapter = sub->add_option("--chapter-events", o->chapter_events,
                                  "Rows the chapter's relay sends")->transform(PositiveInteger())->capture_default_str();
  auto* events = sub->add_option("--events", o->events, "Rows `relay` and raw produce send")
                     ->transform(PositiveInteger())->capture_default_str();
  sub->add_option("--batch-size", o->batch_size, "Rows per relay batch")->transform(PositiveInteger())->capture_default_str();
  auto* workload = sub->add_option("--workload-events", o->workload_events,
                                   "Rows of each workload (own, 50, zipf, random-keys) the "
                                   "in-process relay per workload drains (under block-key a skewed "
                                   "workload's drain time grows with the square of its backlog)")
                       ->transform(PositiveInteger())->capture_default_str();
  auto* write = sub->add_option("--write-txns", o->write_txns,
                                "Transactions per write-path round")->transform(PositiveInteger())->capture_default_str();
  sub->add_option("--write-rounds", o->write_rounds,
                  "Rounds per write-path variant, alternated; the median is reported")
      ->transform(PositiveInteger())->capture_default_str();
  auto* history = sub->add_option("--history-rows", o->history_rows,
                                  "Published rows retained for the history figure")
                      ->transform(PositiveInteger())->capture_default_str();
  auto* polls = sub->add_option("--poll-repetitions", o->poll_repetitions,
                                "Timed polls per history variant; the median is reported")
                    ->transform(PositiveInteger())->capture_default_str();
  auto* rss = sub->add_option("--rss-events", o->rss_events,
                              "Backlog the relay child drains for the peak-RSS figure")
                  ->transform(PositiveInteger())->capture_default_str();
  auto* drain = sub->add_option("--drain-events", o->drain_events,
                                "Backlog that `batch-loop` and `relay` drain as whole processes, and the "
                                "in-process relay with each compression.type")
                    ->transform(PositiveInteger())->capture_default_str();
  sub->add_option("--drain-rounds", o->drain_rounds,
                  "Rounds of the whole-process drains, alternated; the median is reported")
      ->transform(PositiveInteger())->capture_default_str();
  auto* latency = sub->add_option("--latency-events", o->latency_events,
                                  "Rows the paced writer commits per workload for the "
                                  "commit-to-mark figure")
                      ->transform(PositiveInteger())->capture_default_str();
  sub->add_option("--latency-rate", o->latency_rate,
                  "The paced writer's transactions per second")
      ->transform(PositiveInteger())->capture_default_str();
  auto* idle = AddDurationOption(*sub, "--idle", o->idle_ms,
                                 "Window of the idle relay's CPU figure", 1, 3'600'000);
  sub->add_option("--python", o->python,
                  "Python interpreter for the Python relay comparator (needs confluent_kafka; "
                  "the figure is left out when it cannot import it)")
      ->capture_default_str();
  sub->add_option("--python-relay", o->python_relay,
                  "The Python relay comparator script (bench/python_relay.py in the source tree)")
      ->capture_default_str();
  sub->add_option("--work-dir", o->work_dir,
                  "Parent of the temporary directory for the databases (default TMPDIR or /tmp); "
                  "put it on the disk to measure");
  return {sub, [&global, o, chapter, events, workload, write, history, polls, rss, drain,
                latency, idle]() -> ExitCode {
            const auto scaled = [&o](const CLI::Option* option, std::int64_t value) {
              return o->quick && option->count() == 0 ? std::max<std::int64_t>(1, value / kQuickDivisor)
                                                      : value;
            };
            // A page that cannot be written fails now, not after the whole measurement.
            if (!o->html.empty()) lab::RequireWritableFile(o->html);
            lab::BenchmarkOptions options;
            options.brokers = global.brokers;
            options.properties = global.ParsedProperties();
            options.store = global.MakeStoreOptions();
            options.synchronous = global.synchronous;
            options.work_parent = o->work_dir;
            // The SQLite figures always run on temporary files; a postgresql:// --db adds the
            // PostgreSQL column (benchmark.h). An SQLite --db is not touched.
            if (pg::IsPostgresUrl(global.db)) options.postgres_url = global.db;
            options.chapter_events = scaled(chapter, o->chapter_events);
            options.events = scaled(events, o->events);
            options.batch_size = o->batch_size;
            options.workload_events = scaled(workload, o->workload_events);
            options.write_txns = scaled(write, o->write_txns);
            options.write_rounds = o->write_rounds;
            options.history_rows = scaled(history, o->history_rows);
            options.poll_repetitions = scaled(polls, o->poll_repetitions);
            options.rss_events = scaled(rss, o->rss_events);
            options.drain_events = scaled(drain, o->drain_events);
            options.drain_rounds = o->drain_rounds;
            options.python = o->python;
            options.python_relay = o->python_relay;
            options.latency_events = scaled(latency, o->latency_events);
            options.latency_rate = o->latency_rate;
            options.idle_ms = scaled(idle, o->idle_ms);
            // Progress only for a person watching: never in a pipe or a CI log.
            if (isatty(STDERR_FILENO)) {
              const auto start = std::chrono::steady_clock::now();
              options.progress = [start](const std::string& line) {
                const double elapsed =
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
                fmt::print(stderr, "[bench] {:6.1f}s {}\n", elapsed, line);
              };
            }
            const lab::BenchmarkResult result = lab::RunBenchmark(options);
            std::vector<Check> checks = Checks(result, lab::BenchmarkTargets{});
            for (Check& check : LatencyChecks(result, lab::BenchmarkTargets{}))
              checks.push_back(std::move(check));
            if (o->json)
              PrintJson(options, result, checks);
            else
              PrintTable(options, result, checks);
            if (!o->html.empty())
              lab::WriteFileAtomically(o->html, lab::RenderBenchmarkHtml(options, result, checks));
            return ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
