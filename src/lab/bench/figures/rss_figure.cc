#include <fmt/format.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "lab/bench/bench_support.h"
#include "lab/bench/statistics.h"
#include "lab/broker/subprocess.h"
#include "outbox/kafka/handles.h"
#include "outbox/error.h"

namespace outbox::lab::bench {
namespace {

constexpr int kRssSampleIntervalMs = 10;
// How often the drain's progress (records on the topic) is sampled, and the bound on one sample.
constexpr int kProgressIntervalMs = 250;
constexpr int kWatermarkTimeoutMs = 1000;

// Records on the topic now, summed over its partitions (high watermarks): a read of the broker's
// metadata only, so sampling it does not slow the relay it watches. -1 when the broker does not
// answer within kWatermarkTimeoutMs.
class TopicSize {
 public:
  TopicSize(const BenchmarkOptions& options, const std::string& brokers, const std::string& topic)
      : topic_(topic) {
    std::vector<kafka::Property> properties = {{"bootstrap.servers", brokers}, {"log_level", "2"}};
    properties.insert(properties.end(), options.properties.begin(), options.properties.end());
    client_ = kafka::MakeClient(RD_KAFKA_PRODUCER, kafka::MakeConf(properties));
  }

  std::int64_t Records() {
    if (partitions_.empty()) {
      const rd_kafka_metadata_t* raw = nullptr;
      const rd_kafka_resp_err_t err =
          rd_kafka_metadata(client_.get(), 1, nullptr, &raw, kWatermarkTimeoutMs);
      kafka::MetadataHandle metadata(raw);
      if (err) return -1;
      for (int t = 0; t < metadata->topic_cnt; ++t)
        if (topic_ == metadata->topics[t].topic)
          for (int p = 0; p < metadata->topics[t].partition_cnt; ++p)
            partitions_.push_back(metadata->topics[t].partitions[p].id);
    }
    std::int64_t total = 0;
    for (const std::int32_t partition : partitions_) {
      int64_t low = 0, high = 0;
      if (rd_kafka_query_watermark_offsets(client_.get(), topic_.c_str(), partition, &low, &high,
                                           kWatermarkTimeoutMs))
        return -1;
      total += high;
    }
    return total;
  }

 private:
  std::string topic_;
  kafka::KafkaHandle client_;
  std::vector<std::int32_t> partitions_;
};

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
  TopicSize topic_size(options, brokers, topic);
  const std::int64_t records_before = topic_size.Records();
  RssFigure figure;
  const auto start = SteadyClock::now();
  auto next_sample = start;
  ChildProcess child(args, dir.File("relay-rss.out"));
  const ChildExit exit = child.WaitTrackingPeakRss(kRssSampleIntervalMs, [&] {
    if (records_before < 0 || SteadyClock::now() < next_sample) return;
    next_sample += std::chrono::milliseconds(kProgressIntervalMs);
    const std::int64_t records = topic_size.Records();
    if (records >= 0) figure.progress.push_back({SecondsSince(start), records - records_before});
  });
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
