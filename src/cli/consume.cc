#include <fmt/format.h>

#include "cli/command.h"
#include "cli/duration.h"
#include "cli/option_values.h"
#include "lab/chapter/idempotent_consumer.h"
#include "lab/chapter/loans.h"
#include "lab/check/topic_reader.h"

namespace outbox::cli {
namespace {

struct ConsumeOptions {
  bool with_offsets = false;
  std::int64_t timeout_ms = 10000;  // --read-timeout
  std::string group;
  bool dedupe = false;
  std::string effects_db;
  std::int64_t retain_ms = 0;  // --retain; 0: never prune
  std::int64_t prune_batch_size = 1000;
  std::string isolation = "read_committed";  // --isolation
};

// The topics to read: --topic, or under --topic-template every topic the outbox's event types
// map to (the outbox database is read for them, read-only).
std::vector<std::string> TopicsToRead(const GlobalOptions& global) {
  if (global.topic_template.empty()) return {global.topic};
  const auto store =
      lab::OpenLabStore(global.db, global.MakeStoreOptions(), OpenMode::kReadOnly);
  return lab::TopicsOfRun(*store, global.topic, global.topic_template);
}

ExitCode RunIdempotentConsumer(const GlobalOptions& global, const ConsumeOptions& o) {
  if (o.group.empty() || o.effects_db.empty())
    throw CommandError(ExitCode::kUsage, "consume --dedupe needs --group G and --effects-db PATH");
  const std::vector<std::string> topics = TopicsToRead(global);
  const bool routed = !global.topic_template.empty();
  lab::ConsumeReport report;
  // One topic after the other, one group and one processed_event table: an event is applied
  // once whichever topic carries it.
  for (const std::string& topic : topics) {
    lab::IdempotentConsumerOptions options{global.RequireBrokers(), topic, o.group,
                                           o.effects_db, WithIsolation(global.ParsedProperties(), o.isolation),
                                           static_cast<int>(o.timeout_ms), global.clock.get()};
    options.retain_ms = o.retain_ms;
    options.prune_batch_size = o.prune_batch_size;
    const std::string where = routed ? fmt::format("topic={} ", topic) : std::string();
    const auto one = lab::ConsumeIdempotently(
        options,
        [&where](const lab::ConsumedRecord& r) {
          if (r.event_id.empty())
            fmt::print("[consume] {}partition={} offset={} event=(none) applied: no event id, not "
                       "deduplicated\n",
                       where, r.partition, r.offset);
          else
            fmt::print("[consume] {}partition={} offset={} event={} {}\n", where, r.partition,
                       r.offset, r.event_id, r.applied ? "applied" : "duplicate: skipped");
          std::fflush(stdout);
        });
    report.read += one.read;
    report.applied += one.applied;
    report.skipped += one.skipped;
    report.without_event_id += one.without_event_id;
    report.pruned += one.pruned;
    report.prune_batches += one.prune_batches;
    report.effects_total = one.effects_total;    // afterwards: the last read's count
    report.processed_kept = one.processed_kept;
  }
  fmt::print("[consume] read={} applied={} skipped={} effects-total={}\n", report.read,
             report.applied, report.skipped, report.effects_total);
  if (report.without_event_id > 0)
    fmt::print("[consume] without-event-id={}: records with no event_id header and no eventId in "
               "the payload, applied without deduplication (counted in applied)\n",
               report.without_event_id);
  if (o.retain_ms > 0)
    fmt::print("[consume] pruned={} batches={} processed-kept={} (processed_event rows older than "
               "{} ms)\n",
               report.pruned, report.prune_batches, report.processed_kept, o.retain_ms);
  return ExitCode::kOk;
}

}  // namespace

Command AddConsumeCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "consume",
      "Print the whole topic as key,value lines, like the chapter's kafka-console-consumer "
      "--from-beginning; or, with --dedupe, be the idempotent consumer");
  auto o = std::make_shared<ConsumeOptions>();
  AddIsolationOption(*sub, o->isolation);
  sub->add_flag("--with-offsets", o->with_offsets, "Prefix each line with partition=P offset=O");
  AddReadTimeoutOption(*sub, o->timeout_ms);
  CLI::Option* dedupe = sub->add_flag("--dedupe", o->dedupe,
                "Idempotent consumer: apply each event once, recording its id in processed_event "
                "in the same transaction as the effect; commit the offset after. The id is the "
                "event_id header, else the payload's eventId; a record with neither is applied "
                "without deduplication and counted apart (without-event-id=N)");
  // Without --dedupe these would be ignored: a usage error instead (exit 2).
  sub->add_option("--group", o->group, "Consumer group (with --dedupe): where offsets are committed")
      ->needs(dedupe);
  sub->add_option("--effects-db", o->effects_db,
                  "SQLite file for the consumer's effects and processed_event (with --dedupe)")
      ->needs(dedupe);
  AddDurationOption(*sub, "--retain", o->retain_ms,
                    "With --dedupe: after consuming, delete processed_event rows older than this, "
                    "in bounded batches. Keep it above the longest re-send window (relay lease, "
                    "backoff cap, time to unpark, offset rewinds): an event re-sent after its row "
                    "is gone is applied twice. Default: keep every row",
                    1, 3'650LL * 86'400'000);
  sub->add_option("--prune-batch-size", o->prune_batch_size,
                  "With --retain: processed_event rows deleted per transaction")
      ->transform(PositiveInteger())
      ->capture_default_str();
  return {sub, [&global, o]() -> ExitCode {
            if (o->dedupe) return RunIdempotentConsumer(global, *o);
            if (o->retain_ms > 0)
              throw CommandError(ExitCode::kUsage, "consume --retain prunes the dedupe table: "
                                                   "it needs --dedupe");
            const auto records =
                lab::ReadTopicLogs({global.RequireBrokers(), global.topic,
                                    WithIsolation(global.ParsedProperties(), o->isolation),
                                    static_cast<int>(o->timeout_ms)},
                                   TopicsToRead(global))
                    .records;
            const bool routed = !global.topic_template.empty();
            for (const auto& r : records) {
              if (o->with_offsets && routed) fmt::print("topic={} ", r.topic);
              if (o->with_offsets) fmt::print("partition={} offset={} ", r.partition, r.offset);
              fmt::print("{},{}\n", r.key, r.value);
            }
            return ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
