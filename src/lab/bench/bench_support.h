// Internal to the benchmark (benchmark.cc and the *_figure.cc files): what
// every figure shares, and one Measure function per figure. Not a public
// header of the lab; see benchmark.h for what the figures mean.
#pragma once

#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "lab/bench/benchmark.h"
#include "lab/chapter/loans.h"
#include "lab/chapter/workload.h"
#include "outbox/error.h"
#include "outbox/event.h"
#include "outbox/kafka/kafka_publisher.h"
#include "outbox/relay.h"
#include "outbox/store.h"

namespace outbox::lab::bench {

namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;

// Interleaved slices per compared pair of figures (see MeasureRelays).
inline constexpr int kSlices = 10;

double SecondsSince(SteadyClock::time_point start);
double Micros(SteadyClock::time_point from, SteadyClock::time_point to);

// A directory made with mkdtemp and removed, with everything in it, on scope exit.
class TempDir {
 public:
  explicit TempDir(const std::string& parent) {
    fs::path base = parent.empty() ? fs::temp_directory_path() : fs::path(parent);
    std::string pattern = (base / "outbox-bench-XXXXXX").string();
    if (!mkdtemp(pattern.data()))  // a bad --work-dir: configuration, not a bug
      outbox::ThrowSystemError(fmt::format("create directory '{}'", pattern), errno);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string File(const std::string& name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

// The chapter's i-th loan event as its row: what the relays read back.
OutboxRow RowFor(std::int64_t index, std::int64_t created_at_ms);
// Creates a lab database (loans + outbox) at path.
std::unique_ptr<Store> FreshDatabase(const std::string& path, const StoreOptions& options);
// Inserts count outbox rows for events first..first+count-1 in ONE
// transaction (Store::BulkLoad, not measured), published or not.
void Populate(Store& store, std::int64_t first, std::int64_t count, bool published);
kafka::KafkaPublisherOptions PublisherOptions(const BenchmarkOptions& options,
                                              const std::string& brokers, const std::string& topic);
// One record outside any figure, so connection setup and topic metadata are
// not timed. Throws KafkaError when it is not delivered.
void WarmUp(kafka::KafkaPublisher& publisher);
// Throws KafkaError "<figure>: <got> of <expected> events acknowledged and marked".
void RequireAllDelivered(const char* figure, std::int64_t expected, std::int64_t got);
// The share of total that slice i of kSlices ends at: totals split evenly.
std::int64_t SliceEnd(std::int64_t total, int slice);
// Median fdatasync of a 4 KiB overwrite in the work directory, µs: what one
// SQLite commit at synchronous=full waits for at least. Throws SystemError.
double MeasureFsyncUs(const TempDir& dir);

// The figures, one file each.
struct RelayFigures {
  ThroughputFigure chapter;
  ThroughputFigure relay;
  ThroughputFigure raw;  // MeasureRelays only: raw produce, in the same slices
  // events/s of each slice, in run order (the rounds of the ratios' spreads); raw_rates empty
  // without a raw lane.
  std::vector<double> chapter_rates, relay_rates, raw_rates;
};
// bench_support.cc: runs the relay as `relay` does (RunRelayLoop's pipeline: up to
// LoopOptions::pipeline_depth batches in flight, StartBatch / FinishBatch) until marked, the rows
// marked so far, reaches until (rows): it starts no batch once the batches in flight, each of at
// most batch_size rows, may reach it, and returns when none is in flight and nothing is
// sendable. Returns the rows marked, the given marked included. Throws what StartBatch and
// FinishBatch throw. The in-process relay figures run it in the mode `relay` takes by default
// (leader on SQLite, claims on PostgreSQL), so they measure the relay as shipped.
std::int64_t RunPipelinedSlice(Relay& relay, std::int64_t batch_size, std::int64_t marked,
                               std::int64_t until);
// One slice of raw produce: the events and seconds it added (RunInterleaved's third lane).
using RawSlice = std::function<ThroughputFigure(int slice)>;
// throughput_figure.cc: the chapter's relay (RunPerRowRelay on chapter_store), relay and, when
// raw_slice is given, raw produce, in kSlices slices whose order rotates, until
// options.chapter_events and options.events rows are marked (and produced). Returns the summed
// events and seconds (events_per_s not yet filled) and each slice's rate. where ("" or
// " on PostgreSQL") names the backend in errors. Throws KafkaError when a figure's rows were
// not all delivered, DbError / pg::PgError from the stores.
RelayFigures RunInterleaved(const BenchmarkOptions& options, OutboxStore& chapter_store,
                            Publisher& chapter_publisher, Relay& relay, const std::string& where,
                            const RawSlice& raw_slice = nullptr);
// throughput_figure.cc: the three lanes above on fresh SQLite databases; raw produce is
// asynchronous librdkafka produce of the same records (no database), flushed per slice.
RelayFigures MeasureRelays(const BenchmarkOptions& options, const TempDir& dir,
                           const std::string& brokers, const std::string& topic);
// write_path_figure.cc: the write-path figure on either backend. Builds options.write_txns loans
// and their LoanCreated events; each of options.write_rounds rounds calls fresh_round, which
// gives both variants fresh tables and returns how to run transactions [first, last) of one
// variant (with_outbox false: the loan alone; true: loan + outbox row), in seconds; the variants
// run in kSlices slices whose order alternates. backend prefixes the progress lines ("" or
// "PostgreSQL "). Returns each variant's rounds (txn/s), their medians and the ratio. Throws what
// fresh_round and the runs throw.
using WriteRun = std::function<double(bool with_outbox, const std::vector<Loan>& loans,
                                      const std::vector<OutboxEvent>& events, std::size_t first,
                                      std::size_t last)>;
using WriteRoundFactory = std::function<WriteRun()>;
WritePathFigure MeasureWriteRounds(const BenchmarkOptions& options, const std::string& backend,
                                   const WriteRoundFactory& fresh_round);
WritePathFigure MeasureWritePath(const BenchmarkOptions& options, const TempDir& dir);  // write_path_figure.cc
HistoryFigure MeasureHistory(const BenchmarkOptions& options, const TempDir& dir);      // history_figure.cc
DrainFigures MeasureDrains(const BenchmarkOptions& options, const TempDir& dir,
                           const std::string& brokers, const std::string& topic);  // drain_figure.cc
RssFigure MeasureRss(const BenchmarkOptions& options, const TempDir& dir, const std::string& brokers,
                     const std::string& topic);                                   // rss_figure.cc
WalFramesFigure MeasureWalFrames(const BenchmarkOptions& options, const TempDir& dir);  // write_cost_figure.cc
MarkFigure MeasureMark(const BenchmarkOptions& options, const TempDir& dir);            // write_cost_figure.cc
CheckpointFigure MeasureCheckpoint(const BenchmarkOptions& options, const TempDir& dir,
                                   const std::string& brokers, const std::string& topic);  // write_cost_figure.cc
// throughput_figure.cc: fills a fresh lab database at db with options.workload_events
// unpublished rows whose aggregates follow workload (event i touches loan
// LoanNumberFor(workload, i)), then times a Relay (options.batch_size, leader mode, a settle
// store) on publisher until none is pending. Throws KafkaError when a delivery fails or rows stay
// pending, DbError from SQLite.
WorkloadThroughputFigure MeasureRelayOnWorkload(const BenchmarkOptions& options,
                                                const std::string& db, Publisher& publisher,
                                                Workload workload);
// The same drain with every event its own aggregate under a random-looking 128-bit id in hex
// (kRandomKeysWorkload), as a UUID key column holds: such ids sort in no relation to the rows'
// ids, so a batch's rows sit all over the aggregate index, where the mark removes them
// (outbox_pending_by_aggregate). The ids are fixed: row i's is splitmix64(2i) then
// splitmix64(2i + 1), 16 hex digits each. Throws as MeasureRelayOnWorkload.
WorkloadThroughputFigure MeasureRelayOnRandomKeys(const BenchmarkOptions& options,
                                                  const std::string& db, Publisher& publisher);
LatencyFigure MeasureLatency(const BenchmarkOptions& options, const TempDir& dir,
                             const std::string& brokers, const std::string& topic,
                             Workload workload);                                  // latency_figure.cc
// Throws ConfigError when url carries options= of its own (the bench sets search_path there),
// pg::PgError when the server cannot be reached. RunBenchmark calls it before any figure.
void RequirePostgresBenchUrl(const std::string& url);  // postgres_figure.cc
// postgres_figure.cc: the relay pair and the write path on options.postgres_url, raw the SQLite
// run's raw produce figure.
PostgresFigures MeasurePostgres(const BenchmarkOptions& options, const std::string& brokers,
                                const std::string& topic, const ThroughputFigure& raw);
// postgres_figure.cc: `relay --until-empty` (options.lab_binary) as a child process in leader and
// in claims mode, options.drain_rounds rounds alternated, each on a fresh copy of one backlog of
// options.events rows in a schema of its own (the copy not timed; every schema dropped after);
// fills figures.leader_drain and figures.claims_drain (seconds per round, median, events/s). The
// children's output goes to dir. Throws pg::PgError from the server, Error when a child exits
// non-zero or leaves a row unpublished.
void MeasurePgDrains(const BenchmarkOptions& options, const TempDir& dir,
                     const std::string& brokers, const std::string& topic,
                     PostgresFigures& figures);
// compression_figure.cc: {none, lz4}; see CompressionFigure. Throws KafkaError when a drain's
// deliveries fail or rows stay pending, or no statistics arrive; DbError from SQLite.
std::vector<CompressionFigure> MeasureCompression(const BenchmarkOptions& options,
                                                  const TempDir& dir, const std::string& brokers,
                                                  const std::string& topic);
IdleFigure MeasureIdle(const BenchmarkOptions& options, const TempDir& dir,
                       const std::string& brokers, const std::string& topic);     // latency_figure.cc

}  // namespace outbox::lab::bench
