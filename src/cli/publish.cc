#include <fmt/format.h>

#include "cli/command.h"
#include "lab/broker/json_bytes.h"
#include "cli/publishing.h"
#include "cli/stop_signal.h"
#include "lab/chapter/loans.h"
#include "lab/chapter/recording_publisher.h"
#include "outbox/per_row_relay.h"

namespace outbox::cli {

Command AddPublishCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "publish",
      "The chapter's relay: for up to N unpublished rows in id order, send (key = event id), "
      "wait for the ack (acks=all), then mark the row published in its own transaction");
  auto options = std::make_shared<PublishOptions>();
  AddPublishOptions(*sub, *options);
  return {sub, [&global, options]() -> ExitCode {
            // Ctrl-C or SIGTERM: the row in flight is acknowledged and marked, then the summary.
            StopSignalFd stop;  // before any librdkafka thread exists
            auto store = lab::OpenLabStore(global.db, global.MakeStoreOptions());
            auto publisher = MakePublisher(global, *options, store->RunId());
            NoteBrokerIncarnation(publisher->handle(), *store, options->delivery_timeout_ms);
            const auto history = global.OpenHistory();
            lab::RecordingPublisher recording(*publisher, history.get());
            std::int64_t marked_so_far = 0;
            const auto report = RunPerRowRelay(
                *store, recording, {options->count, /*mark=*/true},
                [&](const PerRowRelayStep& step) {
                  if (step.marked) lab::Note(history.get(), "ok", "mark", step.row.event.event_id);
                  if (step.delivery.ok)
                    fmt::print("[publish] outboxId={} key={} offset={} marked={}\n", step.row.id,
                               lab::EscapeBytes(step.row.event.event_id), step.delivery.offset,
                               step.marked ? ++marked_so_far : marked_so_far);
                  else
                    PrintDeliveryFailure("publish", step, *publisher);
                  std::fflush(stdout);
                },
                [&stop] { return stop.Received(); });
            const std::int64_t left = store->Count().unpublished;
            if (report.failed > 0) {
              fmt::print("[publish] sent={} marked={} failed={} unpublished-left={}\n", report.sent,
                         report.marked, report.failed, left);
              std::fflush(stdout);
              throw CommandError(ExitCode::kDeliveryFailed,
                                 fmt::format("publish: a delivery failed (see above); {} rows left "
                                             "unpublished in '{}'", left, global.db));
            }
            fmt::print("[publish] {}sent={} marked={} unpublished-left={}\n",
                       report.stopped ? "stopped on signal: " : "", report.sent, report.marked,
                       left);
            std::fflush(stdout);
            return ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
