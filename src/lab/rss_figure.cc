#include <fmt/format.h>
#include <sys/wait.h>

#include <algorithm>

#include "lab/bench_support.h"
#include "lab/statistics.h"
#include "lab/subprocess.h"
#include "outbox/error.h"

namespace outbox::lab::bench {
namespace {

constexpr int kRssSampleIntervalMs = 10;

}  // namespace

RssFigure MeasureRss(const BenchmarkOptions& options, const TempDir& dir,
                     const std::string& brokers, const std::string& topic) {
  const std::string path = dir.File("rss.db");
  {
    auto store = FreshDatabase(path, options.store);
    Populate(*store, 1, options.rss_events, /*published=*/false);
  }  // closed: the child is the only connection while it drains
  std::vector<std::string> args = {
      options.lab_binary, "relay", "--until-empty", "--quiet",
      "--batch-size", std::to_string(options.batch_size),
      "--delivery-timeout", fmt::format("{}ms", options.delivery_timeout_ms),
      "--lease", fmt::format("{}ms", std::max(30000, 3 * options.delivery_timeout_ms)),
      "--db", path, "--brokers", brokers, "--topic", topic,
      "--synchronous", options.synchronous,
      "--busy-timeout", fmt::format("{}ms", options.store.busy_timeout_ms)};
  for (const auto& [name, value] : options.properties) {
    args.push_back("-X");
    args.push_back(fmt::format("{}={}", name, value));
  }
  const auto start = SteadyClock::now();
  ChildProcess child(args, dir.File("relay-rss.out"));
  const ChildExit exit = child.WaitTrackingPeakRss(kRssSampleIntervalMs);
  RssFigure figure;
  figure.seconds = SecondsSince(start);
  if (!WIFEXITED(exit.status) || WEXITSTATUS(exit.status) != 0)
    throw Error(fmt::format("relay child '{} relay --until-empty' on '{}': {}", options.lab_binary,
                            path, DescribeStatus(exit.status)));
  Store store(path, options.store, OpenMode::kExisting);
  const OutboxCounts counts = store.Count();
  if (counts.published != options.rss_events)
    throw Error(fmt::format("relay child on '{}': {} of {} rows published", path,
                            counts.published, options.rss_events));
  figure.events = counts.published;
  figure.peak_rss_mib = static_cast<double>(exit.peak_rss_kib) / 1024.0;
  figure.events_per_s = Rate(figure.events, figure.seconds);
  return figure;
}

}  // namespace outbox::lab::bench
