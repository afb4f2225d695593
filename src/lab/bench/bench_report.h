// Bench report: the benchmark's figures as one self-contained HTML page (bench
// --html FILE): a bar per figure, each ratio beside its target. Inline SVG and
// CSS only; nothing loaded from anywhere (CSP default-src 'none').
// Thread-safety: a plain function over values.
#pragma once

#include <string>
#include <vector>

#include "lab/bench/benchmark.h"
#include "lab/bench/statistics.h"

namespace outbox::lab {

// One figure compared with its target (BenchmarkTargets); informational.
struct BenchmarkCheck {
  std::string name;  // e.g. "relay_over_chapter"
  double value = 0;
  double target = 0;
  bool at_least = true;  // value >= target passes; otherwise value <= target
  // The rounds value is the median of (statistics.h); rounds 0 for a figure taken once.
  Spread spread;
  bool pass() const { return at_least ? value >= target : value <= target; }
  // Another run could fall on the other side of the target (lab::Noisy).
  bool noisy() const { return Noisy(spread, target); }
};

// The page, as UTF-8 text. Reads only its arguments; strings from options or
// result (topic, brokers) are HTML-escaped.
std::string RenderBenchmarkHtml(const BenchmarkOptions& options, const BenchmarkResult& result,
                                const std::vector<BenchmarkCheck>& checks);

}  // namespace outbox::lab
