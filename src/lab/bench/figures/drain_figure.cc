#include <fmt/format.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "lab/bench/bench_support.h"
#include "lab/bench/statistics.h"
#include "lab/broker/subprocess.h"
#include "outbox/error.h"

namespace outbox::lab::bench {
namespace {

// The arguments every child shares: database, broker, topic and the same
// SQLite and librdkafka settings as the in-process figures.
std::vector<std::string> CommonArgs(const BenchmarkOptions& options, const std::string& db,
                                    const std::string& brokers, const std::string& topic) {
  std::vector<std::string> args = {"--db", db, "--brokers", brokers, "--topic", topic,
                                   "--synchronous", options.synchronous,
                                   "--busy-timeout",
                                   fmt::format("{}ms", options.store.busy_timeout_ms)};
  for (const auto& [name, value] : options.properties) {
    args.push_back("-X");
    args.push_back(fmt::format("{}={}", name, value));
  }
  return args;
}

// Runs program (its subcommand and options) on a fresh copy of source, timed
// from spawn to exit; requires exit 0 and every row published.
double TimeOneDrain(const BenchmarkOptions& options, const TempDir& dir, const std::string& source,
                    const std::string& name, std::int64_t events,
                    const std::vector<std::string>& program, const std::string& brokers,
                    const std::string& topic) {
  const std::string db = dir.File(name + ".db");
  std::error_code ec;
  fs::remove(db, ec);
  fs::copy_file(source, db, fs::copy_options::overwrite_existing, ec);
  if (ec) ThrowSystemError(fmt::format("copy '{}' to '{}'", source, db), ec.value());
  std::vector<std::string> args = {options.lab_binary};
  args.insert(args.end(), program.begin(), program.end());
  const std::vector<std::string> common = CommonArgs(options, db, brokers, topic);
  args.insert(args.end(), common.begin(), common.end());
  const auto start = SteadyClock::now();
  ChildProcess child(args, dir.File(name + ".out"));
  const ChildExit exit = child.Wait();
  const double seconds = SecondsSince(start);
  if (!WIFEXITED(exit.status) || WEXITSTATUS(exit.status) != 0)
    throw Error(fmt::format("child '{} {}' on '{}': {} (output in '{}')", options.lab_binary,
                            program.front(), db, DescribeStatus(exit.status),
                            dir.File(name + ".out")));
  Store store(db, options.store, OpenMode::kExisting);
  const OutboxCounts counts = store.Count();
  if (counts.published != events)
    throw Error(fmt::format("child '{} {}' on '{}': {} of {} rows published", options.lab_binary,
                            program.front(), db, counts.published, events));
  return seconds;
}

// A backlog of count unpublished rows in one file (its WAL checkpointed and
// removed at close), to copy for every round.
std::string Backlog(const BenchmarkOptions& options, const TempDir& dir, const std::string& name,
                    std::int64_t count) {
  const std::string path = dir.File(name);
  auto store = FreshDatabase(path, options.store);
  Populate(*store, 1, count, /*published=*/false);
  return path;
}

void Finish(DrainFigure& figure) {
  figure.median_seconds = Median(figure.seconds);
  figure.events_per_s = Rate(figure.events, figure.median_seconds);
}

}  // namespace

DrainFigures MeasureDrains(const BenchmarkOptions& options, const TempDir& dir,
                           const std::string& brokers, const std::string& topic) {
  const std::string chapter_source = Backlog(options, dir, "drain-chapter-source.db",
                                             options.chapter_events);
  const std::string source = Backlog(options, dir, "drain-source.db", options.drain_events);
  const std::string batch = std::to_string(options.batch_size);
  const std::string timeout = fmt::format("{}ms", options.delivery_timeout_ms);
  DrainFigures figures;
  figures.chapter = {"publish " + std::to_string(options.chapter_events), options.chapter_events,
                     {}, 0, 0};
  figures.loop = {"batch-loop --batch-size " + batch, options.drain_events, {}, 0, 0};
  figures.relay = {"relay --until-empty --batch-size " + batch, options.drain_events, {}, 0, 0};
  const std::vector<std::string> chapter = {"publish", std::to_string(options.chapter_events),
                                            "--delivery-timeout", timeout};
  const std::vector<std::string> loop = {"batch-loop", "--batch-size", batch, "--delivery-timeout",
                                         timeout};
  const std::vector<std::string> relay = {
      "relay", "--until-empty", "--quiet", "--batch-size", batch, "--delivery-timeout", timeout,
      "--lease", fmt::format("{}ms", std::max(30000, 3 * options.delivery_timeout_ms))};
  for (std::int64_t round = 0; round < options.drain_rounds; ++round) {
    // Alternate who goes first, so a change of disk latency mid-run hits both.
    const auto run_loop = [&] {
      figures.loop.seconds.push_back(TimeOneDrain(options, dir, source, "drain-loop",
                                                  options.drain_events, loop, brokers, topic));
    };
    const auto run_relay = [&] {
      figures.relay.seconds.push_back(TimeOneDrain(options, dir, source, "drain-relay",
                                                   options.drain_events, relay, brokers, topic));
    };
    if (round % 2 == 0) {
      run_loop();
      run_relay();
    } else {
      run_relay();
      run_loop();
    }
    figures.chapter.seconds.push_back(TimeOneDrain(options, dir, chapter_source, "drain-chapter",
                                                   options.chapter_events, chapter, brokers,
                                                   topic));
  }
  Finish(figures.chapter);
  Finish(figures.loop);
  Finish(figures.relay);
  figures.relay_over_loop = Ratio(figures.relay.events_per_s, figures.loop.events_per_s);
  figures.relay_over_chapter = Ratio(figures.relay.events_per_s, figures.chapter.events_per_s);
  return figures;
}

}  // namespace outbox::lab::bench
