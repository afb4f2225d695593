#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <string_view>

#include "lab/bench/bench_support.h"
#include "lab/bench/statistics.h"
#include "outbox/error.h"
#include "outbox/kafka/kafka_publisher.h"
#include "outbox/relay.h"

namespace outbox::lab::bench {
namespace {

// librdkafka emits statistics every this many ms; the figure waits for two after each mark.
constexpr int kStatisticsIntervalMs = 100;
constexpr int kStatisticsWaitMs = 5000;

// The producer's "tx_bytes" (bytes sent to every broker) from its latest statistics document.
// Written by the stats callback, which runs inside rd_kafka_poll on this thread.
struct TxBytes {
  std::int64_t bytes = 0;
  std::int64_t documents = 0;
};

// Polls until two more statistics documents have arrived, so the last one was made after every
// request sent before this call. Returns the bytes sent so far. Throws KafkaError when none come.
std::int64_t SettledTxBytes(kafka::KafkaPublisher& publisher, const TxBytes& tx,
                            const std::string& codec) {
  const std::int64_t wanted = tx.documents + 2;
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(kStatisticsWaitMs);
  while (tx.documents < wanted && SteadyClock::now() < deadline) rd_kafka_poll(publisher.handle(), 20);
  if (tx.documents < wanted)
    throw KafkaError(fmt::format("compression {}: no librdkafka statistics within {} ms", codec,
                                 kStatisticsWaitMs),
                     RD_KAFKA_RESP_ERR__TIMED_OUT);
  return tx.bytes;
}

struct Round {
  double events_per_s = 0;
  std::int64_t tx_bytes = 0;
};

Round DrainOnce(const BenchmarkOptions& options, const TempDir& dir, const std::string& brokers,
                const std::string& topic, const std::string& codec, int round) {
  const std::string db = dir.File(fmt::format("compression-{}-{}.db", codec, round));
  auto store = FreshDatabase(db, options.store);
  Populate(*store, 1, options.drain_events, /*published=*/false);

  TxBytes tx;
  kafka::KafkaPublisherOptions publisher_options = PublisherOptions(options, brokers, topic);
  publisher_options.linger_ms = kafka::kBatchLingerMs;  // the relay's, as relay sets it
  publisher_options.properties.push_back({"compression.type", codec});
  publisher_options.properties.push_back(
      {"statistics.interval.ms", std::to_string(kStatisticsIntervalMs)});
  publisher_options.on_statistics = [&tx](std::string_view json) {
    const auto document = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
    if (document.is_object() && document.contains("tx_bytes") && document["tx_bytes"].is_number()) {
      tx.bytes = document["tx_bytes"].get<std::int64_t>();
      ++tx.documents;
    }
  };
  kafka::KafkaPublisher publisher(publisher_options);
  WarmUp(publisher);
  RelayOptions relay_options;
  relay_options.batch_size = options.batch_size;
  relay_options.owner = fmt::format("bench-{}-{}", getpid(), codec);
  relay_options.coordination = Coordination::kLeader;  // the default on SQLite, as `relay` runs
  // The marks on a second connection, in a worker thread, as `relay` does by default.
  Store settle_store(db, options.store, OpenMode::kExisting);
  relay_options.settle_store = &settle_store;
  Relay relay(*store, publisher, relay_options);

  const std::int64_t before = SettledTxBytes(publisher, tx, codec);
  const auto start = SteadyClock::now();
  const std::int64_t marked = RunPipelinedSlice(relay, options.batch_size, 0, options.drain_events);
  const double seconds = SecondsSince(start);
  const std::string name = "relay, compression " + codec;
  RequireAllDelivered(name.c_str(), options.drain_events, marked);
  if (store->PendingCount() != 0)
    throw KafkaError(fmt::format("{}: {} rows still pending in '{}'", name, store->PendingCount(), db),
                     RD_KAFKA_RESP_ERR__MSG_TIMED_OUT);
  return {Rate(marked, seconds), SettledTxBytes(publisher, tx, codec) - before};
}

}  // namespace

std::vector<CompressionFigure> MeasureCompression(const BenchmarkOptions& options,
                                                  const TempDir& dir, const std::string& brokers,
                                                  const std::string& topic) {
  std::vector<CompressionFigure> figures(2);
  figures[0].codec = "none";
  figures[1].codec = "lz4";
  for (int round = 0; round < options.drain_rounds; ++round) {
    // Alternate which codec goes first, so a change in disk latency hits both alike.
    for (int i = 0; i < 2; ++i) {
      CompressionFigure& figure = figures[(i + round) % 2];
      const Round measured = DrainOnce(options, dir, brokers, topic, figure.codec, round);
      for (const char* suffix : {"", "-wal", "-shm", "-turn"}) {  // the database and its side files
        std::error_code ignored;  // a leftover file goes with the temporary directory
        fs::remove(dir.File(fmt::format("compression-{}-{}.db{}", figure.codec, round, suffix)),
                   ignored);
      }
      figure.events_per_s.push_back(measured.events_per_s);
      figure.tx_bytes = measured.tx_bytes;
    }
  }
  for (CompressionFigure& figure : figures) {
    figure.events = options.drain_events;
    figure.median_events_per_s = Median(figure.events_per_s);
    figure.bytes_per_event =
        static_cast<double>(figure.tx_bytes) / static_cast<double>(figure.events);
  }
  return figures;
}

}  // namespace outbox::lab::bench
