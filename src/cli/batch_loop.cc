#include <fmt/format.h>

#include "cli/command.h"
#include "cli/duration.h"
#include "cli/publishing.h"
#include "lab/bench/batched_loop.h"
#include "lab/chapter/loans.h"

namespace outbox::cli {
namespace {

struct BatchLoopCliOptions {
  std::int64_t batch_size = 1000;
  std::int64_t delivery_timeout_ms = 10000;
};

}  // namespace

Command AddBatchLoopCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "batch-loop",
      "The hand-written batched loop the bench compares relay with: read a page of unpublished "
      "rows, produce them all, flush, mark the acked ids in one transaction; until a page is "
      "empty. No claims, no retries: one process at a time");
  auto o = std::make_shared<BatchLoopCliOptions>();
  sub->add_option("--batch-size", o->batch_size, "Rows per page")
      ->transform(PositiveInteger())
      ->capture_default_str();
  AddDurationOption(*sub, "--delivery-timeout", o->delivery_timeout_ms,
                    "librdkafka message.timeout.ms", 1, kMaxDeliveryTimeoutMs);
  return {sub, [&global, o]() -> ExitCode {
            RejectPostgres(global, "batch-loop");
            auto store = lab::OpenLabDatabase(global.db, global.MakeStoreOptions());
            lab::BatchedLoopOptions options;
            options.brokers = global.RequireBrokers();
            options.topic = global.topic;
            options.delivery_timeout_ms = static_cast<int>(o->delivery_timeout_ms);
            options.page_size = o->batch_size;
            options.properties = global.ParsedProperties();
            // As publish and relay: check and verify can then tell a restart of the in-memory
            // broker from a lost event. Noted again once rows were marked if the broker did not
            // answer in time at first.
            const bool noted = NoteBrokerIncarnation(global, *store, o->delivery_timeout_ms);
            const lab::BatchedLoopReport report = lab::RunBatchedLoop(*store, options);
            if (!noted && report.marked > 0) NoteBrokerIncarnation(global, *store, 2000);
            fmt::print("[batch-loop] done: pages={} sent={} marked={}\n", report.pages, report.sent,
                       report.marked);
            return ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
