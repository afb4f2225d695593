#include <fmt/format.h>

#include "cli/command.h"
#include "cli/duration.h"
#include "lab/idempotent_consumer.h"
#include "lab/topic_reader.h"

namespace outbox::cli {
namespace {

struct ConsumeOptions {
  bool with_offsets = false;
  std::int64_t timeout_ms = 10000;  // --read-timeout
  std::string group;
  bool dedupe = false;
  std::string effects_db;
};

ExitCode RunIdempotentConsumer(const GlobalOptions& global, const ConsumeOptions& o) {
  if (o.group.empty() || o.effects_db.empty())
    throw CommandError(ExitCode::kUsage, "consume --dedupe needs --group G and --effects-db PATH");
  const auto report = lab::ConsumeIdempotently(
      {global.RequireBrokers(), global.topic, o.group, o.effects_db, global.ParsedProperties(),
       static_cast<int>(o.timeout_ms), global.clock.get()},
      [](const lab::ConsumedRecord& r) {
        fmt::print("[consume] partition={} offset={} event={} {}\n", r.partition, r.offset,
                   r.event_id, r.applied ? "applied" : "duplicate: skipped");
        std::fflush(stdout);
      });
  fmt::print("[consume] read={} applied={} skipped={} effects-total={}\n", report.read,
             report.applied, report.skipped, report.effects_total);
  return ExitCode::kOk;
}

}  // namespace

Command AddConsumeCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "consume",
      "Print the whole topic as key,value lines, like the chapter's kafka-console-consumer "
      "--from-beginning; or, with --dedupe, be the idempotent consumer");
  auto o = std::make_shared<ConsumeOptions>();
  sub->add_flag("--with-offsets", o->with_offsets, "Prefix each line with partition=P offset=O");
  AddReadTimeoutOption(*sub, o->timeout_ms);
  sub->add_flag("--dedupe", o->dedupe,
                "Idempotent consumer: apply each event once, recording its id in processed_event "
                "in the same transaction as the effect; commit the offset after");
  sub->add_option("--group", o->group, "Consumer group (with --dedupe): where offsets are committed");
  sub->add_option("--effects-db", o->effects_db,
                  "SQLite file for the consumer's effects and processed_event (with --dedupe)");
  return {sub, [&global, o]() -> ExitCode {
            if (o->dedupe) return RunIdempotentConsumer(global, *o);
            const auto records = lab::ReadTopic(
                {global.RequireBrokers(), global.topic, global.ParsedProperties(), static_cast<int>(o->timeout_ms)});
            for (const auto& r : records) {
              if (o->with_offsets) fmt::print("partition={} offset={} ", r.partition, r.offset);
              fmt::print("{},{}\n", r.key, r.value);
            }
            return ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
