#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <ctime>
#include <limits>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include "cli/command.h"
#include "lab/broker/json_bytes.h"
#include "cli/drain.h"
#include "cli/duration.h"
#include "cli/outage_text.h"
#include "cli/partition_pin.h"
#include "cli/pending_rows.h"
#include "cli/publishing.h"
#include "cli/relay_http.h"
#include "cli/relay_lines.h"
#include "cli/relay_options.h"
#include "cli/wal_relay_run.h"
#include "cli/stop_signal.h"
#include "outbox/open_store.h"
#include "lab/chapter/recording_publisher.h"
#include "lab/chapter/relay_owner.h"
#include "outbox/change_watcher.h"
#include "outbox/notify_watcher.h"
#include "outbox/pg/connection.h"
#include "outbox/pg_store.h"
#include "outbox/timed_waiter.h"
#include "outbox/duration.h"
#include "outbox/error.h"
#include "outbox/kafka/kafka_publisher.h"
#include "outbox/kafka/tail_check.h"
#include "outbox/kafka/transactional_publisher.h"
#include "lab/check/topic_reader.h"
#include "outbox/relay.h"
#include "outbox/relay_observer.h"

namespace outbox::cli {
namespace {

// What names the outbox in the default transactional.id: the SQLite file's absolute path, or the
// PostgreSQL URL without its password (and the lab's schema, which --db carries in the URL).
std::string OutboxIdentity(const std::string& db) {
  if (pg::IsPostgresUrl(db)) return pg::RedactPassword(db);
  char resolved[PATH_MAX];
  if (realpath(db.c_str(), resolved)) return resolved;
  return db;
}

// Unpublished rows read for a recovery (ReadPendingRows): the oldest ones; their created_at sets
// where the tail check starts reading.
constexpr std::int64_t kTailCheckRows = 10000;

// relay --tail-check: the term's recovery (RelayOptions::committed_ids) reads the topic's tail
// (kafka::ReadTail) and returns the ids of this run already there; on_recovered prints it.
void AddTailCheck(RelayOptions& relay_options, const RelayCliOptions& o,
                  const GlobalOptions& global, OutboxStore& store, rd_kafka_t* producer) {
  const int timeout_ms = static_cast<int>(std::max<std::int64_t>(o.delivery_timeout_ms, 10000));
  // librdkafka 2.0.2's mock cluster answers -1 to every ListOffsets by timestamp.
  const bool embedded =
      lab::ReadBrokerIncarnation(producer, timeout_ms).rfind("embedded:", 0) == 0;
  const bool quiet = o.quiet, json = o.json;
  if (!quiet && !json) {
    fmt::print("[relay] tail check: at the start of each term, before sending, read the topic "
               "{} up to its high watermark and mark the ids already there\n",
               embedded ? "from each partition's low watermark (the embedded broker cannot "
                          "look offsets up by time)"
                        : fmt::format("from the first record at or after the oldest unpublished "
                                      "row's created_at less {} s",
                                      kafka::kTailCheckClockSlackMs / 1000));
    std::fflush(stdout);
  }
  auto last = std::make_shared<kafka::TailCheckResult>();
  kafka::TailCheckOptions base;
  base.brokers = global.RequireBrokers();
  base.topic = global.topic;
  base.properties = ProducerProperties(global);
  base.timeout_ms = timeout_ms;
  relay_options.committed_ids = [&store, base, embedded, last]() {
    PendingRows pending = ReadPendingRows(store, kTailCheckRows);
    *last = kafka::TailCheckResult{};
    const std::optional<std::int64_t> since = kafka::TailCheckSince(pending.created_at_ms);
    if (!since) return std::vector<std::int64_t>{};  // nothing unpublished, nothing to check
    kafka::TailCheckOptions options = base;
    options.since_ms = embedded ? std::nullopt : since;
    options.run_id = store.RunId();
    // A record marks a row only while the row is unpublished and carries its event id.
    options.is_pending = std::move(pending.test);
    *last = kafka::ReadTail(options);
    return last->found;
  };
  relay_options.on_recovered = [quiet, json, last](std::int64_t token,
                                                   const std::vector<std::int64_t>& found,
                                                   const std::vector<std::int64_t>& marked) {
    if (quiet) return;
    if (json) {
      nlohmann::ordered_json ranges = nlohmann::ordered_json::array();
      for (const kafka::PartitionRange& r : last->ranges)
        ranges.push_back({{"partition", r.partition}, {"begin", r.begin}, {"end", r.end}});
      fmt::print("{}\n", lab::DumpJson(nlohmann::ordered_json{{"report", "tail-check"},
                                                              {"token", token},
                                                              {"ranges", ranges},
                                                              {"records_read", last->records_read},
                                                              {"found", found.size()},
                                                              {"marked", marked}}));
      std::fflush(stdout);
      return;
    }
    std::vector<std::string> ranges;
    for (const kafka::PartitionRange& r : last->ranges)
      ranges.push_back(fmt::format("{}:{}-{}", r.partition, r.begin, r.end));
    fmt::print("[relay] tail check: read {} records{}\n", last->records_read,
               ranges.empty() ? std::string(" (nothing unpublished, or no topic yet)")
                              : fmt::format(" (partition:from-to {})", fmt::join(ranges, " ")));
    if (found.empty())
      fmt::print("[relay] tail check: 0 unpublished ids of this run on the topic; nothing to "
                 "mark\n");
    else
      fmt::print("[relay] tail check: {} unpublished ids of this run already on the topic, {} "
                 "of them marked now, not sent again{}\n",
                 found.size(), marked.size(),
                 marked.empty() ? std::string()
                                : fmt::format(" (ids {})", fmt::join(marked, ",")));
    std::fflush(stdout);
  };
}

}  // namespace

Command AddRelayCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "relay",
      "The production relay: read a batch (as the leader) or claim one (lease + fencing token), "
      "produce it asynchronously, mark every acked row in one transaction; back off, then park, "
      "failing rows");
  auto o = std::make_shared<RelayCliOptions>();
  AddRelayCliOptions(*sub, *o);
  auto http = std::make_shared<RelayHttpOptions>();
  AddRelayHttpOptions(*sub, *http);
  auto* pipeline_option = sub->get_option("--pipeline");
  auto* coordination_option = sub->get_option("--coordination");
  return {sub, [&global, o, http, pipeline_option, coordination_option]() -> ExitCode {
            if (o->source == "wal") return RunWalRelay(global, *o, !http->address.empty());
            if (!o->slot.empty() || o->linger_ms != 0)
              throw CommandError(ExitCode::kUsage,
                                 "--slot and --linger apply to --source wal only");
            if (o->exactly_once) {
              if (o->coordination == "claims")
                throw CommandError(
                    ExitCode::kExactlyOnceRefused,
                    "relay --exactly-once --coordination claims: refused: under claims several "
                    "relays send at once, and one could send again what another committed but "
                    "has not marked yet; use --coordination leader (the default with "
                    "--exactly-once)");
              if (pipeline_option->count() > 0 && o->pipeline > 1)
                throw CommandError(
                    ExitCode::kExactlyOnceRefused,
                    fmt::format("relay --exactly-once --pipeline {}: refused: one transaction at "
                                "a time, so that only the last committed one can be left "
                                "unmarked by a crash; use --pipeline 1 (the default with "
                                "--exactly-once)",
                                o->pipeline));
              o->pipeline = 1;
              if (coordination_option->count() == 0) o->coordination = "leader";
              if (o->transaction_timeout_ms < o->delivery_timeout_ms)
                throw CommandError(
                    ExitCode::kUsage,
                    fmt::format("--transaction-timeout {} must be at least --delivery-timeout {} "
                                "(librdkafka: message.timeout.ms <= transaction.timeout.ms)",
                                FormatDuration(o->transaction_timeout_ms),
                                FormatDuration(o->delivery_timeout_ms)));
            } else if (!o->transactional_id.empty()) {
              throw CommandError(ExitCode::kUsage,
                                 "--transactional-id applies to --exactly-once only");
            }
            if (o->tail_check) {
              if (o->exactly_once)
                throw CommandError(
                    ExitCode::kExactlyOnceRefused,
                    "relay --tail-check --exactly-once: refused: --exactly-once recovers from "
                    "its relay-state topic, read_committed; the tail check is for relays "
                    "without transactions");
              if (o->coordination == "claims")
                throw CommandError(
                    ExitCode::kExactlyOnceRefused,
                    "relay --tail-check --coordination claims: refused: under claims several "
                    "relays send at once, and one could send again a row another has sent after "
                    "the check read the topic; use --coordination leader (the default with "
                    "--tail-check)");
              if (!global.topic_template.empty())
                throw CommandError(
                    ExitCode::kExactlyOnceRefused,
                    "relay --tail-check --topic-template: refused: the tail check reads --topic "
                    "alone, and would send again what went to the template's topics");
              if (coordination_option->count() == 0) o->coordination = "leader";
            }
            RelayOptions relay_options;
            relay_options.batch_size = o->batch_size;
            relay_options.key = ParseKeyChoice(o->key);
            if (!global.topic_template.empty())
              relay_options.topic_template = TopicTemplate::Parse(global.topic_template);
            relay_options.headers = ParseHeaderConvention(o->headers);
            relay_options.ce_source = o->ce_source;
            relay_options.on_failure = ParseFailureMode(o->on_failure);
            relay_options.settle.max_attempts = o->max_attempts;
            relay_options.settle.backoff_base_ms = o->backoff_base_ms;
            relay_options.settle.backoff_max_ms = o->backoff_max_ms;
            relay_options.lease_ms = o->lease_ms;
            const bool on_postgres = pg::IsPostgresUrl(global.db);
            relay_options.coordination = ParseCoordination(
                !o->coordination.empty() ? o->coordination : on_postgres ? "claims" : "leader");
            const bool leader = relay_options.coordination == Coordination::kLeader;
            auto dead_lease_token = std::make_shared<std::int64_t>(0);
            if (!o->quiet)
              relay_options.on_lease = [o, dead_lease_token](const LeaseEvent& event) {
                PrintLease(event, o->json, *dead_lease_token);
              };
            relay_options.owner = o->owner.empty() ? lab::DefaultRelayOwner() : o->owner;
            if (o->backoff_base_ms > o->backoff_max_ms)
              throw CommandError(
                  ExitCode::kUsage,
                  fmt::format("--backoff-base {} must not exceed --backoff-max {}: the first "
                              "retry delay is at most the cap",
                              FormatDuration(o->backoff_base_ms),
                              FormatDuration(o->backoff_max_ms)));
            if (o->lease_ms <= o->delivery_timeout_ms)
              throw CommandError(
                  ExitCode::kUsage,
                  fmt::format("--lease {} must exceed --delivery-timeout {}: otherwise another "
                              "relay may take over rows still in flight",
                              FormatDuration(o->lease_ms), FormatDuration(o->delivery_timeout_ms)));

            StopSignalFd stop;  // before any librdkafka thread exists
            const PgClaimMode pg_mode =
                o->pg_claim == "naive-cursor" ? PgClaimMode::kNaiveCursor : PgClaimMode::kScan;
            if (pg_mode != PgClaimMode::kScan && leader)
              throw CommandError(ExitCode::kUsage,
                                 "--pg-claim naive-cursor applies to --coordination claims: a "
                                 "leader claims nothing (it reads pages past a cursor of its own)");
            if (pg_mode != PgClaimMode::kScan && !pg::IsPostgresUrl(global.db))
              throw CommandError(ExitCode::kUsage,
                                 "--pg-claim naive-cursor needs a postgresql:// --db (the SQLite "
                                 "store has one writer at a time: its ids commit in order)");
            const std::unique_ptr<OutboxStore> owned_store =
                OpenStore(global.db, OpenMode::kExisting, global.MakeStoreOptions(), pg_mode);
            OutboxStore& store = *owned_store;
            // --overlap-mark: a second connection for the marks, which run in a thread of their
            // own while the next batch is read and produced (RelayOptions::settle_store). Opened
            // before the Relay, so destroyed after it. Nothing to overlap one batch at a time;
            // exactly-once and the tail check settle one batch at a time. Claims mode on
            // PostgreSQL only: on SQLite each claim is a write, which would wait for the mark's
            // lock, so the flag is ignored there (as with --once or --pipeline 1).
            std::unique_ptr<OutboxStore> settle_store;
            if ((leader || store.backend() == Backend::kPostgres) && o->overlap_mark && !o->once &&
                o->pipeline > 1 && !o->exactly_once && !o->tail_check) {
              settle_store =
                  OpenStore(global.db, OpenMode::kExisting, global.MakeStoreOptions(), pg_mode);
              relay_options.settle_store = settle_store.get();
            }
            // Only keys that pin an aggregate to a partition have a mapping to keep.
            // The count of a topic this relay's first send creates is noted after its first mark.
            auto partition_count_unknown = std::make_shared<bool>(false);
            if (relay_options.key == KeyChoice::kAggregateId)
              *partition_count_unknown =
                  PinPartitionMapping(global, store, o->allow_partitioner_change,
                                      [&stop] { return stop.Received(); }, o->json);
            kafka::KafkaPublisherOptions publisher_options;
            publisher_options.brokers = global.RequireBrokers();
            publisher_options.topic = global.topic;
            publisher_options.delivery_timeout_ms = static_cast<int>(o->delivery_timeout_ms);
            publisher_options.properties = ProducerProperties(global);
            publisher_options.run_id = store.RunId();
            publisher_options.linger_ms = kafka::kBatchLingerMs;
            std::unique_ptr<kafka::KafkaPublisher> plain_publisher;
            std::unique_ptr<kafka::TransactionalPublisher> txn_publisher;
            if (o->exactly_once) {
              kafka::TransactionalPublisherOptions txn_options;
              txn_options.publisher = publisher_options;
              txn_options.transactional_id =
                  !o->transactional_id.empty()
                      ? o->transactional_id
                      : kafka::DefaultTransactionalId(global.topic, OutboxIdentity(global.db));
              txn_options.transaction_timeout_ms = static_cast<int>(o->transaction_timeout_ms);
              txn_publisher = std::make_unique<kafka::TransactionalPublisher>(txn_options);
            } else {
              plain_publisher = std::make_unique<kafka::KafkaPublisher>(publisher_options);
            }
            Publisher& publisher = txn_publisher ? static_cast<Publisher&>(*txn_publisher)
                                                 : static_cast<Publisher&>(*plain_publisher);
            rd_kafka_t* producer_handle =
                txn_publisher ? txn_publisher->handle() : plain_publisher->handle();
            const auto history = global.OpenHistory();
            lab::RecordingPublisher recording(publisher, history.get());
            if (txn_publisher) {
              const std::string incarnation =
                  lab::ReadBrokerIncarnation(producer_handle, static_cast<int>(o->delivery_timeout_ms));
              const bool embedded = incarnation.rfind("embedded:", 0) == 0;
              if (o->json) {
                if (!o->quiet || embedded)
                  fmt::print("{}\n", lab::DumpJson(nlohmann::ordered_json{
                                         {"report", "exactly-once"},
                                         {"transactional_id", txn_publisher->transactional_id()},
                                         {"state_topic", kafka::RelayStateTopic(global.topic)},
                                         {"embedded_broker_proves_nothing", embedded}}));
                std::fflush(stdout);
              } else if (!o->quiet || embedded) {
                fmt::print("[relay] exactly-once: transactional.id {}, relay-state topic {}\n",
                           lab::EscapeBytes(txn_publisher->transactional_id()),
                           kafka::RelayStateTopic(global.topic));
                if (embedded)
                  fmt::print("[relay] exactly-once on the embedded broker proves nothing: "
                             "librdkafka 2.0.2's mock cluster writes no commit or abort markers "
                             "and ignores isolation.level, so read_committed readers see aborted "
                             "records too; run it on real Kafka (docs/exactly-once.md)\n");
                std::fflush(stdout);
              }
              relay_options.committed_ids = [p = txn_publisher.get(), o, &store]() {
                return p->Recover(
                    static_cast<int>(std::max<std::int64_t>(o->delivery_timeout_ms, 10000)),
                    store.RunId(), ReadPendingRows(store, kTailCheckRows).test);
              };
              relay_options.on_recovered = [o](std::int64_t token,
                                                const std::vector<std::int64_t>& found,
                                                const std::vector<std::int64_t>& marked) {
                if (o->quiet) return;
                if (o->json)
                  fmt::print("{}\n", lab::DumpJson(nlohmann::ordered_json{{"report", "recovery"},
                                                                          {"token", token},
                                                                          {"committed", found.size()},
                                                                          {"marked", marked}}));
                else if (found.empty())
                  fmt::print("[relay] exactly-once recovery: 0 ids carried by committed "
                             "transactions; nothing to mark\n");
                else
                  fmt::print("[relay] exactly-once recovery: {} ids carried by committed "
                             "transactions, {} of them not yet marked: marked now, not sent "
                             "again{}\n",
                             found.size(), marked.size(),
                             marked.empty() ? std::string()
                                            : fmt::format(" (ids {})", fmt::join(marked, ",")));
                std::fflush(stdout);
              };
            }
            if (o->tail_check) AddTailCheck(relay_options, *o, global, store, producer_handle);
            // The broker the marks go to; when it did not answer yet, after the first mark.
            // An I/O error, and for a relay that runs until stopped another writer's lock, is
            // transient here as in its loop: the note waits for the first mark.
            bool noted = false;
            try {
              noted = NoteBrokerIncarnation(producer_handle, store, o->delivery_timeout_ms);
            } catch (const DbError& e) {
              const bool runs_forever = !o->once && !o->until_empty;
              if (e.primary_code() != SQLITE_IOERR &&
                  !(e.primary_code() == SQLITE_BUSY && runs_forever))
                throw;
              fmt::print("[relay] broker incarnation not noted at start ({}); noted after the "
                         "first mark\n",
                         e.what());
            }
            // Shared with on_new_run: a reset drops the incarnations noted, and the new run's
            // broker is noted again after its first mark.
            auto broker_noted = std::make_shared<bool>(noted);
            relay_options.on_settle = [h = history.get(), producer = producer_handle, &store,
                                       &global, broker_noted, o,
                                       partition_count_unknown](const SettleRecord& settle) {
              if (h) lab::RecordSettle(h, settle.token, settle.marked, settle.parked, settle.fenced);
              if (!*broker_noted && !settle.marked.empty())
                *broker_noted = NoteBrokerIncarnation(producer, store, 2000);
              if (*partition_count_unknown && !settle.marked.empty())
                *partition_count_unknown = !NotePartitionCount(global, store, producer, o->json);
            };
            relay_options.on_new_run = [o, broker_noted](const std::string& previous,
                                                         const std::string& run,
                                                         std::int64_t dropped) {
              *broker_noted = false;
              PrintNewRun(previous, run, dropped, o->json);
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
            relay_options.on_outage = [o, &store](const OutageEvent& event) {
              PrintOutage(event, o->json, store.clock().EpochMs(), o->delivery_timeout_ms);
            };
            *dead_lease_token = ReleaseDeadOwners(store);
            WarnOtherCoordination(store, leader, relay_options.owner, store.clock().EpochMs(),
                                  o->json);
            // What the loop does, for --http: published by the loop's thread, read by the server's.
            RelayObserver observer(leader);
            ObserveRelay(observer, relay_options);
            Relay relay(store, recording, relay_options);
            // An SQLite file's commits wake the relay through inotify; on PostgreSQL the
            // writers' notifications do (LISTEN on the outbox's wake channel). Either way the
            // poll (the idle backoff, up to --idle-max) stays the fallback.
            std::unique_ptr<IdleWaiter> watcher;
            if (store.backend() == Backend::kSqlite)
              watcher = std::make_unique<ChangeWatcher>(global.db, stop.get());
            else if (o->no_listen)
              watcher = std::make_unique<TimedWaiter>(stop.get());
            else
              watcher = std::make_unique<NotifyWatcher>(
                  global.db, static_cast<PgStore&>(store).wake_channel(), stop.get());

            LoopOptions loop_options;
            loop_options.mode = o->once ? LoopMode::kOnce
                                : o->until_empty ? LoopMode::kUntilEmpty
                                                 : LoopMode::kForever;
            loop_options.idle_max_ms = static_cast<int>(o->idle_max_ms);
            // An idle leader renews at its polls: poll at least 4 times per lease so it keeps
            // the lease, and a standby sees a lapsed one within a quarter lease.
            if (leader)
              loop_options.idle_max_ms = static_cast<int>(
                  std::clamp<std::int64_t>(o->lease_ms / 4, 1, o->idle_max_ms));
            if (!o->quiet)
              loop_options.on_wait = [&store, o](const WaitReport& wait) {
                PrintWait(wait, store.clock().EpochMs(), o->json);
              };
            // A lock or an I/O error that may pass: the relay waits and tries again, and says so.
            if (!o->quiet)
              loop_options.on_retry = [o](const DbError& error, int retry_in_ms) {
              if (o->json)
                fmt::print("{}\n", lab::DumpJson(nlohmann::ordered_json{{"report", "wait"},
                                                                        {"on", "error"},
                                                                        {"error", error.what()},
                                                                        {"retry_in_ms", retry_in_ms}}));
              else
                fmt::print("[relay] waiting: {}; trying again in {} ms, until it passes\n",
                           error.what(), retry_in_ms);
              std::fflush(stdout);
            };
            loop_options.pipeline_depth = o->pipeline;
            // Printed even under --quiet: an operator must see why the relay stands still.
            loop_options.on_connection_lost = [o](const std::string& error, int attempt,
                                                  int wait_ms) {
              if (o->json)
                fmt::print("{}\n", lab::DumpJson(nlohmann::ordered_json{{"report", "wait"},
                                                                        {"on", "database"},
                                                                        {"error", error},
                                                                        {"attempt", attempt},
                                                                        {"wait_ms", wait_ms}}));
              else
                fmt::print("[relay] waiting: database connection lost ({}); reconnect attempt {} "
                           "in {}\n",
                           error, attempt, FormatDuration(wait_ms));
              std::fflush(stdout);
            };
            ObservedWaiter observed(*watcher, observer);
            observed.SetRelay(&relay);
            // Declared after the publisher: stopped before it, as it probes the broker through it.
            // The longest one batch may hold the loop: its acks, and under --exactly-once an
            // abort retried through a broker outage for up to the transaction timeout.
            const std::unique_ptr<ops::OpsServer> http_server = StartRelayHttp(
                *http, global, observer, producer_handle, loop_options.idle_max_ms,
                o->delivery_timeout_ms + (o->exactly_once ? o->transaction_timeout_ms : 0),
                o->json);
            const LoopReport report = RunRelayLoopReconnecting(
                relay, observed, loop_options, ObserveLoop(observer, loop_options, [&](const BatchReport& batch) {
                  if (o->quiet) return;
                  if (o->json) {
                    const nlohmann::ordered_json line = {
                        {"report", "batch"},          {"token", batch.token},
                        {"claimed", batch.claimed},   {"acked", batch.acked},
                        {"failed", batch.failed},     {"marked", batch.settle.marked},
                        {"retried", batch.settle.retried}, {"parked", batch.settle.parked},
                        {"fenced", batch.settle.fenced}, {"outage", batch.outage}};
                    fmt::print("{}\n", lab::DumpJson(line));
                    std::fflush(stdout);
                    return;
                  }
                  fmt::print("[relay] batch token={} claimed={} acked={} failed={} marked={} "
                             "retried={} parked={} fenced={}\n",
                             batch.token, batch.claimed, batch.acked, batch.failed,
                             batch.settle.marked, batch.settle.retried, batch.settle.parked,
                             batch.settle.fenced);
                  std::fflush(stdout);
                }));
            if (!report.server_unreachable.empty()) {
              // Stopped while the database server was down, and one more attempt found it down
              // still: no connection for Resign or the final counts. Nothing is lost: a lease and
              // claims lapse by themselves, and rows sent but not marked are sent again after
              // their lease (at-least-once), as after a crash; the stop itself was asked for.
              if (o->json)
                fmt::print("{}\n", lab::DumpJson(nlohmann::ordered_json{
                                       {"report", "final"}, {"stopped", report.stopped},
                                       {"batches", report.batches}, {"acked", report.acked},
                                       {"marked", report.marked}, {"failed", report.failed},
                                       {"parked", report.parked}, {"fenced", report.fenced},
                                       {"pending", nullptr}, {"io_errors", report.io_errors},
                                       {"parked_left", nullptr},
                                       {"server_unreachable", report.server_unreachable}}));
              else {
                fmt::print("[relay] final counts unavailable: database server unreachable ({}){}\n",
                           report.server_unreachable,
                           relay.InFlight() == 0
                               ? std::string()
                               : fmt::format("; {} batches in flight left unsettled: their rows "
                                             "are sent again after the lease",
                                             relay.InFlight()));
                if (report.reconnects > 0)
                  fmt::print("[relay] reconnected {} times after a lost database connection\n",
                             report.reconnects);
                fmt::print("[relay] stopped on signal: batches={} acked={} marked={} failed={} "
                           "parked={} fenced={} pending=unknown\n",
                           report.batches, report.acked, report.marked, report.failed,
                           report.parked, report.fenced);
              }
              std::fflush(stdout);
              if (o->fail_on_parked)
                throw CommandError(ExitCode::kDbUnavailable,
                                   "relay --fail-on-parked: count the parked rows left: the "
                                   "database server is unreachable");
              return ExitCode::kOk;
            }
            relay.Resign();  // a clean stop: a standby takes over now, not after the lease
            const std::int64_t parked_left = store.ParkedCount();
            // --until-empty ended with rows that only an unpark can move: say which, and do
            // not exit 0 (a CI gate must not pass with work left).
            const bool until_empty = loop_options.mode == LoopMode::kUntilEmpty && !report.stopped;
            const std::vector<Stall> stalls =
                until_empty && parked_left > 0 ? store.Stalls(kStallsShown) : std::vector<Stall>{};
            // Stopped (or --once) while waiting out an outage: its rows stay pending, unparked.
            const BrokerOutage& outage = relay.Outage();
            const std::int64_t pending_left = store.PendingCount();
            // Sessions the server ended while idle, opened again (both connections).
            const std::int64_t reopened =
                store.SessionsReopened() + (settle_store ? settle_store->SessionsReopened() : 0);
            ExitCode done =
                o->fail_on_parked && parked_left > 0 ? ExitCode::kParkedRows : ExitCode::kOk;
            if (done == ExitCode::kOk && !stalls.empty()) done = ExitCode::kStalled;
            if (o->json) {
              const nlohmann::ordered_json final_report = {
                  {"report", "final"},       {"stopped", report.stopped},
                  {"batches", report.batches}, {"acked", report.acked},
                  {"marked", report.marked}, {"failed", report.failed},
                  {"parked", report.parked}, {"fenced", report.fenced},
                  {"pending", pending_left}, {"io_errors", report.io_errors},
                  {"parked_left", parked_left}, {"stalls", StallsJson(stalls)},
                  {"sessions_reopened", reopened},
                  {"outage", outage.active() ? OutageJson(outage, pending_left)
                                             : nlohmann::ordered_json(nullptr)}};
              fmt::print("{}\n", lab::DumpJson(final_report));
              // Out before the publisher's teardown (rd_kafka_destroy), however long that takes.
              std::fflush(stdout);
              return done;
            }
            if (report.io_errors > 0)
              fmt::print("[relay] retried {} batches after an I/O error\n", report.io_errors);
            if (report.reconnects > 0)
              fmt::print("[relay] reconnected {} times after a lost database connection\n",
                         report.reconnects);
            if (reopened > 0)
              fmt::print("[relay] opened {} database sessions again that the server had ended "
                         "while they sat idle (idle_session_timeout, a pooler's idle timeout)\n",
                         reopened);
            fmt::print("[relay] {} batches={} acked={} marked={} failed={} parked={} fenced={} "
                       "pending={}\n",
                       report.stopped ? "stopped on signal:" : "done:", report.batches,
                       report.acked, report.marked, report.failed, report.parked, report.fenced,
                       pending_left);
            if (outage.active())
              fmt::print("[relay] ended during a {}: none parked; a relay sends them once the "
                         "brokers answer\n",
                         lab::EscapeBytes(OutageText(outage, pending_left)));
            for (const Stall& stall : stalls)
              fmt::print("[relay] stalled: {} rows of aggregate {} wait behind parked row id={} "
                         "event={}; `outbox-lab unpark {}` lets them go\n",
                         stall.rows_held, lab::EscapeBytes(stall.aggregate_id), stall.parked_id,
                         lab::EscapeBytes(stall.event_id), stall.parked_id);
            std::fflush(stdout);
            return done;
          }};
}

}  // namespace outbox::cli
