// bench's compression figure: the in-process relay drains the same backlog with
// compression.type none and lz4 on an in-process mock cluster, and librdkafka's statistics
// count the bytes each sent.
#include <catch2/catch.hpp>

#include <filesystem>

#include "lab/bench/bench_support.h"
#include "lab/broker/embedded_broker.h"
#include "lab/check/topic_reader.h"
#include "test_support.h"

TEST_CASE("Bench compression figure drains with none and lz4 and lz4 sends fewer bytes", "[bench][kafka]") {
  outbox::lab::EmbeddedBroker broker;
  broker.CreateTopic("bench-compression", 1);
  outbox::SystemClock clock;
  outbox::lab::BenchmarkOptions options;
  options.store.clock = &clock;
  options.drain_events = 2000;
  options.drain_rounds = 2;
  options.batch_size = 500;
  // -X compression.type from the command line loses to the figure's own.
  options.properties = {{"compression.type", "gzip"}};
  outbox::lab::bench::TempDir dir("");

  const auto figures = outbox::lab::bench::MeasureCompression(options, dir, broker.BootstrapServers(),
                                                              "bench-compression");

  REQUIRE(figures.size() == 2);
  CHECK(figures[0].codec == "none");
  CHECK(figures[1].codec == "lz4");
  for (const outbox::lab::CompressionFigure& f : figures) {
    INFO(f.codec << ": tx_bytes=" << f.tx_bytes);
    CHECK(f.events == 2000);
    REQUIRE(f.events_per_s.size() == 2);
    CHECK(f.median_events_per_s > 0);
    CHECK(f.bytes_per_event == Approx(static_cast<double>(f.tx_bytes) / 2000));
  }
  // The lab's chapter event, key and headers: well over 100 bytes a record uncompressed (167 in
  // the bench's run), and lz4 at least halves it.
  CHECK(figures[0].bytes_per_event > 100);
  CHECK(figures[1].tx_bytes * 2 < figures[0].tx_bytes);
  // Two rounds of two codecs, plus one warm-up record each, all on the topic; no database left.
  outbox::lab::TopicReadOptions read;
  read.brokers = broker.BootstrapServers();
  read.topic = "bench-compression";
  CHECK(outbox::lab::ReadTopic(read).size() == 4 * 2000 + 4);
  CHECK(outbox::testing::ListDir(dir.path()) == std::vector<std::string>{});
}
