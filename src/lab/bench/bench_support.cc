#include "lab/bench/bench_support.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "lab/bench/statistics.h"
#include "lab/broker/subprocess.h"
#include "lab/chapter/loans.h"
#include "outbox/error.h"

namespace outbox::lab::bench {
namespace {

constexpr int kFsyncProbes = 50;

}  // namespace

double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

double Micros(SteadyClock::time_point from, SteadyClock::time_point to) {
  return std::chrono::duration<double, std::micro>(to - from).count();
}



// The chapter's i-th loan event as its row: what the relays read back.
OutboxRow RowFor(std::int64_t index, std::int64_t created_at_ms) {
  OutboxRow row;
  row.id = index;
  row.event = LoanCreatedEvent(ChapterLoan(index, created_at_ms), index);
  return row;
}

// Creates a lab database (loans + outbox) at path.
std::unique_ptr<Store> FreshDatabase(const std::string& path, const StoreOptions& options) {
  return ResetLabDatabase(path, options);
}

// Inserts count outbox rows for events first..first+count-1 in ONE
// transaction (not measured), published or not, and starts every measurement
// from an empty WAL.
void Populate(Store& store, std::int64_t first, std::int64_t count, bool published) {
  store.BulkLoad(
      count,
      [first, now = store.clock().EpochMs()](std::int64_t i) {
        return LoanCreatedEvent(ChapterLoan(first + i, now), first + i);
      },
      published);
}

kafka::KafkaPublisherOptions PublisherOptions(const BenchmarkOptions& options,
                                              const std::string& brokers,
                                              const std::string& topic) {
  kafka::KafkaPublisherOptions publisher;
  publisher.brokers = brokers;
  publisher.topic = topic;
  publisher.delivery_timeout_ms = options.delivery_timeout_ms;
  publisher.properties = options.properties;
  return publisher;
}

// One record outside any figure, so connection setup and topic metadata are
// not timed.
void WarmUp(kafka::KafkaPublisher& publisher) {
  OutboundMessage message;
  message.key = "bench-warmup";
  message.payload = "{}";
  message.event_id = "bench-warmup";
  message.event_type = "Warmup";
  const DeliveryResult result = publisher.Publish({message}).front();
  if (!result.ok)
    throw KafkaError(fmt::format("warm-up delivery: {}", result.error), RD_KAFKA_RESP_ERR__TRANSPORT);
}

void RequireAllDelivered(const char* figure, std::int64_t expected, std::int64_t got) {
  if (got != expected)
    throw KafkaError(fmt::format("{}: {} of {} events acknowledged and marked", figure, got,
                                 expected),
                     RD_KAFKA_RESP_ERR__MSG_TIMED_OUT);
}

// The share of total that slice i of kSlices ends at: totals split evenly.
std::int64_t SliceEnd(std::int64_t total, int slice) {
  return total * (slice + 1) / kSlices;
}

// Median fdatasync of a 4 KiB overwrite in the work directory, µs: what one
// SQLite commit at synchronous=full waits for at least.
double MeasureFsyncUs(const TempDir& dir) {
  const std::string path = dir.File("fsync.probe");
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) outbox::ThrowSystemError(fmt::format("open '{}'", path), errno);
  const std::string page(4096, 'x');
  std::vector<double> samples;
  for (int i = 0; i < kFsyncProbes; ++i) {
    if (pwrite(fd.get(), page.data(), page.size(), 0) != static_cast<ssize_t>(page.size()))
      outbox::ThrowSystemError(fmt::format("write '{}'", path), errno);
    const auto start = SteadyClock::now();
    if (fdatasync(fd.get()) != 0) outbox::ThrowSystemError(fmt::format("fdatasync '{}'", path), errno);
    samples.push_back(Micros(start, SteadyClock::now()));
  }
  fd.Reset();
  std::error_code ec;
  fs::remove(path, ec);
  return Median(samples);
}

std::int64_t RunPipelinedSlice(Relay& relay, std::int64_t batch_size, std::int64_t marked,
                               std::int64_t until) {
  const auto depth = static_cast<std::size_t>(LoopOptions{}.pipeline_depth);
  for (;;) {
    // As RunRelayLoop: after each settle, try again (a settle may make rows of an aggregate in
    // flight sendable under block-key); with a settle store, the next batch's settle runs on
    // its worker while the next batches are read and sent.
    while (relay.Sending() < depth &&
           marked + static_cast<std::int64_t>(relay.InFlight()) * batch_size < until &&
           relay.StartBatch()) {
    }
    if (relay.InFlight() == 0) return marked;
    marked += relay.FinishBatch().settle.marked;
    relay.StartSettle();
  }
}

}  // namespace outbox::lab::bench
