#include "lab/bench_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>

#include "lab/report.h"

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
  BarChart(out, "throughput", "Relay throughput (events/s)",
           {{fmt::format("chapter relay, {} events", r.chapter.events), r.chapter.events_per_s,
             fmt::format("{:.0f}/s", r.chapter.events_per_s)},
            {fmt::format("relay, {} events", r.relay.events), r.relay.events_per_s,
             fmt::format("{:.0f}/s", r.relay.events_per_s)},
            {fmt::format("raw produce, {} events", r.raw.events), r.raw.events_per_s,
             fmt::format("{:.0f}/s", r.raw.events_per_s)},
            {fmt::format("relay child draining {}", r.rss.events), r.rss.events_per_s,
             fmt::format("{:.0f}/s", r.rss.events_per_s)}},
           /*log_scale=*/true);
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
  BarChart(out, "rss", "Relay child peak RSS (MiB)",
           {{fmt::format("draining {} events", r.rss.events), r.rss.peak_rss_mib,
             fmt::format("{:.1f} MiB", r.rss.peak_rss_mib)}},
           /*log_scale=*/false);
  fmt::format_to(out, "</body></html>\n");
  return html;
}

}  // namespace outbox::lab
