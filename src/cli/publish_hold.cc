#include <fmt/format.h>

#include "cli/command.h"
#include "lab/broker/json_bytes.h"
#include "cli/publishing.h"
#include "lab/chapter/loans.h"
#include "lab/chapter/recording_publisher.h"
#include "lab/faults/lab_failpoints.h"
#include "outbox/failpoint.h"
#include "outbox/per_row_relay.h"

namespace outbox::cli {

Command AddPublishHoldCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "publish-hold",
      "Send up to N unpublished events and wait for each ack, but do NOT mark them; HOLD before "
      "the mark; kill -9 it to make the next publish re-send them");
  auto options = std::make_shared<PublishOptions>();
  AddPublishOptions(*sub, *options);
  return {sub, [&global, options]() -> ExitCode {
            lab::ArmHoldUnlessConfigured(lab::kPublishHoldBeforeMark);
            auto store = lab::OpenLabStore(global.db, global.MakeStoreOptions());
            auto publisher = MakePublisher(global, *options, store->RunId());
            NoteBrokerIncarnation(publisher->handle(), *store, options->delivery_timeout_ms);
            const auto history = global.OpenHistory();
            lab::RecordingPublisher recording(*publisher, history.get());
            const auto report = RunPerRowRelay(
                *store, recording, {options->count, /*mark=*/false},
                [&](const PerRowRelayStep& step) {
                  if (step.delivery.ok)
                    fmt::print("[send] outboxId={} key={} partition={} offset={}\n", step.row.id,
                               lab::EscapeBytes(step.row.event.event_id), step.delivery.partition,
                               step.delivery.offset);
                  else
                    PrintDeliveryFailure("send", step, *publisher);
                  std::fflush(stdout);
                });
            if (report.failed > 0) {
              fmt::print("[publish-hold] sent={} failed={}, NOT marked published; not holding\n",
                         report.sent, report.failed);
              std::fflush(stdout);
              throw CommandError(ExitCode::kDeliveryFailed,
                                 "publish-hold: a delivery failed (see above); nothing was marked");
            }
            // Nothing sent: a kill -9 here would show no re-send, so do not pretend to hold.
            if (report.sent == 0)
              throw CommandError(ExitCode::kPrecondition,
                                 fmt::format("publish-hold: no unpublished row in '{}', so no "
                                             "send to hold before its mark; `write N` first",
                                             global.db));
            lab::Note(history.get(), "info", "hold", "before mark");
            // The registry's hold (an OUTBOX_FAILPOINTS entry for the point may replace it).
            HitFailpoint(lab::kPublishHoldBeforeMark,
                         fmt::format("[publish-hold] sent={}, NOT marked published; HOLD before "
                                     "mark",
                                     report.sent));
            return ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
