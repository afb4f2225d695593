// Benchmark: the numbers behind chapter 7.1's performance claims, measured in
// one run with the same database settings and the same broker for every
// figure (outbox-lab bench).
//
//   relay throughput  the chapter's relay (send, wait for the ack, mark, per
//                     row) vs the production Relay (claim a batch, produce it
//                     asynchronously, settle in one transaction) vs raw
//                     asynchronous librdkafka produce of the same records (the
//                     ceiling: no database at all);
//   write path        business-only transactions vs business + outbox;
//   history           the relay's poll with 0 vs many published rows retained;
//   whole processes   the chapter's relay (`publish N`), the hand-written
//                     batched loop (`batch-loop`, lab/bench/batched_loop.h), the
//                     plain Python relay (bench/python_relay.py) and
//                     `relay --until-empty`, each a child process timed from
//                     spawn to exit on its own copy of one backlog, in
//                     rotating rounds (median);
//   peak RSS          of an `outbox-lab relay --until-empty` child process
//                     draining a large backlog (its VmHWM, read from /proc
//                     until it exits);
//   relay per workload the in-process Relay draining the same backlog size
//                     with the aggregates of each workload (own, 50, zipf), and
//                     with random 128-bit aggregate ids (random-keys);
//   commit-to-mark    a `write --rate R --workload W` child commits at a steady
//                     pace while a `relay` child with its default options
//                     waits as in production (inotify); each row's
//                     published_at - created_at, p50 and p99, on each
//                     workload (lab/chapter/workload.h);
//   idle CPU          a `relay` child on an empty outbox: utime + stime from
//                     /proc/PID/stat over a window, as % of one core;
//   compression       the in-process Relay draining the same backlog with
//                     compression.type none and lz4: events/s, and the bytes
//                     its producer sent to the broker (librdkafka statistics).
//
// PostgreSQL (BenchmarkOptions::postgres_url, issue 12 item 7): the relay
// throughput pair (chapter with relay, interleaved) and the write path again,
// on that server, in schemas of the bench's own (outbox_bench_PID_N, created
// in the URL's database and dropped with CASCADE at the end; a bench killed
// with -9 leaves them behind); relay / raw divides by the same raw produce
// figure (no database). The other figures are SQLite's only.
//
// Every SQLite figure runs on a fresh SQLite file under a temporary directory that
// is removed at the end. The embedded broker and the RSS relay run as child
// processes of lab_binary (`broker`, `relay` subcommands), so neither the
// broker's memory nor its CPU accounting lands in the relay's numbers; both
// children are sent SIGTERM when the run ends, and die with it (PDEATHSIG)
// when it is killed.
//
// Times are std::chrono::steady_clock around the work only: creating and
// destroying clients and populating backlogs are not measured. Figures that
// are compared run interleaved in slices (chapter with relay, business-only
// with business+outbox), so a change in disk latency mid-run hits both sides.
// Figures are informational; targets are compared, never enforced.
//
// Single-threaded: run one benchmark at a time in a process.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "lab/bench/statistics.h"
#include "outbox/kafka/handles.h"
#include "outbox/store.h"

namespace outbox::lab {

// The targets on a 2-core machine. Compared for the report only.
struct BenchmarkTargets {
  double relay_over_chapter_min = 100.0;  // relay events/s ÷ chapter events/s
  double relay_over_raw_min = 0.3;        // relay events/s ÷ raw produce events/s
  double relay_over_loop_min = 1.5;       // relay child events/s ÷ batched-loop child events/s
  double relay_over_python_min = 1.5;     // relay child events/s ÷ Python relay child events/s
  double write_ratio_min = 0.95;          // business+outbox txn/s ÷ business-only txn/s
  double history_ratio_max = 1.5;         // poll latency with history ÷ without
  double relay_rss_max_mib = 32.0;        // peak RSS of the relay child, MiB
  double latency_p99_max_ms = 10.0;       // commit-to-mark p99 at a steady rate, each workload, ms
  double idle_cpu_max_percent = 1.0;      // idle relay child's CPU, % of one core
  // With --db postgresql://: `relay --until-empty` as a whole process draining BenchmarkOptions::
  // events rows, events/s, per coordination mode.
  double pg_leader_min_per_s = 80000;
  double pg_claims_min_per_s = 50000;
};

struct BenchmarkOptions {
  // The outbox-lab executable to run children from; it must offer the
  // `broker` and `relay` subcommands (e.g. "/proc/self/exe").
  std::string lab_binary = "/proc/self/exe";
  // Bootstrap servers of an existing broker; empty starts the embedded broker
  // as a child process.
  std::string brokers;
  // Topic for every figure; empty picks a unique one (outbox-bench-PID-MS),
  // so repeated runs against one broker never mix records.
  std::string topic;
  // librdkafka properties applied after bootstrap.servers, acks=all and
  // message.timeout.ms to all three producers (and passed to the relay child).
  std::vector<kafka::Property> properties;
  StoreOptions store;         // WAL always; synchronous, busy timeout and clock from here
  std::string synchronous = "full";  // the same setting spelled for the relay child's --synchronous
  // Parent of the temporary directory; empty means TMPDIR or /tmp. Put it on
  // the disk you want to measure: fsync cost dominates the write path.
  std::string work_parent;
  // A postgresql:// URL: also measure the relays and the write path on that server (above).
  // Empty: SQLite only. The URL must not carry options= of its own (the bench sets search_path
  // there).
  std::string postgres_url;

  std::int64_t chapter_events = 2000;    // rows the chapter's relay sends, > 0
  std::int64_t events = 200000;          // rows the Relay and raw produce send, > 0
  std::int64_t batch_size = 1000;        // Relay rows per claim, > 0
  // Rows of each workload the in-process relay per workload drains, > 0. Under block-key a
  // batch holds at most one row per aggregate, and on a skewed workload (zipf, 50) each page
  // read walks the rows held back behind the aggregates in flight, so the drain's time grows
  // with the square of the backlog: 200,000 rows of zipf took over 20 minutes.
  std::int64_t workload_events = 20000;
  std::int64_t write_txns = 20000;       // transactions per write-path round, > 0
  std::int64_t write_rounds = 3;         // rounds per variant, alternated; median taken, > 0
  std::int64_t history_rows = 1000000;   // published rows retained for the history figure, > 0
  std::int64_t history_backlog = 1000;   // unpublished rows the poll claims, > 0
  std::int64_t poll_repetitions = 300;   // timed polls per history variant; median taken, > 0
  std::int64_t rss_events = 1000000;     // backlog the relay child drains, > 0
  std::int64_t drain_events = 100000;    // backlog of the loop and relay children, > 0
  std::int64_t drain_rounds = 5;         // rounds of whole-process drains; median taken, > 0
  // The Python comparator of the whole-process drains: the interpreter (Debian's, with
  // python3-confluent-kafka) and the script. The figure is left out (program empty) when the
  // interpreter cannot import confluent_kafka or the script is missing.
  std::string python = "/usr/bin/python3";
  std::string python_relay;
  std::int64_t latency_events = 10000;   // rows the paced writer commits per workload, > 0
  std::int64_t latency_rate = 1000;      // the writer's pace, transactions per second, > 0
  std::int64_t idle_ms = 10000;          // window of the idle-CPU figure, ms, > 0
  int delivery_timeout_ms = 10000;       // librdkafka message.timeout.ms for every producer

  // Called with one line before each step (e.g. "relay: 200000 events"); may be empty.
  std::function<void(const std::string&)> progress;
};

struct ThroughputFigure {
  std::int64_t events = 0;   // records acknowledged (and, for relays, rows marked)
  double seconds = 0;        // steady_clock, around the work only (sum of slices)
  double events_per_s = 0;
};

struct WritePathFigure {
  std::int64_t txns = 0;                    // per round
  std::vector<double> business_only_tps;    // one per round, in run order
  std::vector<double> with_outbox_tps;
  double business_only_median_tps = 0;
  double with_outbox_median_tps = 0;
  // with_outbox ÷ business_only of each slice of each round (both variants ran in it); ratio is
  // their median.
  Spread ratio_spread;
  double ratio = 0;
};

// Median latencies of one poll: Store::HasClaimable, then Store::ClaimBatch
// of history_backlog rows (the relay's read and claim). The claim is then
// released (Store::ReleaseClaim), timed apart: the relay releases only on
// shutdown, so it is not part of the poll.
struct PollFigure {
  std::int64_t retained_published = 0;  // published rows in the table
  double has_claimable_us = 0;          // median, µs
  double claim_us = 0;                  // median, µs
  double poll_us = 0;                   // median of has_claimable + claim, µs
  double poll_p99_us = 0;               // 99th percentile of the same, µs
  double release_us = 0;                // median, µs; not in poll_us
};

struct HistoryFigure {
  PollFigure without_history;
  PollFigure with_history;
  // The polls alternate between the two tables in kHistoryRounds rounds; ratio_spread holds
  // each round's median with ÷ median without, ratio its median.
  Spread ratio_spread;
  double ratio = 0;
};

struct DrainSample {
  double seconds = 0;         // since the relay child was spawned, steady_clock
  std::int64_t records = 0;   // records it had put on the topic by then (high watermarks)
};

struct RssFigure {
  std::int64_t events = 0;
  double peak_rss_mib = 0;  // VmHWM of the relay child, MiB
  double seconds = 0;       // from spawn to exit, steady_clock
  double events_per_s = 0;
  // The drain's progress, sampled every 250 ms from the broker's watermarks
  // (not from the database, which the relay is writing); empty when the
  // broker did not answer.
  std::vector<DrainSample> progress;
};

// One program draining a backlog as a whole child process, timed from spawn
// to exit (start-up, connection and teardown included), once per round.
struct DrainFigure {
  std::string program;          // e.g. "relay --until-empty"
  std::int64_t events = 0;      // rows it had to publish (all were, or the run fails)
  std::vector<double> seconds;  // per round, in run order
  double median_seconds = 0;
  double events_per_s = 0;      // events ÷ median_seconds
};

struct DrainFigures {
  DrainFigure chapter;  // outbox-lab publish N: the chapter's per-row relay
  DrainFigure loop;     // outbox-lab batch-loop: the hand-written batched loop
  DrainFigure relay;    // outbox-lab relay --until-empty
  DrainFigure python;   // bench/python_relay.py; program empty when not run (BenchmarkOptions::python)
  // Per round: relay events/s ÷ the other's events/s in that round; the figures are the medians.
  Spread relay_over_loop_spread;
  Spread relay_over_python_spread;
  Spread relay_over_chapter_spread;
  double relay_over_loop = 0;
  double relay_over_python = 0;
  double relay_over_chapter = 0;
};

// One workload of the commit-to-mark figure. A delay is published_at -
// created_at of one row, ms: created_at is read just before the writer's
// BEGIN, published_at when the relay's settle of its ack runs, so a delay
// holds the commit, the relay's wake-up, claim, produce, the broker's ack and
// the settle (an upper bound of commit-to-ack). Whole ms: both are epoch ms.
struct LatencyFigure {
  std::string workload;       // "own", "50" or "zipf" (lab/chapter/workload.h)
  std::int64_t events = 0;    // rows written and published
  double rate_per_s = 0;      // the pace the writer was asked for
  double writer_seconds = 0;  // the writer child from spawn to exit
  double p50_ms = 0;
  double p99_ms = 0;
  double max_ms = 0;
};

// The workload name of the drain whose every event has its own aggregate under a random 128-bit
// id in hex, as a UUID key column holds (MeasureRelayOnRandomKeys).
inline constexpr const char* kRandomKeysWorkload = "random-keys";

// The in-process Relay draining BenchmarkOptions::workload_events rows whose aggregates
// follow one workload (lab/chapter/workload.h), batch by batch until none is pending;
// the same relay and publisher settings as BenchmarkResult::relay, on a fresh
// database per workload, the workloads one after the other (not interleaved).
struct WorkloadThroughputFigure {
  std::string workload;     // "own", "50", "zipf" or kRandomKeysWorkload
  std::int64_t aggregates = 0;  // distinct aggregates in the backlog
  ThroughputFigure relay;   // events acknowledged and marked
};

// The idle relay: a `relay` child (default options) on an empty outbox,
// after it has published one warm-up row and gone idle.
struct IdleFigure {
  double seconds = 0;      // the window, steady_clock
  long cpu_ticks = 0;      // utime + stime over the window, clock ticks
  double cpu_percent = 0;  // of one core: ticks / CLK_TCK / seconds * 100
};

// WAL frames (pages) one transaction appends, read from the -wal file
// (lab/faults/wal_file.h) over kWalTxns transactions after a warm-up on a fresh
// database, in steady state: the same loans, with and without their event.
struct WalFramesFigure {
  std::int64_t txns = 0;                // measured transactions per variant
  double business_only_frames = 0;      // per transaction
  double with_outbox_frames = 0;        // per transaction
};

// SettleBatch of batch_size acked rows, all of one claim: median µs per
// settle, by id and by range (MarkMethod), alternated batch by batch on two
// copies of one backlog.
struct MarkFigure {
  std::int64_t batches = 0;  // settles per method
  std::int64_t rows = 0;     // acked rows per settle
  double by_id_us = 0;
  double by_range_us = 0;
};

// The in-process Relay draining drain_events rows batch by batch, with
// RelayOptions::checkpoint_after_settle on (as shipped: a passive checkpoint
// after each batch smaller than batch_size) and off, alternated over
// drain_rounds rounds (median).
struct CheckpointFigure {
  std::int64_t events = 0;
  double with_events_per_s = 0;
  double without_events_per_s = 0;
  std::int64_t with_wal_bytes = 0;     // the -wal file's size when the drain ends, last round
  std::int64_t without_wal_bytes = 0;
};

// The in-process Relay (options.batch_size, claims mode as MeasureRelays)
// draining drain_events rows with one compression.type, in drain_rounds rounds
// alternated with the other codec, each on a fresh database and a fresh
// producer (median events/s). Bytes are librdkafka's "tx_bytes" statistic
// (every request the producer sent: the produce requests, and the metadata
// refreshes, a few hundred bytes) from after the warm-up record until the
// drain ends, in the last round. compression.type is set after the bench's -X,
// so it wins there; the other -X apply.
struct CompressionFigure {
  std::string codec;            // "none" or "lz4"
  std::int64_t events = 0;      // rows drained per round
  std::vector<double> events_per_s;  // per round, in run order
  double median_events_per_s = 0;
  std::int64_t tx_bytes = 0;    // sent to the broker during the drain, last round
  double bytes_per_event = 0;   // tx_bytes ÷ events
};

// The figures measured again on PostgreSQL, as their SQLite namesakes.
struct PostgresFigures {
  std::string server;  // the URL without its password
  std::string server_version;  // SHOW server_version
  std::string synchronous_commit;  // SHOW synchronous_commit, the setting the writes ran under
  ThroughputFigure chapter;
  ThroughputFigure relay;
  double relay_over_chapter = 0;
  double relay_over_raw = 0;  // relay events/s ÷ BenchmarkResult::raw events/s
  WritePathFigure write;
  // `relay --until-empty --coordination leader` and `... claims` as child processes, each run on
  // a fresh copy of one backlog of BenchmarkOptions::events rows, drain_rounds rounds, the two
  // modes alternated (MeasurePgDrains). Empty program when not measured.
  DrainFigure leader_drain;
  DrainFigure claims_drain;
};

struct BenchmarkResult {
  std::string brokers;  // bootstrap servers used
  bool embedded_broker = false;
  std::string topic;
  std::string work_dir;  // removed by the time RunBenchmark returns
  // Median fdatasync of a 4 KiB overwrite in work_dir, µs, probed before the
  // relays, before and after the write path, and at the end: the fsync-bound
  // figures (chapter, write path) move with it.
  std::vector<double> fsync_us;

  ThroughputFigure chapter;
  ThroughputFigure relay;
  ThroughputFigure raw;
  // Per slice of the interleaved run (chapter, relay and raw produce each ran in it): relay
  // events/s ÷ the other's; the two ratios below are the medians.
  Spread relay_over_chapter_spread;
  Spread relay_over_raw_spread;
  double relay_over_chapter = 0;
  double relay_over_raw = 0;
  // getloadavg() (1, 5, 15 min) when the run started and when it ended: the machine may be
  // shared, and the ratios (same-run, interleaved) are what holds under load.
  std::vector<double> load_start, load_end;
  WritePathFigure write;
  HistoryFigure history;
  DrainFigures drains;
  RssFigure rss;
  WalFramesFigure wal_frames;
  MarkFigure mark;
  CheckpointFigure checkpoint;
  std::vector<WorkloadThroughputFigure> relay_by_workload;  // own, 50, zipf, random-keys
  std::vector<LatencyFigure> latency;  // own, 50, zipf
  IdleFigure idle;
  std::vector<CompressionFigure> compression;  // none, lz4
  std::optional<PostgresFigures> postgres;  // with BenchmarkOptions::postgres_url only
};

// Throws ConfigError naming the field when a count is <= 0.
void ValidateBenchmarkOptions(const BenchmarkOptions& options);

// Runs every figure in the order above. Takes minutes at the defaults.
// Throws ConfigError (invalid options or properties), KafkaError when the
// embedded broker does not start within 15 s or a figure's deliveries fail,
// DbError from SQLite, pg::PgError from PostgreSQL, SystemError when the work directory or a child process
// cannot be created, and Error when the relay child exits with a non-zero
// status or leaves rows pending.
BenchmarkResult RunBenchmark(const BenchmarkOptions& options);

}  // namespace outbox::lab
