#include "cli/wal_relay_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/partition_pin.h"
#include "cli/publishing.h"
#include "cli/stop_signal.h"
#include "lab/broker/json_bytes.h"
#include "lab/chapter/recording_publisher.h"
#include "outbox/kafka/kafka_publisher.h"
#include "outbox/open_store.h"
#include "outbox/pg/connection.h"
#include "outbox/wal_relay.h"

namespace outbox::cli {
namespace {

ExitCode ForWalError(const WalRelayError& e) {
  return e.kind() == WalRelayError::Kind::kSlotActive ? ExitCode::kSlotActive
                                                       : ExitCode::kWalRefused;
}

// One JSON object per line (--json), as the polling relay's "report" lines; flushed.
void PrintJson(const nlohmann::ordered_json& line) {
  fmt::print("{}\n", lab::DumpJson(line));
  std::fflush(stdout);
}

void PrintOpen(const WalOpenReport& open, bool reconnect, bool json) {
  if (json) {
    PrintJson({{"report", "wal-open"},
               {"reconnect", reconnect},
               {"slot", open.slot},
               {"created_slot", open.created_slot},
               {"publication", open.publication},
               {"created_publication", open.created_publication},
               {"confirmed", pg::FormatLsn(open.confirmed)},
               {"walsender_pid", open.walsender_pid},
               {"unpublished_at_creation", open.created_slot
                                               ? nlohmann::ordered_json(open.unpublished_at_creation)
                                               : nlohmann::ordered_json(nullptr)},
               {"unstreamed", open.unstreamed >= 0 ? nlohmann::ordered_json(open.unstreamed)
                                                   : nlohmann::ordered_json(nullptr)}});
    return;
  }
  fmt::print("[relay] wal: {}slot {}{}, publication {}{}, streaming from LSN {} (walsender PID "
             "{})\n",
             reconnect ? "reconnected: " : "", open.slot, open.created_slot ? " (created)" : "",
             open.publication, open.created_publication ? " (created)" : "",
             pg::FormatLsn(open.confirmed), open.walsender_pid);
  // Unpublished rows older than the stream end Open with exit 23 (WalRelayError kOlderRows), so
  // what is left to say here is that the rows of a re-added outbox were all published.
  if (open.unstreamed >= 0)
    fmt::print("[relay] wal: the outbox was not in publication {} (a reset by an older "
               "outbox-lab took it out) and is added back; its {} rows committed before are not "
               "in the stream, and all of them are published\n",
               open.publication, open.unstreamed);
  std::fflush(stdout);
}

// One line per reset seen in the stream, printed under --quiet too, as the polling relay's.
void PrintWalNewRun(const std::string& previous, const std::string& run, std::int64_t dropped,
                    bool json) {
  if (json) {
    const nlohmann::ordered_json ended =
        previous.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(previous);
    PrintJson({{"report", "reset"}, {"previous_run", ended}, {"run", run}, {"dropped", dropped}});
    return;
  }
  fmt::print("[relay] wal: the outbox was reset: {}run {} began at this commit; its rows go out "
             "under its run id{}\n",
             previous.empty() ? std::string()
                              : fmt::format("run {} ended, ", lab::EscapeBytes(previous)),
             lab::EscapeBytes(run),
             dropped > 0 ? fmt::format("; {} rows of a dropped outbox whose run is not known are "
                                       "not sent",
                                       dropped)
                         : std::string());
  std::fflush(stdout);
}

}  // namespace

ExitCode RunWalRelay(const GlobalOptions& global, const RelayCliOptions& o, bool http) {
  if (!pg::IsPostgresUrl(global.db))
    throw CommandError(ExitCode::kWalRefused,
                       fmt::format("relay --source wal: refused: '{}' is an SQLite file; the WAL "
                                   "relay reads a PostgreSQL logical replication slot (give a "
                                   "postgresql:// --db)",
                                   global.db));
  if (o.exactly_once || o.tail_check || !o.coordination.empty() || o.pg_claim != "scan" ||
      http || !o.transactional_id.empty())
    throw CommandError(ExitCode::kUsage,
                       "relay --source wal: --exactly-once, --tail-check, --coordination, "
                       "--pg-claim and --http apply to the polling relay only (a slot has "
                       "one reader: nothing to coordinate)");
  // The WAL relay builds records from the decoded insert alone (OnInsert): routing and the
  // CloudEvents headers are built by RouteRow from a claimed OutboxRow in the polling relay.
  if (!global.topic_template.empty() || o.headers != "lab")
    throw CommandError(ExitCode::kUsage,
                       "relay --source wal: --topic-template and --headers cloudevents apply to "
                       "the polling relay only for now; the WAL relay sends every insert to "
                       "--topic with the lab's headers (docs/wal-relay.md, Limits)");
  StopSignalFd stop;  // before any librdkafka thread exists
  const std::unique_ptr<OutboxStore> store =
      OpenStore(global.db, OpenMode::kExisting, global.MakeStoreOptions());
  // As the polling relay: a key that pins an aggregate to a partition has a mapping to keep
  // (a changed partition count or partitioner would put an aggregate's later events on another
  // partition: exit 21); a count unknown now is noted after the first batch that sends.
  bool partition_count_unknown = false;
  if (ParseKeyChoice(o.key) == KeyChoice::kAggregateId)
    partition_count_unknown = PinPartitionMapping(global, *store, o.allow_partitioner_change,
                                                  [&stop] { return stop.Received(); }, o.json);
  kafka::KafkaPublisherOptions publisher_options;
  publisher_options.brokers = global.RequireBrokers();
  publisher_options.topic = global.topic;
  publisher_options.delivery_timeout_ms = static_cast<int>(o.delivery_timeout_ms);
  publisher_options.properties = ProducerProperties(global);
  publisher_options.run_id = store->RunId();
  kafka::KafkaPublisher publisher(publisher_options);
  const auto history = global.OpenHistory();
  lab::RecordingPublisher recording(publisher, history.get());
  bool noted = NoteBrokerIncarnation(publisher.handle(), *store, o.delivery_timeout_ms);

  WalRelayOptions options;
  options.slot = o.slot;
  options.key = ParseKeyChoice(o.key);
  options.batch_size = o.batch_size;
  options.wait_ms = std::min<std::int64_t>(o.idle_max_ms, 500);
  options.linger_ms = o.linger_ms;
  options.max_attempts = o.max_attempts;
  options.backoff_base_ms = std::max<std::int64_t>(o.backoff_base_ms, 1);
  options.backoff_max_ms = std::max(o.backoff_max_ms, options.backoff_base_ms);
  options.stop_requested = [&stop]() { return stop.Received(); };
  const bool json = o.json;
  options.on_skipped = [json](std::int64_t id, const std::string& why) {
    if (json) {
      PrintJson({{"report", "wal-skipped"}, {"outbox_id", id}, {"reason", why}});
      return;
    }
    fmt::print("[relay] wal: outbox id {} not sent: {} (the WAL relay cannot park a row)\n", id, why);
    std::fflush(stdout);
  };
  options.on_retry = [json](std::int64_t failed, const std::string& error,
                           std::int64_t retry_in_ms) {
    if (json) {
      PrintJson({{"report", "wal-retry"}, {"failed", failed}, {"error", error},
                 {"retry_in_ms", retry_in_ms}});
      return;
    }
    fmt::print("[relay] wal: {} deliveries failed ({}); sending them again in {} ms, nothing "
               "confirmed meanwhile\n",
               failed, error, retry_in_ms);
    std::fflush(stdout);
  };
  // A reset in the stream: the broker's incarnation is noted again, for the new run (check's
  // exit 16 compares it with the run's), after its first records.
  options.on_new_run = [json, &noted](const std::string& previous, const std::string& run,
                                      std::int64_t dropped) {
    PrintWalNewRun(previous, run, dropped, json);
    noted = false;
  };
  WalRelay relay(global.db, *store, recording, options);

  std::int64_t batches = 0, transactions = 0, records = 0, skipped = 0, reconnects = 0;
  bool stopped = false;
  const auto open_stream = [&](bool reconnect) {
    try {
      PrintOpen(relay.Open(), reconnect, json);
    } catch (const WalRelayError& e) {
      throw CommandError(ForWalError(e), e.what());
    }
  };
  open_stream(false);
  for (;;) {
    if (stop.Received()) {
      stopped = true;
      break;
    }
    WalBatchReport batch;
    try {
      batch = relay.RunBatch();
    } catch (const WalRelayError& e) {
      throw CommandError(ForWalError(e), e.what());
    } catch (const pg::DecodeError& e) {
      throw CommandError(ExitCode::kDbError, e.what());
    } catch (const pg::PgError& e) {
      if (!e.connection_lost()) throw;
      // The server restarted or the walsender was terminated: nothing confirmed is lost, and
      // everything unconfirmed is streamed again after the reconnect.
      std::int64_t wait_ms = options.backoff_base_ms;
      for (int attempt = 1;; ++attempt) {
        if (json)
          PrintJson({{"report", "wal-reconnect"}, {"error", e.what()}, {"attempt", attempt},
                     {"retry_in_ms", wait_ms}});
        else {
          fmt::print("[relay] wal: stream lost ({}); reconnect attempt {} in {} ms\n", e.what(),
                     attempt, wait_ms);
          std::fflush(stdout);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
        if (stop.Received()) {
          stopped = true;
          break;
        }
        try {
          open_stream(true);
          ++reconnects;
          break;
        } catch (const pg::PgError& again) {
          if (!again.connection_lost()) throw;
        } catch (const CommandError& refused) {
          // The old walsender may still hold the slot for a moment after its connection broke.
          if (refused.code() != ExitCode::kSlotActive || attempt >= 20) throw;
        }
        wait_ms = std::min(wait_ms * 2, options.backoff_max_ms);
      }
      if (stopped) break;
      continue;
    }
    ++batches;
    transactions += batch.transactions;
    records += batch.records;
    skipped += batch.skipped;
    if (!batch.idle && !o.quiet && json) {
      PrintJson({{"report", "batch"}, {"transactions", batch.transactions},
                 {"records", batch.records}, {"skipped", batch.skipped},
                 {"confirmed", pg::FormatLsn(batch.confirmed)}});
    } else if (!batch.idle && !o.quiet) {
      fmt::print("[relay] wal: batch transactions={} records={} confirmed={}\n",
                 batch.transactions, batch.records, pg::FormatLsn(batch.confirmed));
      std::fflush(stdout);
    }
    if (!noted && batch.records > 0)
      noted = NoteBrokerIncarnation(publisher.handle(), *store, 2000);
    if (partition_count_unknown && batch.records > 0)
      partition_count_unknown = !NotePartitionCount(global, *store, publisher.handle(), json);
    if (o.once) break;
    if (o.until_empty && relay.CaughtUp()) break;
  }
  if (json) {
    PrintJson({{"report", "final"}, {"source", "wal"}, {"stopped", stopped},
               {"batches", batches}, {"transactions", transactions}, {"records", records},
               {"skipped", skipped}, {"reconnects", reconnects},
               {"confirmed", pg::FormatLsn(relay.confirmed())}});
  } else {
    fmt::print("[relay] wal {} batches={} transactions={} records={} skipped={} reconnects={} "
               "confirmed={}\n",
               stopped ? "stopped on signal:" : "done:", batches, transactions, records, skipped,
               reconnects, pg::FormatLsn(relay.confirmed()));
    std::fflush(stdout);
  }
  // A skipped row is the WAL relay's parked row: never sent, and its slot has moved past it.
  return o.fail_on_parked && skipped > 0 ? ExitCode::kParkedRows : ExitCode::kOk;
}

}  // namespace outbox::cli

namespace outbox::cli {

void PrintWalProgress(const char* tag, const WalProgress& wal) {
  if (wal.wal_status == "lost")
    fmt::print("[{}] wal: slot {} is lost (wal_status lost: invalidated past "
               "max_slot_wal_keep_size); published counts the flag only; resync: "
               "docs/wal-relay.md\n",
               tag, wal.slot);
  else if (wal.active)
    fmt::print("[{}] wal: slot {} is active (walsender PID {}), confirmed LSN {}, lag {} bytes: "
               "its pending inserts cannot be read while a WAL relay streams it; published "
               "counts the flag only\n",
               tag, wal.slot, wal.active_pid, pg::FormatLsn(wal.confirmed), wal.lag_bytes);
  else
    fmt::print("[{}] wal: slot {} inactive, confirmed LSN {}, lag {} bytes, {} inserts pending: "
               "a row counts as published once the slot no longer holds its insert\n",
               tag, wal.slot, pg::FormatLsn(wal.confirmed), wal.lag_bytes,
               wal.pending_ids ? wal.pending_ids->size() : 0);
  std::fflush(stdout);
}

}  // namespace outbox::cli
