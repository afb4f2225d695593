#include "lab/benchmark.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>

#include "lab/loans.h"
#include "outbox/change_watcher.h"
#include "outbox/chapter_relay.h"
#include "outbox/error.h"
#include "outbox/kafka/kafka_publisher.h"
#include "outbox/relay.h"

namespace outbox::lab {
namespace {

namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;

constexpr int kBrokerStartTimeoutMs = 15000;
constexpr int kChildStopTimeoutMs = 5000;
constexpr int kPollWarmupRepetitions = 10;
// Interleaved slices per compared pair of figures (see MeasureRelays).
constexpr int kSlices = 10;
constexpr int kFsyncProbes = 50;
constexpr int kRssSampleIntervalMs = 10;
// How often the drain's progress (records on the topic) is sampled, and the bound on one sample.
constexpr int kProgressIntervalMs = 250;
constexpr int kWatermarkTimeoutMs = 1000;

double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

double Micros(SteadyClock::time_point from, SteadyClock::time_point to) {
  return std::chrono::duration<double, std::micro>(to - from).count();
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

double Rate(std::int64_t count, double seconds) {
  return seconds > 0 ? static_cast<double>(count) / seconds : 0;
}

double Ratio(double numerator, double denominator) {
  return denominator > 0 ? numerator / denominator : 0;
}

[[noreturn]] void ThrowSystemError(const std::string& what) {
  throw Error(fmt::format("{}: {}", what, std::strerror(errno)));
}

// A directory made with mkdtemp and removed, with everything in it, on scope exit.
class TempDir {
 public:
  explicit TempDir(const std::string& parent) {
    fs::path base = parent.empty() ? fs::temp_directory_path() : fs::path(parent);
    std::string pattern = (base / "outbox-bench-XXXXXX").string();
    if (!mkdtemp(pattern.data()))  // a bad --work-dir: configuration, not a bug
      throw ConfigError(fmt::format("create directory '{}': {}", pattern, std::strerror(errno)));
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

struct ChildExit {
  int status = 0;         // as from waitpid
  long peak_rss_kib = 0;  // VmHWM of the child's own image, KiB
};

// VmHWM (peak resident set of the current image) from /proc/PID/status, KiB;
// 0 when the process is gone.
long ReadPeakRssKib(pid_t pid) {
  std::ifstream status(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  return 0;
}

// Owns one file descriptor.
class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) noexcept : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const noexcept { return fd_; }
  void Reset() noexcept {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

// A child process started with fork/exec. It gets PR_SET_PDEATHSIG(SIGTERM),
// so it dies with us even when we are killed with -9. The destructor stops a
// child still running: SIGTERM, then SIGKILL after kChildStopTimeoutMs.
class ChildProcess {
 public:
  // Runs args[0] with args; stdout goes to stdout_path (created), stdin comes
  // from /dev/null, stderr is ours. Throws Error when the program cannot be
  // executed.
  ChildProcess(const std::vector<std::string>& args, const std::string& stdout_path) {
    std::vector<char*> argv;
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    UniqueFd out(open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (out.get() < 0) ThrowSystemError(fmt::format("open '{}'", stdout_path));
    UniqueFd in(open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (in.get() < 0) ThrowSystemError("open '/dev/null'");
    // exec failure is reported through this close-on-exec pipe: EOF means exec succeeded.
    int ends[2] = {-1, -1};
    if (pipe2(ends, O_CLOEXEC) != 0) ThrowSystemError("pipe2");
    UniqueFd report_read(ends[0]);
    UniqueFd report_write(ends[1]);
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ < 0) ThrowSystemError(fmt::format("start '{}'", args[0]));
    if (pid_ == 0) {
      // Only async-signal-safe calls from here to exec: other threads may hold locks.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(127);  // the parent died before prctl
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      dup2(in.get(), STDIN_FILENO);
      dup2(out.get(), STDOUT_FILENO);
      execv(argv[0], argv.data());
      const int err = errno;
      [[maybe_unused]] const ssize_t ignored = write(report_write.get(), &err, sizeof err);
      _exit(127);
    }
    report_write.Reset();  // so read() sees EOF once the child has exec'd
    int exec_errno = 0;
    ssize_t n;
    while ((n = read(report_read.get(), &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
    }
    if (n == static_cast<ssize_t>(sizeof exec_errno)) {
      Wait();
      errno = exec_errno;
      ThrowSystemError(fmt::format("execute '{}'", args[0]));
    }
  }
  ~ChildProcess() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    for (int waited_ms = 0; waited_ms < kChildStopTimeoutMs; waited_ms += 10) {
      if (TryWait()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(pid_, SIGKILL);
    Wait();
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Blocks until the child exits.
  ChildExit Wait() {
    ChildExit exit;
    if (pid_ <= 0) return exit;
    while (waitpid(pid_, &exit.status, 0) < 0 && errno == EINTR) {
    }
    last_status_ = exit.status;
    pid_ = -1;
    return exit;
  }

  // Waits for the child, reading its VmHWM every interval_ms; the last read
  // before exit is its peak (VmHWM never falls). Not wait4's ru_maxrss: Linux
  // folds the forked copy of our own image into it at exec, so it reports
  // at least our RSS at fork time.
  // on_sample (may be empty) runs after each read.
  ChildExit WaitTrackingPeakRss(int interval_ms, const std::function<void()>& on_sample = {}) {
    ChildExit exit;
    while (pid_ > 0) {
      exit.peak_rss_kib = std::max(exit.peak_rss_kib, ReadPeakRssKib(pid_));
      if (on_sample) on_sample();
      if (TryWait()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
    }
    exit.status = last_status_;
    return exit;
  }

  // True (and reaped) when the child has exited.
  bool TryWait() {
    if (pid_ <= 0) return true;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
    last_status_ = status;
    pid_ = -1;
    return true;
  }

  int last_status() const noexcept { return last_status_; }

 private:
  pid_t pid_ = -1;
  int last_status_ = 0;
};

std::string DescribeStatus(int status) {
  if (WIFEXITED(status)) return fmt::format("exit status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("signal {}", WTERMSIG(status));
  return fmt::format("wait status {}", status);
}

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

struct RelayFigures {
  ThroughputFigure chapter;
  ThroughputFigure relay;
};

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
  kafka::KafkaPublisher relay_publisher(PublisherOptions(options, brokers, topic));
  WarmUp(chapter_publisher);
  WarmUp(relay_publisher);
  RelayOptions relay_options;
  relay_options.batch_size = options.batch_size;
  relay_options.owner = fmt::format("bench-{}", getpid());
  Relay relay(*relay_store, relay_publisher, relay_options);

  RelayFigures figures;
  for (int slice = 0; slice < kSlices; ++slice) {
    const auto run_chapter = [&] {
      const std::int64_t rows = SliceEnd(options.chapter_events, slice) - figures.chapter.events;
      if (rows <= 0) return;
      const auto start = SteadyClock::now();
      const ChapterRelayReport report =
          RunChapterRelay(*chapter_store, chapter_publisher, {rows, /*mark=*/true}, nullptr);
      figures.chapter.seconds += SecondsSince(start);
      figures.chapter.events += report.marked;
      if (report.marked != rows)
        RequireAllDelivered("chapter algorithm", options.chapter_events, figures.chapter.events);
    };
    const auto run_relay = [&] {
      const std::int64_t until = SliceEnd(options.events, slice);
      const auto start = SteadyClock::now();
      while (figures.relay.events < until) {
        const BatchReport batch = relay.RunBatch();
        if (batch.claimed == 0) break;
        figures.relay.events += batch.settle.marked;
      }
      figures.relay.seconds += SecondsSince(start);
    };
    if (slice % 2 == 0) {
      run_chapter();
      run_relay();
    } else {
      run_relay();
      run_chapter();
    }
  }
  RequireAllDelivered("chapter algorithm", options.chapter_events, figures.chapter.events);
  RequireAllDelivered("relay", options.events, figures.relay.events);
  if (relay_store->PendingCount() != 0)
    throw KafkaError(fmt::format("relay: {} rows still pending in '{}'",
                                 relay_store->PendingCount(), relay_path),
                     RD_KAFKA_RESP_ERR__MSG_TIMED_OUT);
  figures.chapter.events_per_s = Rate(figures.chapter.events, figures.chapter.seconds);
  figures.relay.events_per_s = Rate(figures.relay.events, figures.relay.seconds);
  return figures;
}

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
  for (;;) {
    const rd_kafka_resp_err_t err = rd_kafka_producev(
        producer, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_KEY(m.key.data(), m.key.size()),
        RD_KAFKA_V_VALUE(const_cast<char*>(m.payload.data()), m.payload.size()),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_HEADER("event_id", m.event_id.data(), static_cast<ssize_t>(m.event_id.size())),
        RD_KAFKA_V_HEADER("event_type", m.event_type.data(),
                          static_cast<ssize_t>(m.event_type.size())),
        RD_KAFKA_V_HEADER("outbox_id", std::to_string(m.outbox_id).c_str(), -1), RD_KAFKA_V_END);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) break;
    if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) kafka::ThrowKafkaError("raw produce", err);
    rd_kafka_poll(producer, 50);  // serve delivery reports to make room
  }
  rd_kafka_poll(producer, 0);
}

ThroughputFigure MeasureRaw(const BenchmarkOptions& options, const std::string& brokers,
                            const std::string& topic) {
  std::vector<OutboundMessage> messages;
  messages.reserve(static_cast<std::size_t>(options.events));
  for (std::int64_t i = 1; i <= options.events; ++i) messages.push_back(MessageForRow(RowFor(i, options.store.clock->EpochMs())));

  // Declared before the producer, destroyed after it: reports write into it.
  RawDeliveries deliveries;
  std::vector<kafka::Property> properties = {
      {"bootstrap.servers", brokers},
      {"acks", "all"},
      {"message.timeout.ms", std::to_string(options.delivery_timeout_ms)},
  };
  properties.insert(properties.end(), options.properties.begin(), options.properties.end());
  kafka::ConfHandle conf = kafka::MakeConf(properties);
  rd_kafka_conf_set_dr_msg_cb(conf.get(), &OnRawDelivery);
  rd_kafka_conf_set_opaque(conf.get(), &deliveries);
  kafka::KafkaHandle producer = kafka::MakeClient(RD_KAFKA_PRODUCER, std::move(conf));

  OutboundMessage warmup;
  warmup.key = "bench-warmup";
  warmup.payload = "{}";
  ProduceRaw(producer.get(), topic, warmup);
  rd_kafka_flush(producer.get(), options.delivery_timeout_ms);
  if (deliveries.ok != 1)
    throw KafkaError(fmt::format("raw produce warm-up: {}", kafka::DescribeError(deliveries.first_error)),
                     deliveries.first_error);
  deliveries = RawDeliveries{};

  const auto start = SteadyClock::now();
  for (const OutboundMessage& message : messages) ProduceRaw(producer.get(), topic, message);
  const rd_kafka_resp_err_t flushed = rd_kafka_flush(producer.get(), options.delivery_timeout_ms + 5000);
  ThroughputFigure figure;
  figure.seconds = SecondsSince(start);
  if (flushed != RD_KAFKA_RESP_ERR_NO_ERROR) kafka::ThrowKafkaError("raw produce: flush", flushed);
  if (deliveries.failed > 0)
    throw KafkaError(fmt::format("raw produce: {} of {} deliveries failed, first: {}",
                                 deliveries.failed, options.events,
                                 kafka::DescribeError(deliveries.first_error)),
                     deliveries.first_error);
  figure.events = deliveries.ok;
  figure.events_per_s = Rate(figure.events, figure.seconds);
  return figure;
}

// write_txns transactions of one variant on store, txns [first, last), each
// BEGIN IMMEDIATE + insert(s) + COMMIT. Returns the seconds they took.
double RunWrites(Store& store, const std::vector<Loan>& loans, const std::vector<OutboxEvent>& events,
                 std::size_t first, std::size_t last, bool with_outbox) {
  const auto start = SteadyClock::now();
  for (std::size_t i = first; i < last; ++i) {
    auto txn = store.BeginWrite();
    InsertLoan(txn.connection(), loans[i]);
    if (with_outbox) store.Enqueue(txn, events[i]);
    txn.Commit();
  }
  return SecondsSince(start);
}

// Each round: both variants on fresh databases, in kSlices alternating
// slices (as MeasureRelays, so fsync latency changes hit both alike). The
// median round of each variant is reported.
WritePathFigure MeasureWritePath(const BenchmarkOptions& options, const TempDir& dir) {
  WritePathFigure figure;
  figure.txns = options.write_txns;
  std::vector<Loan> loans;
  std::vector<OutboxEvent> events;
  for (std::int64_t i = 1; i <= options.write_txns; ++i) {
    loans.push_back(ChapterLoan(i, options.store.clock->EpochMs()));
    events.push_back(LoanCreatedEvent(loans.back(), i));
  }
  for (std::int64_t round = 0; round < options.write_rounds; ++round) {
    if (options.progress)
      options.progress(fmt::format("write path round {}/{}: {} business-only and {} "
                                   "business+outbox transactions, interleaved",
                                   round + 1, options.write_rounds, options.write_txns,
                                   options.write_txns));
    std::unique_ptr<Store> stores[2];
    for (int variant = 0; variant < 2; ++variant) {
      const std::string path = dir.File(fmt::format("write-{}.db", variant));
      std::error_code ec;
      for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(path + suffix, ec);
      stores[variant] = FreshDatabase(path, options.store);
    }
    double seconds[2] = {0, 0};
    std::size_t done = 0;
    for (int slice = 0; slice < kSlices; ++slice) {
      const auto end = static_cast<std::size_t>(SliceEnd(options.write_txns, slice));
      // Alternate which variant goes first, so drift (page cache, disk) hits both alike.
      const int first_variant = (slice + round) % 2;
      for (const int variant : {first_variant, 1 - first_variant})
        seconds[variant] += RunWrites(*stores[variant], loans, events, done, end, variant == 1);
      done = end;
    }
    figure.business_only_tps.push_back(Rate(options.write_txns, seconds[0]));
    figure.with_outbox_tps.push_back(Rate(options.write_txns, seconds[1]));
  }
  figure.business_only_median_tps = Median(figure.business_only_tps);
  figure.with_outbox_median_tps = Median(figure.with_outbox_tps);
  figure.ratio = Ratio(figure.with_outbox_median_tps, figure.business_only_median_tps);
  return figure;
}

// The relay's poll on a database holding history_backlog unpublished rows
// after retained published rows (history first, as in a live table).
PollFigure MeasurePoll(const BenchmarkOptions& options, const std::string& path,
                       std::int64_t retained) {
  auto store = FreshDatabase(path, options.store);
  if (retained > 0) Populate(*store, 1, retained, /*published=*/true);
  Populate(*store, retained + 1, options.history_backlog, /*published=*/false);

  ClaimRequest request;
  request.owner = fmt::format("bench-{}", getpid());
  request.limit = options.history_backlog;
  std::vector<double> has_claimable_us, claim_us, poll_us, release_us;
  for (std::int64_t rep = -kPollWarmupRepetitions; rep < options.poll_repetitions; ++rep) {
    request.now_ms = store->clock().EpochMs();
    const auto t0 = SteadyClock::now();
    const bool claimable = store->HasClaimable(request);
    const auto t1 = SteadyClock::now();
    const Claim claim = store->ClaimBatch(request);
    const auto t2 = SteadyClock::now();
    store->ReleaseClaim(claim.token);
    const auto t3 = SteadyClock::now();
    if (!claimable || static_cast<std::int64_t>(claim.rows.size()) != options.history_backlog)
      throw DbError(fmt::format("history poll on '{}': claimed {} of {} rows", path,
                                claim.rows.size(), options.history_backlog),
                    SQLITE_INTERNAL);
    if (rep < 0) continue;  // warm-up: page cache, statement cache
    has_claimable_us.push_back(Micros(t0, t1));
    claim_us.push_back(Micros(t1, t2));
    poll_us.push_back(Micros(t0, t2));
    release_us.push_back(Micros(t2, t3));
  }
  PollFigure figure;
  figure.retained_published = retained;
  figure.has_claimable_us = Median(has_claimable_us);
  figure.claim_us = Median(claim_us);
  figure.poll_us = Median(poll_us);
  figure.release_us = Median(release_us);
  return figure;
}

HistoryFigure MeasureHistory(const BenchmarkOptions& options, const TempDir& dir) {
  HistoryFigure figure;
  if (options.progress)
    options.progress(fmt::format("history: poll with 0 published rows, {} polls",
                                 options.poll_repetitions));
  figure.without_history = MeasurePoll(options, dir.File("history-0.db"), 0);
  if (options.progress)
    options.progress(fmt::format("history: poll with {} published rows, {} polls",
                                 options.history_rows, options.poll_repetitions));
  figure.with_history = MeasurePoll(options, dir.File("history-n.db"), options.history_rows);
  figure.ratio = Ratio(figure.with_history.poll_us, figure.without_history.poll_us);
  return figure;
}

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
      "--send-timeout", fmt::format("{}ms", options.delivery_timeout_ms),
      "--lease", fmt::format("{}ms", std::max(30000, 3 * options.delivery_timeout_ms)),
      "--db", path, "--brokers", brokers, "--topic", topic,
      "--synchronous", options.synchronous,
      "--busy-timeout-ms", std::to_string(options.store.busy_timeout_ms)};
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

// Median fdatasync of a 4 KiB overwrite in the work directory, µs: what one
// SQLite commit at synchronous=full waits for at least.
double MeasureFsyncUs(const TempDir& dir) {
  const std::string path = dir.File("fsync.probe");
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) ThrowSystemError(fmt::format("open '{}'", path));
  const std::string page(4096, 'x');
  std::vector<double> samples;
  for (int i = 0; i < kFsyncProbes; ++i) {
    if (pwrite(fd.get(), page.data(), page.size(), 0) != static_cast<ssize_t>(page.size()))
      ThrowSystemError(fmt::format("write '{}'", path));
    const auto start = SteadyClock::now();
    if (fdatasync(fd.get()) != 0) ThrowSystemError(fmt::format("fdatasync '{}'", path));
    samples.push_back(Micros(start, SteadyClock::now()));
  }
  fd.Reset();
  std::error_code ec;
  fs::remove(path, ec);
  return Median(samples);
}

void RequirePositive(const char* name, std::int64_t value) {
  if (value <= 0) throw ConfigError(fmt::format("{} {}: must be at least 1", name, value));
}

}  // namespace

void ValidateBenchmarkOptions(const BenchmarkOptions& options) {
  RequirePositive("chapter events", options.chapter_events);
  RequirePositive("events", options.events);
  RequirePositive("batch size", options.batch_size);
  RequirePositive("write transactions", options.write_txns);
  RequirePositive("write rounds", options.write_rounds);
  RequirePositive("history rows", options.history_rows);
  RequirePositive("history backlog", options.history_backlog);
  RequirePositive("poll repetitions", options.poll_repetitions);
  RequirePositive("rss events", options.rss_events);
  RequirePositive("delivery timeout ms", options.delivery_timeout_ms);
}

BenchmarkResult RunBenchmark(const BenchmarkOptions& given) {
  ValidateBenchmarkOptions(given);
  // Every figure reads the time from one clock: the caller's, or this one.
  SystemClock system_clock;
  BenchmarkOptions options = given;
  if (!options.store.clock) options.store.clock = &system_clock;
  kafka::MakeConf(options.properties);  // an invalid -X fails before minutes of work
  auto progress = [&options](const std::string& line) {
    if (options.progress) options.progress(line);
  };

  BenchmarkResult result;
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
  progress(fmt::format("chapter algorithm ({} events, send + ack + mark each) and relay ({} "
                       "events, batches of {}), interleaved",
                       options.chapter_events, options.events, options.batch_size));
  const RelayFigures relays = MeasureRelays(options, dir, result.brokers, result.topic);
  result.chapter = relays.chapter;
  result.relay = relays.relay;
  progress(fmt::format("raw produce: {} events", options.events));
  result.raw = MeasureRaw(options, result.brokers, result.topic);
  result.relay_over_chapter = Ratio(result.relay.events_per_s, result.chapter.events_per_s);
  result.relay_over_raw = Ratio(result.relay.events_per_s, result.raw.events_per_s);

  result.fsync_us.push_back(MeasureFsyncUs(dir));
  result.write = MeasureWritePath(options, dir);
  result.fsync_us.push_back(MeasureFsyncUs(dir));
  result.history = MeasureHistory(options, dir);

  progress(fmt::format("peak RSS: relay child draining {} events", options.rss_events));
  result.rss = MeasureRss(options, dir, result.brokers, result.topic);
  result.fsync_us.push_back(MeasureFsyncUs(dir));
  return result;
}

}  // namespace outbox::lab
