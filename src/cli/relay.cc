#include <fmt/format.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/duration.h"
#include "lab/recording_publisher.h"
#include "outbox/change_watcher.h"
#include "outbox/error.h"
#include "outbox/kafka/kafka_publisher.h"
#include "outbox/relay.h"

namespace outbox::cli {
namespace {

struct RelayCliOptions {
  bool once = false;
  bool until_empty = false;
  std::int64_t batch_size = 1000;
  std::string send_timeout = "10s";
  std::string key = "event-id";
  std::string on_failure = "block-key";
  int max_attempts = 5;
  std::string lease = "30s";
  std::string backoff_base = "200ms";
  std::string backoff_max = "60s";
  std::string idle_max = "1s";
  std::string owner;
  bool quiet = false;
  bool json = false;
};

// A signalfd for SIGTERM and SIGINT, which are blocked for every thread
// started afterwards (librdkafka's too), so they arrive only here.
class StopSignalFd {
 public:
  StopSignalFd() {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    fd_ = signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK);
    if (fd_ < 0) throw ConfigError(fmt::format("signalfd: {}", std::strerror(errno)));
  }
  ~StopSignalFd() { close(fd_); }
  StopSignalFd(const StopSignalFd&) = delete;
  StopSignalFd& operator=(const StopSignalFd&) = delete;
  int get() const noexcept { return fd_; }

 private:
  int fd_ = -1;
};

std::string DefaultOwner() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return fmt::format("relay-{}@{}", getpid(), host);
}

}  // namespace

Command AddRelayCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "relay",
      "The production relay: claim a batch (lease + fencing token), produce it asynchronously, "
      "mark every acked row in one transaction; back off, then park, failing rows");
  auto o = std::make_shared<RelayCliOptions>();
  auto* once = sub->add_flag("--once", o->once, "Run one batch, then exit");
  sub->add_flag("--until-empty", o->until_empty,
                "Run until no row waits (all published or parked), then exit")
      ->excludes(once);
  sub->add_option("--batch-size", o->batch_size, "Rows per batch")->capture_default_str();
  sub->add_option("--send-timeout", o->send_timeout,
                  "Delivery timeout per batch (librdkafka message.timeout.ms)")
      ->capture_default_str();
  sub->add_option("--key", o->key,
                  "Record key: event-id (the chapter's) or aggregate-id (per-aggregate order)")
      ->check(CLI::IsMember({"event-id", "aggregate-id"}))
      ->capture_default_str();
  sub->add_option("--on-failure", o->on_failure,
                  "block-key: later events of a failing aggregate wait (order kept); skip: they "
                  "flow on (order lost)")
      ->check(CLI::IsMember({"block-key", "skip"}))
      ->capture_default_str();
  sub->add_option("--max-attempts", o->max_attempts, "Failed attempts before a row is parked")
      ->check(PositiveInteger())
      ->capture_default_str();
  sub->add_option("--lease", o->lease, "How long a claim holds; must exceed --send-timeout")
      ->capture_default_str();
  sub->add_option("--backoff-base", o->backoff_base, "First retry delay")->capture_default_str();
  sub->add_option("--backoff-max", o->backoff_max, "Cap of the exponential retry delay")
      ->capture_default_str();
  sub->add_option("--idle-max", o->idle_max, "Longest idle wait between polls")
      ->capture_default_str();
  sub->add_option("--owner", o->owner, "Name recorded with claims (default relay-PID@HOST)");
  sub->add_flag("--quiet", o->quiet, "Print only the final line");
  sub->add_flag("--json", o->json,
                "Print JSON lines instead: {\"report\":\"batch\",...} per batch (unless --quiet), "
                "then {\"report\":\"final\",\"stopped\":...,\"batches\":...,...}");
  return {sub, [&global, o]() -> ExitCode {
            if (o->batch_size <= 0)
              throw ConfigError(fmt::format("--batch-size {}: must be at least 1", o->batch_size));
            RelayOptions relay_options;
            relay_options.batch_size = o->batch_size;
            relay_options.key = ParseKeyChoice(o->key);
            relay_options.on_failure = ParseFailureMode(o->on_failure);
            relay_options.settle.max_attempts = o->max_attempts;
            relay_options.settle.backoff_base_ms = ParseDurationMs("--backoff-base", o->backoff_base);
            relay_options.settle.backoff_max_ms = ParseDurationMs("--backoff-max", o->backoff_max);
            relay_options.lease_ms = ParseDurationMs("--lease", o->lease);
            relay_options.owner = o->owner.empty() ? DefaultOwner() : o->owner;
            const std::int64_t send_timeout_ms = ParseDurationMs("--send-timeout", o->send_timeout);
            const std::int64_t idle_max_ms = ParseDurationMs("--idle-max", o->idle_max);
            if (send_timeout_ms <= 0 || send_timeout_ms > 3'600'000)
              throw ConfigError(fmt::format("--send-timeout {}: must be between 1ms and 1h", o->send_timeout));
            if (relay_options.lease_ms <= send_timeout_ms)
              throw ConfigError(fmt::format(
                  "--lease {} must exceed --send-timeout {}: otherwise another relay may take over "
                  "rows still in flight", o->lease, o->send_timeout));
            if (idle_max_ms <= 0 || idle_max_ms > 60'000)
              throw ConfigError(fmt::format("--idle-max {}: must be between 1ms and 60s", o->idle_max));

            StopSignalFd stop;  // before any librdkafka thread exists
            Store store(global.db, global.MakeStoreOptions(), OpenMode::kExisting);
            kafka::KafkaPublisherOptions publisher_options;
            publisher_options.brokers = global.RequireBrokers();
            publisher_options.topic = global.topic;
            publisher_options.delivery_timeout_ms = static_cast<int>(send_timeout_ms);
            publisher_options.properties = global.ParsedProperties();
            kafka::KafkaPublisher publisher(publisher_options);
            const auto history = global.OpenHistory();
            lab::RecordingPublisher recording(publisher, history.get());
            if (history)
              relay_options.on_settle = [h = history.get()](const SettleRecord& settle) {
                lab::RecordSettle(h, settle.token, settle.marked, settle.parked, settle.fenced);
              };
            // Phase records for the kill soak; an idle relay polls often, so only its first
            // idle poll after other work is recorded (one write(2) per transition).
            if (history)
              relay_options.on_phase = [h = history.get(), idle = false](
                                           std::string_view phase, std::int64_t token) mutable {
                const bool now_idle = phase == "idle";
                if (!(now_idle && idle)) h->RecordPhase(phase, token);
                idle = now_idle;
              };
            Relay relay(store, recording, relay_options);
            ChangeWatcher watcher(global.db, stop.get());

            LoopOptions loop_options;
            loop_options.mode = o->once ? LoopMode::kOnce
                                : o->until_empty ? LoopMode::kUntilEmpty
                                                 : LoopMode::kForever;
            loop_options.idle_max_ms = static_cast<int>(idle_max_ms);
            const LoopReport report = RunRelayLoop(
                relay, watcher, loop_options, [&](const BatchReport& batch) {
                  if (o->quiet) return;
                  if (o->json) {
                    const nlohmann::ordered_json line = {
                        {"report", "batch"},          {"token", batch.token},
                        {"claimed", batch.claimed},   {"acked", batch.acked},
                        {"failed", batch.failed},     {"marked", batch.settle.marked},
                        {"retried", batch.settle.retried}, {"parked", batch.settle.parked},
                        {"fenced", batch.settle.fenced}};
                    fmt::print("{}\n", line.dump());
                    std::fflush(stdout);
                    return;
                  }
                  fmt::print("[relay] batch token={} claimed={} acked={} failed={} marked={} "
                             "retried={} parked={} fenced={}\n",
                             batch.token, batch.claimed, batch.acked, batch.failed,
                             batch.settle.marked, batch.settle.retried, batch.settle.parked,
                             batch.settle.fenced);
                  std::fflush(stdout);
                });
            if (o->json) {
              const nlohmann::ordered_json final_report = {
                  {"report", "final"},       {"stopped", report.stopped},
                  {"batches", report.batches}, {"acked", report.acked},
                  {"marked", report.marked}, {"failed", report.failed},
                  {"parked", report.parked}, {"fenced", report.fenced},
                  {"pending", store.PendingCount()}};
              fmt::print("{}\n", final_report.dump());
              return ExitCode::kOk;
            }
            fmt::print("[relay] {} batches={} acked={} marked={} failed={} parked={} fenced={} "
                       "pending={}\n",
                       report.stopped ? "stopped on signal:" : "done:", report.batches,
                       report.acked, report.marked, report.failed, report.parked, report.fenced,
                       store.PendingCount());
            return ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
