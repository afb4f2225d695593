#include <fmt/format.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <functional>
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

// Runs program (the executable, then its subcommand and options) on a fresh copy of source,
// timed from spawn to exit; requires exit 0 and every row published.
double TimeOneDrain(const BenchmarkOptions& options, const TempDir& dir, const std::string& source,
                    const std::string& name, std::int64_t events,
                    const std::vector<std::string>& program, const std::string& brokers,
                    const std::string& topic) {
  const std::string db = dir.File(name + ".db");
  std::error_code ec;
  fs::remove(db, ec);
  fs::copy_file(source, db, fs::copy_options::overwrite_existing, ec);
  if (ec) ThrowSystemError(fmt::format("copy '{}' to '{}'", source, db), ec.value());
  std::vector<std::string> args = program;
  const std::vector<std::string> common = CommonArgs(options, db, brokers, topic);
  args.insert(args.end(), common.begin(), common.end());
  const auto start = SteadyClock::now();
  ChildProcess child(args, dir.File(name + ".out"));
  const ChildExit exit = child.Wait();
  const double seconds = SecondsSince(start);
  if (!WIFEXITED(exit.status) || WEXITSTATUS(exit.status) != 0)
    throw Error(fmt::format("child '{} {}' on '{}': {} (output in '{}')", program.at(0),
                            program.at(1), db, DescribeStatus(exit.status),
                            dir.File(name + ".out")));
  Store store(db, options.store, OpenMode::kExisting);
  const OutboxCounts counts = store.Count();
  if (counts.published != events)
    throw Error(fmt::format("child '{} {}' on '{}': {} of {} rows published", program.at(0),
                            program.at(1), db, counts.published, events));
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

// True when options.python can import confluent_kafka and options.python_relay exists: the
// Python comparator can run.
bool PythonRelayRuns(const BenchmarkOptions& options, const TempDir& dir) {
  std::error_code ec;
  if (options.python.empty() || options.python_relay.empty() ||
      !fs::exists(options.python_relay, ec))
    return false;
  try {
    ChildProcess probe({options.python, "-c", "import confluent_kafka, sqlite3"},
                       dir.File("python-probe.out"));
    const ChildExit exit = probe.Wait();
    return WIFEXITED(exit.status) && WEXITSTATUS(exit.status) == 0;
  } catch (const Error&) {
    return false;  // no interpreter there
  }
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
  const bool python = PythonRelayRuns(options, dir);
  if (python)
    figures.python = {"python3 bench/python_relay.py --batch-size " + batch, options.drain_events,
                      {}, 0, 0};
  const std::vector<std::string> chapter = {options.lab_binary, "publish",
                                            std::to_string(options.chapter_events),
                                            "--delivery-timeout", timeout};
  const std::vector<std::string> loop = {options.lab_binary, "batch-loop", "--batch-size", batch,
                                         "--delivery-timeout", timeout};
  const std::vector<std::string> relay = {
      options.lab_binary, "relay", "--until-empty", "--quiet", "--batch-size", batch,
      "--delivery-timeout", timeout,
      "--lease", fmt::format("{}ms", std::max(30000, 3 * options.delivery_timeout_ms))};
  const std::vector<std::string> python_relay = {options.python, options.python_relay,
                                                 "--batch-size", batch};
  for (std::int64_t round = 0; round < options.drain_rounds; ++round) {
    const auto lane = [&](DrainFigure& figure, const std::string& from, const std::string& name,
                          const std::vector<std::string>& program) {
      return [&, from, name] {
        figure.seconds.push_back(
            TimeOneDrain(options, dir, from, name, figure.events, program, brokers, topic));
      };
    };
    std::vector<std::function<void()>> lanes = {
        lane(figures.loop, source, "drain-loop", loop),
        lane(figures.relay, source, "drain-relay", relay),
        lane(figures.chapter, chapter_source, "drain-chapter", chapter)};
    if (python) lanes.push_back(lane(figures.python, source, "drain-python", python_relay));
    // Rotate who goes first, so drift (disk latency, other load) hits every program alike.
    std::rotate(lanes.begin(), lanes.begin() + round % static_cast<std::int64_t>(lanes.size()),
                lanes.end());
    for (const auto& run : lanes) run();
  }
  Finish(figures.chapter);
  Finish(figures.loop);
  Finish(figures.relay);
  if (python) Finish(figures.python);
  // Same events per round on both sides: rate ratio = seconds of the other ÷ seconds of relay.
  const auto per_round = [&figures](const DrainFigure& other) {
    std::vector<double> relay_rates, other_rates;
    for (const double s : figures.relay.seconds) relay_rates.push_back(Rate(figures.relay.events, s));
    for (const double s : other.seconds) other_rates.push_back(Rate(other.events, s));
    return SpreadOf(RoundRatios(relay_rates, other_rates));
  };
  figures.relay_over_loop_spread = per_round(figures.loop);
  figures.relay_over_chapter_spread = per_round(figures.chapter);
  figures.relay_over_python_spread = per_round(figures.python);
  figures.relay_over_loop = figures.relay_over_loop_spread.median;
  figures.relay_over_chapter = figures.relay_over_chapter_spread.median;
  figures.relay_over_python = figures.relay_over_python_spread.median;
  return figures;
}

}  // namespace outbox::lab::bench
