// The commit-to-mark figure and the idle-CPU figure: a `relay` child with its
// default options, as it runs in production, fed by a paced `write` child.
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "lab/bench/bench_support.h"
#include "lab/bench/statistics.h"
#include "lab/broker/subprocess.h"
#include "lab/chapter/loans.h"
#include "outbox/error.h"

namespace outbox::lab::bench {
namespace {

// How often the parent looks at the database while it waits for the relay child.
constexpr int kPollIntervalMs = 5;
// Bound on the relay child's start-up (connect, metadata, first batch).
constexpr int kRelayStartTimeoutMs = 30000;

std::vector<std::string> StoreArgs(const BenchmarkOptions& options, const std::string& db) {
  return {"--db", db, "--synchronous", options.synchronous, "--busy-timeout",
          fmt::format("{}ms", options.store.busy_timeout_ms)};
}

// `relay` with its defaults: only where it reads and writes, and the bench's -X properties.
std::vector<std::string> RelayArgs(const BenchmarkOptions& options, const std::string& db,
                                   const std::string& brokers, const std::string& topic) {
  std::vector<std::string> args = {options.lab_binary, "relay", "--quiet"};
  for (std::string& arg : StoreArgs(options, db)) args.push_back(std::move(arg));
  for (std::string arg : {"--brokers", brokers.c_str(), "--topic", topic.c_str()})
    args.push_back(std::move(arg));
  for (const auto& [name, value] : options.properties) {
    args.push_back("-X");
    args.push_back(fmt::format("{}={}", name, value));
  }
  return args;
}

// Blocks until `published` rows of store are published, looking every
// kPollIntervalMs (the bench waits; it does not time this). Throws Error when
// the relay child exits first or timeout_ms passes.
void AwaitPublished(Store& store, std::int64_t published, ChildProcess& relay,
                    const std::string& what, int timeout_ms) {
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const std::int64_t now_published = store.Count().published;
    if (now_published >= published) return;
    if (relay.TryWait())
      throw Error(fmt::format("{}: the relay child ended ({}) with {} of {} rows published", what,
                              DescribeStatus(relay.last_status()), now_published, published));
    if (SteadyClock::now() > deadline)
      throw Error(fmt::format("{}: {} of {} rows published after {} ms", what, now_published,
                              published, timeout_ms));
    std::this_thread::sleep_for(std::chrono::milliseconds(kPollIntervalMs));
  }
}

// A fresh lab database at path with one loan written (the warm-up row, id 1),
// and a relay child on it that has published that row: connected, topic
// metadata fetched, idle.
std::unique_ptr<Store> StartWarmRelay(const BenchmarkOptions& options, const TempDir& dir,
                                      const std::string& name, const std::string& brokers,
                                      const std::string& topic,
                                      std::unique_ptr<ChildProcess>& relay) {
  const std::string path = dir.File(name + ".db");
  auto store = FreshDatabase(path, options.store);
  WriteLoanWithEvent(*store, 1);
  relay = std::make_unique<ChildProcess>(RelayArgs(options, path, brokers, topic),
                                         dir.File(name + "-relay.out"));
  AwaitPublished(*store, 1, *relay, name + ": warm-up row", kRelayStartTimeoutMs);
  return store;
}

}  // namespace

LatencyFigure MeasureLatency(const BenchmarkOptions& options, const TempDir& dir,
                             const std::string& brokers, const std::string& topic,
                             Workload workload) {
  const std::string name = "latency-" + WorkloadName(workload);
  std::unique_ptr<ChildProcess> relay;
  auto store = StartWarmRelay(options, dir, name, brokers, topic, relay);
  std::vector<std::string> writer_args = {options.lab_binary, "write",
                                          std::to_string(options.latency_events), "--workload",
                                          WorkloadName(workload), "--rate",
                                          std::to_string(options.latency_rate)};
  for (std::string& arg : StoreArgs(options, store->path())) writer_args.push_back(std::move(arg));
  LatencyFigure figure;
  figure.workload = WorkloadName(workload);
  figure.rate_per_s = static_cast<double>(options.latency_rate);
  const auto start = SteadyClock::now();
  ChildProcess writer(writer_args, dir.File(name + "-write.out"));
  const ChildExit exit = writer.Wait();
  figure.writer_seconds = SecondsSince(start);
  if (!WIFEXITED(exit.status) || WEXITSTATUS(exit.status) != 0)
    throw Error(fmt::format("{}: writer child '{} write': {} (output in '{}')", name,
                            options.lab_binary, DescribeStatus(exit.status),
                            dir.File(name + "-write.out")));
  // The backlog, if any, drains at the relay's pace: allow the delivery timeout on top.
  AwaitPublished(*store, options.latency_events + 1, *relay, name,
                 kRelayStartTimeoutMs + options.delivery_timeout_ms);
  std::vector<double> delays;
  for (const std::int64_t ms : store->PublishDelaysMs(1)) delays.push_back(static_cast<double>(ms));
  figure.events = static_cast<std::int64_t>(delays.size());
  if (figure.events != options.latency_events)
    throw Error(fmt::format("{}: {} delays read for {} rows written", name, figure.events,
                            options.latency_events));
  figure.p50_ms = Percentile(delays, 50);
  figure.p99_ms = Percentile(delays, 99);
  figure.max_ms = Percentile(delays, 100);
  return figure;
}

IdleFigure MeasureIdle(const BenchmarkOptions& options, const TempDir& dir,
                       const std::string& brokers, const std::string& topic) {
  std::unique_ptr<ChildProcess> relay;
  auto store = StartWarmRelay(options, dir, "idle", brokers, topic, relay);
  const long ticks_before = ReadCpuTicks(relay->pid());
  const auto start = SteadyClock::now();
  // The measurement window itself: the relay is left alone for idle_ms.
  std::this_thread::sleep_for(std::chrono::milliseconds(options.idle_ms));
  const long ticks_after = ReadCpuTicks(relay->pid());
  IdleFigure figure;
  figure.seconds = SecondsSince(start);
  if (ticks_before < 0 || ticks_after < 0 || relay->TryWait())
    throw Error(fmt::format("idle relay: the relay child ended during the window ({})",
                            DescribeStatus(relay->last_status())));
  figure.cpu_ticks = ticks_after - ticks_before;
  figure.cpu_percent = 100.0 * static_cast<double>(figure.cpu_ticks) /
                       static_cast<double>(sysconf(_SC_CLK_TCK)) / figure.seconds;
  return figure;
}

}  // namespace outbox::lab::bench
