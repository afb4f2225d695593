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
//   peak RSS          of an `outbox-lab relay --until-empty` child process
//                     draining a large backlog (its VmHWM, read from /proc
//                     until it exits).
//
// Every figure runs on a fresh SQLite file under a temporary directory that
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
#include <string>
#include <vector>

#include "outbox/kafka/handles.h"
#include "outbox/store.h"

namespace outbox::lab {

// The targets on a 2-core machine. Compared for the report only.
struct BenchmarkTargets {
  double relay_over_chapter_min = 100.0;  // relay events/s ÷ chapter events/s
  double relay_over_raw_min = 0.3;        // relay events/s ÷ raw produce events/s
  double write_ratio_min = 0.95;          // business+outbox txn/s ÷ business-only txn/s
  double history_ratio_max = 1.5;         // poll latency with history ÷ without
  double relay_rss_max_mib = 32.0;        // peak RSS of the relay child, MiB
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

  std::int64_t chapter_events = 2000;    // rows the chapter's relay sends, > 0
  std::int64_t events = 200000;          // rows the Relay and raw produce send, > 0
  std::int64_t batch_size = 1000;        // Relay rows per claim, > 0
  std::int64_t write_txns = 20000;       // transactions per write-path round, > 0
  std::int64_t write_rounds = 3;         // rounds per variant, alternated; median taken, > 0
  std::int64_t history_rows = 1000000;   // published rows retained for the history figure, > 0
  std::int64_t history_backlog = 1000;   // unpublished rows the poll claims, > 0
  std::int64_t poll_repetitions = 300;   // timed polls per history variant; median taken, > 0
  std::int64_t rss_events = 1000000;     // backlog the relay child drains, > 0
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
  double ratio = 0;  // with_outbox_median_tps ÷ business_only_median_tps
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
  double ratio = 0;  // with_history.poll_us ÷ without_history.poll_us
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
  double relay_over_chapter = 0;
  double relay_over_raw = 0;
  WritePathFigure write;
  HistoryFigure history;
  RssFigure rss;
};

// Throws ConfigError naming the field when a count is <= 0.
void ValidateBenchmarkOptions(const BenchmarkOptions& options);

// Runs every figure in the order above. Takes minutes at the defaults.
// Throws ConfigError (invalid options or properties), KafkaError when the
// embedded broker does not start within 15 s or a figure's deliveries fail,
// DbError from SQLite, SystemError when the work directory or a child process
// cannot be created, and Error when the relay child exits with a non-zero
// status or leaves rows pending.
BenchmarkResult RunBenchmark(const BenchmarkOptions& options);

}  // namespace outbox::lab
