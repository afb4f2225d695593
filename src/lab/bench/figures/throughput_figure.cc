#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <set>

#include "lab/bench/bench_support.h"
#include "lab/bench/statistics.h"
#include "lab/chapter/loans.h"
#include "outbox/error.h"
#include "outbox/kafka/kafka_publisher.h"
#include "outbox/open_store.h"
#include "outbox/per_row_relay.h"
#include "outbox/relay.h"

namespace outbox::lab::bench {

namespace {

// Delivery reports of the raw producer. Served on our thread (rd_kafka_poll,
// rd_kafka_flush), so plain counters do.
struct RawDeliveries {
  std::int64_t ok = 0;
  std::int64_t failed = 0;
  rd_kafka_resp_err_t first_error = RD_KAFKA_RESP_ERR_NO_ERROR;
};

void OnRawDelivery(rd_kafka_t*, const rd_kafka_message_t* msg, void* opaque) noexcept {
  auto* deliveries = static_cast<RawDeliveries*>(opaque);
  if (msg->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    ++deliveries->ok;
    return;
  }
  ++deliveries->failed;
  if (deliveries->first_error == RD_KAFKA_RESP_ERR_NO_ERROR) deliveries->first_error = msg->err;
}

// Produces m as KafkaPublisher does (same key, value and headers), waiting
// for room when the local queue is full.
void ProduceRaw(rd_kafka_t* producer, const std::string& topic, const OutboundMessage& m) {
  const rd_kafka_resp_err_t err = kafka::ProduceOutboundMessage(producer, topic, m, nullptr);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) kafka::ThrowKafkaError("raw produce", err);
  rd_kafka_poll(producer, 0);
}

// Raw asynchronous produce of options.events records (the same key, value and headers as
// KafkaPublisher's), built and warmed up before any slice is timed; Produce sends the next ones,
// up to a count, and flushes.
class RawProducer {
 public:
  RawProducer(const BenchmarkOptions& options, const std::string& brokers, const std::string& topic)
      : topic_(topic), delivery_timeout_ms_(options.delivery_timeout_ms) {
    messages_.reserve(static_cast<std::size_t>(options.events));
    for (std::int64_t i = 1; i <= options.events; ++i)
      messages_.push_back(MessageForRow(RowFor(i, options.store.clock->EpochMs())));
    std::vector<kafka::Property> properties = {
        {"bootstrap.servers", brokers},
        {"acks", "all"},
        {"message.timeout.ms", std::to_string(options.delivery_timeout_ms)},
    };
    properties.insert(properties.end(), options.properties.begin(), options.properties.end());
    kafka::ConfHandle conf = kafka::MakeConf(properties);
    rd_kafka_conf_set_dr_msg_cb(conf.get(), &OnRawDelivery);
    rd_kafka_conf_set_opaque(conf.get(), &deliveries_);
    producer_ = kafka::MakeClient(RD_KAFKA_PRODUCER, std::move(conf));
    OutboundMessage warmup;
    warmup.key = "bench-warmup";
    warmup.payload = "{}";
    ProduceRaw(producer_.get(), topic_, warmup);
    rd_kafka_flush(producer_.get(), delivery_timeout_ms_);
    if (deliveries_.ok != 1)
      throw KafkaError(fmt::format("raw produce warm-up: {}", kafka::DescribeError(deliveries_.first_error)),
                       deliveries_.first_error);
    deliveries_ = RawDeliveries{};
  }

  // Produces messages up to index until (exclusive), flushes; the events acknowledged and the
  // seconds taken. Throws KafkaError when the flush times out or a delivery fails.
  ThroughputFigure Produce(std::int64_t until) {
    const std::int64_t before = deliveries_.ok;
    const auto start = SteadyClock::now();
    for (; next_ < until; ++next_)
      ProduceRaw(producer_.get(), topic_, messages_[static_cast<std::size_t>(next_)]);
    const rd_kafka_resp_err_t flushed = rd_kafka_flush(producer_.get(), delivery_timeout_ms_ + 5000);
    ThroughputFigure figure;
    figure.seconds = SecondsSince(start);
    if (flushed != RD_KAFKA_RESP_ERR_NO_ERROR) kafka::ThrowKafkaError("raw produce: flush", flushed);
    if (deliveries_.failed > 0)
      throw KafkaError(fmt::format("raw produce: {} deliveries failed, first: {}", deliveries_.failed,
                                   kafka::DescribeError(deliveries_.first_error)),
                       deliveries_.first_error);
    figure.events = deliveries_.ok - before;
    return figure;
  }

 private:
  std::string topic_;
  int delivery_timeout_ms_;
  std::vector<OutboundMessage> messages_;
  std::int64_t next_ = 0;
  // Declared before the producer, destroyed after it: reports write into it.
  RawDeliveries deliveries_;
  kafka::KafkaHandle producer_;
};

}  // namespace

RelayFigures RunInterleaved(const BenchmarkOptions& options, OutboxStore& chapter_store,
                            Publisher& chapter_publisher, Relay& relay, const std::string& where,
                            const RawSlice& raw_slice) {
  RelayFigures figures;
  for (int slice = 0; slice < kSlices; ++slice) {
    const auto run_chapter = [&] {
      const std::int64_t rows = SliceEnd(options.chapter_events, slice) - figures.chapter.events;
      if (rows <= 0) {  // a rate of 0 keeps the lanes' slices paired; RoundRatios skips it
        figures.chapter_rates.push_back(0);
        return;
      }
      const auto start = SteadyClock::now();
      const PerRowRelayReport report =
          RunPerRowRelay(chapter_store, chapter_publisher, {rows, /*mark=*/true}, nullptr);
      const double seconds = SecondsSince(start);
      figures.chapter.seconds += seconds;
      figures.chapter.events += report.marked;
      figures.chapter_rates.push_back(Rate(report.marked, seconds));
      if (report.marked != rows)
        RequireAllDelivered(("chapter algorithm" + where).c_str(), options.chapter_events,
                            figures.chapter.events);
    };
    const auto run_relay = [&] {
      const std::int64_t until = SliceEnd(options.events, slice);
      const std::int64_t before = figures.relay.events;
      const auto start = SteadyClock::now();
      figures.relay.events = RunPipelinedSlice(relay, options.batch_size, before, until);
      const double seconds = SecondsSince(start);
      figures.relay.seconds += seconds;
      figures.relay_rates.push_back(Rate(figures.relay.events - before, seconds));
    };
    const auto run_raw = [&] {
      const ThroughputFigure part = raw_slice(slice);
      figures.raw.events += part.events;
      figures.raw.seconds += part.seconds;
      figures.raw_rates.push_back(Rate(part.events, part.seconds));
    };
    // Rotate who goes first, so drift (disk latency, the other engineers' builds) hits all alike.
    std::vector<std::function<void()>> lanes = {run_chapter, run_relay};
    if (raw_slice) lanes.push_back(run_raw);
    std::rotate(lanes.begin(), lanes.begin() + slice % static_cast<int>(lanes.size()), lanes.end());
    for (const auto& lane : lanes) lane();
  }
  RequireAllDelivered(("chapter algorithm" + where).c_str(), options.chapter_events,
                      figures.chapter.events);
  RequireAllDelivered(("relay" + where).c_str(), options.events, figures.relay.events);
  return figures;
}

// The chapter's relay and the production relay, each on its own database and
// producer, run in kSlices alternating slices; each figure is its events over
// the sum of its slices' times. The chapter commits once per row, the relay
// twice per batch, so a change in fsync latency during the run (this VM's disk
// alternates between ~0.1 ms and ~4 ms) must hit both alike.
RelayFigures MeasureRelays(const BenchmarkOptions& options, const TempDir& dir,
                           const std::string& brokers, const std::string& topic) {
  auto chapter_store = FreshDatabase(dir.File("chapter.db"), options.store);
  Populate(*chapter_store, 1, options.chapter_events, /*published=*/false);
  const std::string relay_path = dir.File("relay.db");
  auto relay_store = FreshDatabase(relay_path, options.store);
  Populate(*relay_store, 1, options.events, /*published=*/false);

  kafka::KafkaPublisher chapter_publisher(PublisherOptions(options, brokers, topic));
  kafka::KafkaPublisherOptions relay_publisher_options = PublisherOptions(options, brokers, topic);
  relay_publisher_options.linger_ms = kafka::kBatchLingerMs;  // as relay's own
  kafka::KafkaPublisher relay_publisher(relay_publisher_options);
  WarmUp(chapter_publisher);
  WarmUp(relay_publisher);
  RelayOptions relay_options;
  relay_options.batch_size = options.batch_size;
  relay_options.owner = fmt::format("bench-{}", getpid());
  relay_options.coordination = Coordination::kLeader;  // the default on SQLite, as `relay` runs
  // The marks on a second connection, in a worker thread, as `relay` does by default.
  const std::unique_ptr<OutboxStore> settle_store = OpenStore(relay_path, OpenMode::kExisting,
                                                              options.store);
  relay_options.settle_store = settle_store.get();
  Relay relay(*relay_store, relay_publisher, relay_options);

  RawProducer raw(options, brokers, topic);
  RelayFigures figures = RunInterleaved(options, *chapter_store, chapter_publisher, relay, "",
                                        [&raw, &options](int slice) {
                                          return raw.Produce(SliceEnd(options.events, slice));
                                        });
  RequireAllDelivered("raw produce", options.events, figures.raw.events);
  figures.raw.events_per_s = Rate(figures.raw.events, figures.raw.seconds);
  if (relay_store->PendingCount() != 0)
    throw KafkaError(fmt::format("relay: {} rows still pending in '{}'",
                                 relay_store->PendingCount(), relay_path),
                     RD_KAFKA_RESP_ERR__MSG_TIMED_OUT);
  figures.chapter.events_per_s = Rate(figures.chapter.events, figures.chapter.seconds);
  figures.relay.events_per_s = Rate(figures.relay.events, figures.relay.seconds);
  return figures;
}

namespace {

// splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", 2014):
// a fixed scramble of i, so the random keys are the same in every run.
std::uint64_t SplitMix64(std::uint64_t i) {
  std::uint64_t z = i + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Makes the event of row i (from 0) at now (epoch ms).
using EventMaker = std::function<OutboxEvent(std::int64_t i, std::int64_t now)>;

// Loads options.workload_events unpublished rows made by make_event(i, now) (i from 0, now the
// store's clock in epoch ms) into a fresh lab database at db, then times a Relay (leader mode, a
// settle store, as `relay` runs) on publisher until none is pending.
WorkloadThroughputFigure DrainWorkload(const BenchmarkOptions& options, const std::string& db,
                                       Publisher& publisher, const std::string& name,
                                       const EventMaker& make_event) {
  auto store = FreshDatabase(db, options.store);
  std::set<std::string> aggregates;
  store->BulkLoad(
      options.workload_events,
      [&, now = store->clock().EpochMs()](std::int64_t i) {
        OutboxEvent event = make_event(i, now);
        aggregates.insert(event.aggregate_id);
        return event;
      },
      /*published=*/false);
  RelayOptions relay_options;
  relay_options.batch_size = options.batch_size;
  relay_options.owner = fmt::format("bench-{}-{}", getpid(), name);
  // Leader mode, the relay's default on SQLite: a claim (claims mode) takes at most one row per
  // aggregate, which caps a batch at 50 rows on workload 50 (issue 8, item 3).
  relay_options.coordination = Coordination::kLeader;
  // The marks on a second connection, in a worker thread, as `relay` does by default.
  const std::unique_ptr<OutboxStore> settle_store = OpenStore(db, OpenMode::kExisting,
                                                              options.store);
  relay_options.settle_store = settle_store.get();
  Relay relay(*store, publisher, relay_options);

  WorkloadThroughputFigure figure;
  figure.workload = name;
  figure.aggregates = static_cast<std::int64_t>(aggregates.size());
  const auto start = SteadyClock::now();
  figure.relay.events = RunPipelinedSlice(relay, options.batch_size, 0, options.workload_events);
  figure.relay.seconds = SecondsSince(start);
  const std::string lane = "relay, workload " + figure.workload;
  RequireAllDelivered(lane.c_str(), options.workload_events, figure.relay.events);
  if (store->PendingCount() != 0)
    throw KafkaError(
        fmt::format("{}: {} rows still pending in '{}'", lane, store->PendingCount(), db),
        RD_KAFKA_RESP_ERR__MSG_TIMED_OUT);
  figure.relay.events_per_s = Rate(figure.relay.events, figure.relay.seconds);
  return figure;
}

}  // namespace

WorkloadThroughputFigure MeasureRelayOnWorkload(const BenchmarkOptions& options,
                                                const std::string& db, Publisher& publisher,
                                                Workload workload) {
  const auto make_event = [workload](std::int64_t i, std::int64_t now) {
    return LoanCreatedEvent(ChapterLoan(LoanNumberFor(workload, i + 1), now), i + 1);
  };
  return DrainWorkload(options, db, publisher, WorkloadName(workload), make_event);
}

WorkloadThroughputFigure MeasureRelayOnRandomKeys(const BenchmarkOptions& options,
                                                  const std::string& db, Publisher& publisher) {
  const auto make_event = [](std::int64_t i, std::int64_t now) {
    OutboxEvent event = LoanCreatedEvent(ChapterLoan(i + 1, now), i + 1);
    const auto n = static_cast<std::uint64_t>(i);
    event.aggregate_id = fmt::format("{:016x}{:016x}", SplitMix64(2 * n), SplitMix64(2 * n + 1));
    return event;
  };
  return DrainWorkload(options, db, publisher, kRandomKeysWorkload, make_event);
}

}  // namespace outbox::lab::bench
