#include "lab/bench/benchmark.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <thread>

#include "lab/bench/bench_support.h"
#include "lab/bench/statistics.h"
#include "lab/broker/subprocess.h"
#include "outbox/error.h"

namespace outbox::lab {
namespace {

using namespace bench;

constexpr int kBrokerStartTimeoutMs = 15000;

// The embedded broker in its own process (outbox-lab broker), reachable once
// it has written its address file.
class BrokerChild {
 public:
  BrokerChild(const BenchmarkOptions& options, const TempDir& dir, const std::string& topic)
      : addr_file_(dir.File("broker.addr")),
        process_({options.lab_binary, "broker", "--addr-file", addr_file_, "--topic", topic},
                 dir.File("broker.out")) {
    const auto deadline = SteadyClock::now() + std::chrono::milliseconds(kBrokerStartTimeoutMs);
    while (SteadyClock::now() < deadline) {
      std::ifstream in(addr_file_);
      if (in && std::getline(in, bootstrap_) && !bootstrap_.empty()) return;
      if (process_.TryWait())
        throw KafkaError(fmt::format("start embedded broker '{} broker': {}", options.lab_binary,
                                     DescribeStatus(process_.last_status())),
                         RD_KAFKA_RESP_ERR__TRANSPORT);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    throw KafkaError(fmt::format("start embedded broker: no address in '{}' after {} ms",
                                 addr_file_, kBrokerStartTimeoutMs),
                     RD_KAFKA_RESP_ERR__TIMED_OUT);
  }

  const std::string& bootstrap() const noexcept { return bootstrap_; }

 private:
  std::string addr_file_;
  std::string bootstrap_;
  ChildProcess process_;
};

// getloadavg's 1, 5 and 15 minute averages; empty when it fails.
std::vector<double> LoadAverage() {
  double load[3] = {0, 0, 0};
  const int n = getloadavg(load, 3);
  return std::vector<double>(load, load + std::max(n, 0));
}

void RequirePositive(const char* name, std::int64_t value) {
  if (value <= 0) throw ConfigError(fmt::format("{} {}: must be at least 1", name, value));
}

}  // namespace

void ValidateBenchmarkOptions(const BenchmarkOptions& options) {
  RequirePositive("chapter events", options.chapter_events);
  RequirePositive("events", options.events);
  RequirePositive("workload events", options.workload_events);
  RequirePositive("batch size", options.batch_size);
  RequirePositive("write transactions", options.write_txns);
  RequirePositive("write rounds", options.write_rounds);
  RequirePositive("history rows", options.history_rows);
  RequirePositive("history backlog", options.history_backlog);
  RequirePositive("poll repetitions", options.poll_repetitions);
  RequirePositive("rss events", options.rss_events);
  RequirePositive("drain events", options.drain_events);
  RequirePositive("drain rounds", options.drain_rounds);
  RequirePositive("delivery timeout ms", options.delivery_timeout_ms);
  RequirePositive("latency events", options.latency_events);
  RequirePositive("latency rate", options.latency_rate);
  RequirePositive("idle ms", options.idle_ms);
}

BenchmarkResult RunBenchmark(const BenchmarkOptions& given) {
  ValidateBenchmarkOptions(given);
  // Every figure reads the time from one clock: the caller's, or this one.
  SystemClock system_clock;
  BenchmarkOptions options = given;
  if (!options.store.clock) options.store.clock = &system_clock;
  kafka::MakeConf(options.properties);  // an invalid -X fails before minutes of work
  if (!options.postgres_url.empty()) bench::RequirePostgresBenchUrl(options.postgres_url);
  auto progress = [&options](const std::string& line) {
    if (options.progress) options.progress(line);
  };

  BenchmarkResult result;
  result.load_start = LoadAverage();
  result.topic = options.topic.empty() ? fmt::format("outbox-bench-{}-{}", getpid(), options.store.clock->EpochMs())
                                       : options.topic;
  // Destruction order: the broker child stops before its directory is removed.
  TempDir dir(options.work_parent);
  result.work_dir = dir.path();
  std::optional<BrokerChild> broker;
  if (options.brokers.empty()) {
    progress("starting the embedded broker");
    broker.emplace(options, dir, result.topic);
    result.brokers = broker->bootstrap();
    result.embedded_broker = true;
  } else {
    result.brokers = options.brokers;
  }

  result.fsync_us.push_back(MeasureFsyncUs(dir));
  progress(fmt::format("chapter algorithm ({} events, send + ack + mark each), relay ({} "
                       "events, batches of {}) and raw produce ({} events), interleaved",
                       options.chapter_events, options.events, options.batch_size, options.events));
  const RelayFigures relays = MeasureRelays(options, dir, result.brokers, result.topic);
  result.chapter = relays.chapter;
  result.relay = relays.relay;
  result.raw = relays.raw;
  // The ratio of each slice (every lane ran in it), and their median as the figure.
  result.relay_over_chapter_spread = SpreadOf(RoundRatios(relays.relay_rates, relays.chapter_rates));
  result.relay_over_raw_spread = SpreadOf(RoundRatios(relays.relay_rates, relays.raw_rates));
  result.relay_over_chapter = result.relay_over_chapter_spread.median;
  result.relay_over_raw = result.relay_over_raw_spread.median;

  {
    kafka::KafkaPublisherOptions publisher_options =
        PublisherOptions(options, result.brokers, result.topic);
    publisher_options.linger_ms = kafka::kBatchLingerMs;  // as relay's own
    kafka::KafkaPublisher publisher(publisher_options);
    WarmUp(publisher);
    for (const Workload workload :
         {Workload::kOwnAggregate, Workload::kFiftyAggregates, Workload::kZipf}) {
      progress(fmt::format("relay: {} events, batches of {}, workload {}", options.workload_events,
                           options.batch_size, WorkloadName(workload)));
      result.relay_by_workload.push_back(MeasureRelayOnWorkload(
          options, dir.File("relay-" + WorkloadName(workload) + ".db"), publisher, workload));
    }
    progress(fmt::format("relay: {} events, batches of {}, workload {}", options.workload_events,
                         options.batch_size, kRandomKeysWorkload));
    result.relay_by_workload.push_back(
        MeasureRelayOnRandomKeys(options, dir.File("relay-random-keys.db"), publisher));
  }

  result.fsync_us.push_back(MeasureFsyncUs(dir));
  result.write = MeasureWritePath(options, dir);
  result.fsync_us.push_back(MeasureFsyncUs(dir));
  if (!options.postgres_url.empty()) {
    result.postgres = MeasurePostgres(options, result.brokers, result.topic, result.raw);
    progress(fmt::format("PostgreSQL: relay --until-empty as a whole process, leader and claims, "
                         "{} events, {} rounds",
                         options.events, options.drain_rounds));
    MeasurePgDrains(options, dir, result.brokers, result.topic, *result.postgres);
  }
  progress("WAL frames per transaction, and the mark by id vs by range");
  result.wal_frames = MeasureWalFrames(options, dir);
  result.mark = MeasureMark(options, dir);
  result.history = MeasureHistory(options, dir);

  progress(fmt::format("whole processes: publish {} / batch-loop {} / relay {}, {} rounds",
                       options.chapter_events, options.drain_events, options.drain_events,
                       options.drain_rounds));
  result.drains = MeasureDrains(options, dir, result.brokers, result.topic);
  progress(fmt::format("relay with and without a passive checkpoint after each settle, {} "
                       "events, {} rounds", options.drain_events, options.drain_rounds));
  result.checkpoint = MeasureCheckpoint(options, dir, result.brokers, result.topic);
  progress(fmt::format("peak RSS: relay child draining {} events", options.rss_events));
  result.rss = MeasureRss(options, dir, result.brokers, result.topic);
  for (const Workload workload :
       {Workload::kOwnAggregate, Workload::kFiftyAggregates, Workload::kZipf}) {
    progress(fmt::format("commit-to-mark: {} events at {}/s, workload {}", options.latency_events,
                         options.latency_rate, WorkloadName(workload)));
    result.latency.push_back(
        MeasureLatency(options, dir, result.brokers, result.topic, workload));
  }
  progress(fmt::format("idle relay CPU over {} ms", options.idle_ms));
  result.idle = MeasureIdle(options, dir, result.brokers, result.topic);
  progress(fmt::format("relay with compression.type none and lz4: {} events, {} rounds",
                       options.drain_events, options.drain_rounds));
  result.compression = MeasureCompression(options, dir, result.brokers, result.topic);
  result.fsync_us.push_back(MeasureFsyncUs(dir));
  result.load_end = LoadAverage();
  return result;
}

}  // namespace outbox::lab
