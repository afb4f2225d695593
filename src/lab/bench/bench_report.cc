#include "lab/bench/bench_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>

#include "lab/report/html_text.h"

namespace outbox::lab {
namespace {

using Out = std::back_insert_iterator<std::string>;

constexpr int kLabelWidth = 330;
constexpr int kBarSpace = 420;
constexpr int kRowHeight = 30;

struct Bar {
  std::string label;
  double value = 0;
  std::string text;  // the value as printed
};

// Horizontal bars on one scale. A log scale keeps the chapter's relay (tens of events/s) visible
// beside the batched one (tens of thousands).
void BarChart(Out out, const std::string& id, const std::string& title,
              const std::vector<Bar>& bars, bool log_scale) {
  double max = 1;
  for (const Bar& bar : bars) max = std::max(max, bar.value);
  const auto length = [&](double v) {
    if (v <= 0) return 0.0;
    if (!log_scale) return kBarSpace * v / (max * 1.05);
    return kBarSpace * std::log10(std::max(v, 1.0) * 10) / std::log10(max * 10 * 1.5);
  };
  const int height = static_cast<int>(bars.size()) * kRowHeight + 10;
  fmt::format_to(
      out,
      "<section><h2>{}</h2><svg id=\"{}\" class=\"chart\" data-scale=\"{}\" width=\"{}\" "
      "height=\"{}\">\n",
      EscapeHtml(title), id, log_scale ? "log" : "linear", kLabelWidth + kBarSpace + 110, height);
  int y = 5;
  for (const Bar& bar : bars) {
    fmt::format_to(
        out,
        "<g class=\"bar\" data-label=\"{0}\" data-value=\"{1}\"><text x=\"{2}\" y=\"{3}\" "
        "text-anchor=\"end\">{0}</text><rect x=\"{4}\" y=\"{5}\" width=\"{6:.1f}\" "
        "height=\"18\"/><text class=\"v\" x=\"{7:.1f}\" y=\"{3}\">{8}</text></g>\n",
        EscapeHtml(bar.label), bar.value, kLabelWidth - 8, y + 14, kLabelWidth, y + 1,
        length(bar.value), kLabelWidth + length(bar.value) + 6, EscapeHtml(bar.text));
    y += kRowHeight;
  }
  fmt::format_to(out, "</svg>{}</section>\n",
                 log_scale ? "<p class=\"note\">logarithmic scale</p>" : "");
}

// One row per check: the bar is the figure divided by its target, the dark line the target.
void ChecksChart(Out out, const std::vector<BenchmarkCheck>& checks) {
  const int height = static_cast<int>(checks.size()) * (kRowHeight + 6) + 10;
  fmt::format_to(out,
                 "<section><h2>Figures beside their targets</h2><svg id=\"checks\" class=\"chart\" "
                 "width=\"{}\" height=\"{}\">\n",
                 kLabelWidth + kBarSpace + 240, height);
  int y = 5;
  for (const BenchmarkCheck& c : checks) {
    // The target sits at the same x on every row; a bar past the right edge is cut.
    const double target = kBarSpace * 0.6;
    const double bar = c.target > 0
                           ? std::min(kBarSpace * 1.0, target * std::max(c.value, 0.0) / c.target)
                           : kBarSpace;
    fmt::format_to(
        out,
        "<g class=\"check {0}\" data-name=\"{1}\" data-value=\"{2}\" data-target=\"{3}\" "
        "data-pass=\"{4}\"><text x=\"{5}\" y=\"{6}\" text-anchor=\"end\">{1}</text>"
        "<rect x=\"{7}\" y=\"{8}\" width=\"{9:.1f}\" height=\"18\"/><line x1=\"{10:.1f}\" "
        "y1=\"{11}\" x2=\"{10:.1f}\" y2=\"{12}\"/><text class=\"v\" x=\"{13}\" "
        "y=\"{6}\">{2:.3g} ({14} {3:g}) {15}</text></g>\n",
        c.pass() ? "pass" : "miss", EscapeHtml(c.name), c.value, c.target,
        c.pass() ? "true" : "false", kLabelWidth - 8, y + 14, kLabelWidth, y + 1, bar,
        kLabelWidth + target, y - 3, y + 23, kLabelWidth + kBarSpace + 8,
        c.at_least ? "target &gt;=" : "target &lt;=", c.pass() ? "PASS" : "MISS");
    y += kRowHeight + 6;
  }
  fmt::format_to(out,
                 "</svg><p class=\"note\">Each bar is its figure divided by its target: the "
                 "dark line is the target, the same on every row. Targets are informational "
                 "(2-core machine).</p></section>\n");
}

// The relay child's throughput over time while it drains its backlog: one column per sampling
// interval (records added to the topic ÷ the interval), time on the x axis.
void DrainChart(Out out, const RssFigure& rss) {
  fmt::format_to(out, "<section><h2>Relay throughput over time, draining {} events</h2>\n",
                 rss.events);
  if (rss.progress.size() < 2) {
    fmt::format_to(out, "<p class=\"note\" id=\"drain-empty\">No progress samples (the broker "
                        "did not answer, or the drain took less than one interval).</p></section>\n");
    return;
  }
  struct Column {
    double from = 0, to = 0, rate = 0;
  };
  std::vector<Column> columns;
  double max_rate = 1;
  for (std::size_t i = 1; i < rss.progress.size(); ++i) {
    const DrainSample& a = rss.progress[i - 1];
    const DrainSample& b = rss.progress[i];
    if (b.seconds <= a.seconds) continue;
    const double rate = static_cast<double>(b.records - a.records) / (b.seconds - a.seconds);
    columns.push_back({a.seconds, b.seconds, rate});
    max_rate = std::max(max_rate, rate);
  }
  constexpr int kWidth = 720, kHeight = 180, kLeft = 70, kBottom = 24;
  const double end = rss.progress.back().seconds;
  const auto x_of = [&](double seconds) { return kLeft + kWidth * seconds / end; };
  fmt::format_to(out,
                 "<svg id=\"drain\" class=\"chart\" data-samples=\"{}\" data-max-rate=\"{:.0f}\" "
                 "width=\"{}\" height=\"{}\">\n",
                 rss.progress.size(), max_rate, kLeft + kWidth + 20, kHeight + kBottom + 10);
  for (const Column& c : columns) {
    const double h = kHeight * std::max(c.rate, 0.0) / (max_rate * 1.05);
    fmt::format_to(out,
                   "<rect class=\"drain\" data-from=\"{:.3f}\" data-rate=\"{:.0f}\" x=\"{:.1f}\" "
                   "y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\"><title>{:.2f}–{:.2f} s: {:.0f} "
                   "events/s</title></rect>\n",
                   c.from, c.rate, x_of(c.from), 5 + kHeight - h,
                   std::max(1.0, x_of(c.to) - x_of(c.from) - 1), h, c.from, c.to, c.rate);
  }
  fmt::format_to(out,
                 "<line class=\"axis\" x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\"/>"
                 "<text x=\"{3}\" y=\"14\" text-anchor=\"end\">{4:.0f}/s</text>"
                 "<text x=\"{3}\" y=\"{1}\" text-anchor=\"end\">0</text>"
                 "<text x=\"{0}\" y=\"{5}\">0 s</text>"
                 "<text x=\"{2}\" y=\"{5}\" text-anchor=\"end\">{6:.2f} s</text></svg>\n"
                 "<p class=\"note\">Records on the topic (the broker's high watermarks) sampled every "
                 "{7} samples; overall {8:.0f} events/s.</p></section>\n",
                 kLeft, 5 + kHeight, kLeft + kWidth, kLeft - 6, max_rate * 1.05, 5 + kHeight + 18,
                 end, fmt::format("~250 ms: {}", rss.progress.size()), rss.events_per_s);
}

}  // namespace

std::string RenderBenchmarkHtml(const BenchmarkOptions& options, const BenchmarkResult& r,
                                const std::vector<BenchmarkCheck>& checks) {
  std::string html;
  Out out(html);
  fmt::format_to(out, "{}", R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>outbox-lab bench</title>
<style>
body{margin:0;padding:18px 22px;font:14px/1.4 "DejaVu Sans",system-ui,sans-serif;color:#1d2330;background:#f4f6f9}
h1{font-size:21px;margin:0 0 2px}h2{font-size:16px;margin:0 0 8px}
.meta,.note{color:#5b6475;font-size:12px}
section{background:#fff;border:1px solid #d6dbe4;border-radius:8px;padding:12px 14px;margin-bottom:14px;overflow-x:auto}
svg text{font-size:12px;font-family:"DejaVu Sans",system-ui,sans-serif}
.bar rect{fill:#5c7fb8}.check.pass rect{fill:#2e7d32}.check.miss rect{fill:#c62828}
.check line{stroke:#1d2330;stroke-width:3}.v{fill:#1d2330}
.drain{fill:#5c7fb8}line.axis{stroke:#5b6475}
.check.miss .v{fill:#c62828;font-weight:bold}
</style></head><body>
)");
  std::string fsync;
  for (const double us : r.fsync_us)
    fsync += fmt::format("{}{:.0f}", fsync.empty() ? "" : " / ", us);
  fmt::format_to(
      out,
      "<h1>outbox-lab bench</h1><p class=\"meta\">synchronous={} · broker {}{} · topic {} "
      "· batch size {} · median fdatasync of 4 KiB (µs) at start / before write path / "
      "after / end: {}</p>\n",
      EscapeHtml(options.synchronous), r.embedded_broker ? "embedded " : "", EscapeHtml(r.brokers),
      EscapeHtml(r.topic), options.batch_size, fsync);
  ChecksChart(out, checks);
  std::vector<Bar> throughput = {
      {fmt::format("chapter relay, {} events", r.chapter.events), r.chapter.events_per_s,
       fmt::format("{:.0f}/s", r.chapter.events_per_s)},
      {fmt::format("relay, {} events", r.relay.events), r.relay.events_per_s,
       fmt::format("{:.0f}/s", r.relay.events_per_s)}};
  for (const WorkloadThroughputFigure& f : r.relay_by_workload)
    throughput.push_back({fmt::format("relay (leader), {} events, workload {}", f.relay.events, f.workload),
                          f.relay.events_per_s, fmt::format("{:.0f}/s", f.relay.events_per_s)});
  throughput.push_back({fmt::format("raw produce, {} events", r.raw.events), r.raw.events_per_s,
                        fmt::format("{:.0f}/s", r.raw.events_per_s)});
  throughput.push_back({fmt::format("relay child draining {}", r.rss.events), r.rss.events_per_s,
                        fmt::format("{:.0f}/s", r.rss.events_per_s)});
  BarChart(out, "throughput", "Relay throughput (events/s)", throughput, /*log_scale=*/true);
  std::vector<Bar> write = {{"business-only (median)", r.write.business_only_median_tps,
                             fmt::format("{:.0f} txn/s", r.write.business_only_median_tps)},
                            {"business + outbox (median)", r.write.with_outbox_median_tps,
                             fmt::format("{:.0f} txn/s", r.write.with_outbox_median_tps)}};
  for (std::size_t i = 0; i < r.write.business_only_tps.size(); ++i)
    write.push_back({fmt::format("round {}: business-only", i + 1), r.write.business_only_tps[i],
                     fmt::format("{:.0f}", r.write.business_only_tps[i])});
  for (std::size_t i = 0; i < r.write.with_outbox_tps.size(); ++i)
    write.push_back({fmt::format("round {}: business + outbox", i + 1), r.write.with_outbox_tps[i],
                     fmt::format("{:.0f}", r.write.with_outbox_tps[i])});
  BarChart(out, "write-path",
           fmt::format("Write path, {} transactions a round (txn/s)", r.write.txns), write,
           /*log_scale=*/false);
  BarChart(
      out, "poll", "Relay poll latency (µs, median)",
      {{"0 published rows retained", r.history.without_history.poll_us,
        fmt::format("{:.0f} µs", r.history.without_history.poll_us)},
       {fmt::format("{} published rows retained", r.history.with_history.retained_published),
        r.history.with_history.poll_us, fmt::format("{:.0f} µs", r.history.with_history.poll_us)}},
      /*log_scale=*/false);
  DrainChart(out, r.rss);
  BarChart(out, "rss", "Relay child peak RSS (MiB)",
           {{fmt::format("draining {} events", r.rss.events), r.rss.peak_rss_mib,
             fmt::format("{:.1f} MiB", r.rss.peak_rss_mib)}},
           /*log_scale=*/false);
  fmt::format_to(out, "</body></html>\n");
  return html;
}

}  // namespace outbox::lab
