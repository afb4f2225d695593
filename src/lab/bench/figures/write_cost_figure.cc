// What the outbox costs SQLite: WAL frames per transaction, the settle's mark
// by id vs by range, and the relay's passive checkpoint after each settle.
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <memory>

#include "lab/bench/bench_support.h"
#include "lab/bench/statistics.h"
#include "lab/chapter/loans.h"
#include "lab/faults/wal_file.h"
#include "outbox/error.h"
#include "outbox/kafka/kafka_publisher.h"
#include "outbox/relay.h"

namespace outbox::lab::bench {
namespace {

// Transactions before the WAL is read (the tables' first pages are allocated,
// the B-trees have their steady depth), and transactions read.
constexpr std::int64_t kWalWarmUpTxns = 1000;
constexpr std::int64_t kWalTxns = 200;
// Transactions between two reads of the WAL: few enough that SQLite's
// automatic checkpoint (at 1,000 pages) rarely restarts the log in between; a
// chunk during which it did is not counted.
constexpr std::int64_t kWalChunkTxns = 20;
// Settles timed per method in the mark figure.
constexpr std::int64_t kMarkBatches = 20;

void RemoveDatabase(const std::string& path) {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(path + suffix, ec);
}

void WriteOne(Store& store, std::int64_t index, bool with_outbox) {
  const Loan loan = ChapterLoan(index, store.clock().EpochMs());
  auto txn = store.BeginWrite();
  InsertLoan(txn.connection(), loan);
  if (with_outbox) store.Enqueue(txn, LoanCreatedEvent(loan, index));
  txn.Commit();
}

double FramesPerTxn(const BenchmarkOptions& options, const std::string& path, bool with_outbox) {
  RemoveDatabase(path);
  auto store = FreshDatabase(path, options.store);
  std::int64_t index = 1;
  for (; index <= kWalWarmUpTxns; ++index) WriteOne(*store, index, with_outbox);
  std::int64_t frames = 0, commits = 0;
  for (std::int64_t done = 0; done < kWalTxns; done += kWalChunkTxns) {
    const WalSummary before = ReadWalSummary(path + "-wal");
    for (std::int64_t i = 0; i < kWalChunkTxns; ++i) WriteOne(*store, index++, with_outbox);
    const WalSummary after = ReadWalSummary(path + "-wal");
    if (!before.present || !after.present || before.salt1 != after.salt1) continue;  // restarted
    frames += after.frames - before.frames;
    commits += after.commits - before.commits;
  }
  if (commits == 0)
    throw Error(fmt::format("WAL frames: no transaction of '{}' could be read from its -wal", path));
  return static_cast<double>(frames) / static_cast<double>(commits);
}

}  // namespace

WalFramesFigure MeasureWalFrames(const BenchmarkOptions& options, const TempDir& dir) {
  WalFramesFigure figure;
  figure.txns = kWalTxns;
  figure.business_only_frames = FramesPerTxn(options, dir.File("wal-business.db"), false);
  figure.with_outbox_frames = FramesPerTxn(options, dir.File("wal-outbox.db"), true);
  return figure;
}

MarkFigure MeasureMark(const BenchmarkOptions& options, const TempDir& dir) {
  const MarkMethod methods[2] = {MarkMethod::kById, MarkMethod::kByRange};
  std::unique_ptr<Store> stores[2];
  for (int m = 0; m < 2; ++m) {
    const std::string path = dir.File(fmt::format("mark-{}.db", m));
    RemoveDatabase(path);
    StoreOptions store_options = options.store;
    store_options.mark = methods[m];
    stores[m] = FreshDatabase(path, store_options);
    Populate(*stores[m], 1, kMarkBatches * options.batch_size, /*published=*/false);
  }
  std::vector<double> micros[2];
  for (std::int64_t batch = 0; batch < kMarkBatches; ++batch) {
    for (const int m : {static_cast<int>(batch % 2), static_cast<int>(1 - batch % 2)}) {
      ClaimRequest request;
      request.owner = "bench-mark";
      request.limit = options.batch_size;
      request.now_ms = options.store.clock->EpochMs();
      request.block_key = false;
      const Claim claim = stores[m]->ClaimBatch(request);
      std::vector<std::int64_t> acked;
      for (const OutboxRow& row : claim.rows) acked.push_back(row.id);
      const auto start = SteadyClock::now();
      const SettleReport report =
          stores[m]->SettleBatch(claim.token, acked, {}, SettlePolicy{}, request.now_ms);
      micros[m].push_back(Micros(start, SteadyClock::now()));
      if (report.marked != static_cast<std::int64_t>(acked.size()))
        throw Error(fmt::format("mark figure: {} of {} acked rows marked", report.marked,
                                acked.size()));
    }
  }
  MarkFigure figure;
  figure.batches = kMarkBatches;
  figure.rows = options.batch_size;
  figure.by_id_us = Median(micros[0]);
  figure.by_range_us = Median(micros[1]);
  return figure;
}

CheckpointFigure MeasureCheckpoint(const BenchmarkOptions& options, const TempDir& dir,
                                   const std::string& brokers, const std::string& topic) {
  const std::string source = dir.File("checkpoint-source.db");
  {
    auto store = FreshDatabase(source, options.store);
    Populate(*store, 1, options.drain_events, /*published=*/false);
  }  // closed: one file, its WAL checkpointed and removed
  kafka::KafkaPublisher publisher(PublisherOptions(options, brokers, topic));
  WarmUp(publisher);
  std::vector<double> seconds[2];  // [0] with the checkpoint, [1] without
  std::int64_t wal_bytes[2] = {0, 0};
  for (std::int64_t round = 0; round < options.drain_rounds; ++round) {
    for (const int variant : {static_cast<int>(round % 2), static_cast<int>(1 - round % 2)}) {
      const std::string path = dir.File(fmt::format("checkpoint-{}.db", variant));
      RemoveDatabase(path);
      std::error_code ec;
      fs::copy_file(source, path, ec);
      if (ec) ThrowSystemError(fmt::format("copy '{}' to '{}'", source, path), ec.value());
      Store store(path, options.store, OpenMode::kExisting);
      RelayOptions relay_options;
      relay_options.batch_size = options.batch_size;
      relay_options.owner = fmt::format("bench-{}", getpid());
      relay_options.checkpoint_after_settle = variant == 0;
      relay_options.coordination = Coordination::kLeader;  // the default on SQLite
      // The marks on a second connection, in a worker thread, as `relay` does by default.
      Store settle_store(path, options.store, OpenMode::kExisting);
      relay_options.settle_store = &settle_store;
      Relay relay(store, publisher, relay_options);
      const auto start = SteadyClock::now();
      const std::int64_t marked =
          RunPipelinedSlice(relay, options.batch_size, 0, options.drain_events);
      seconds[variant].push_back(SecondsSince(start));
      RequireAllDelivered("checkpoint figure", options.drain_events, marked);
      wal_bytes[variant] = store.WalSizeBytes();
    }
  }
  CheckpointFigure figure;
  figure.events = options.drain_events;
  figure.with_events_per_s = Rate(options.drain_events, Median(seconds[0]));
  figure.without_events_per_s = Rate(options.drain_events, Median(seconds[1]));
  figure.with_wal_bytes = wal_bytes[0];
  figure.without_wal_bytes = wal_bytes[1];
  return figure;
}

}  // namespace outbox::lab::bench
