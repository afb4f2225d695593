#include <fmt/format.h>

#include "cli/command.h"
#include "cli/publishing.h"
#include "lab/chapter/hold.h"
#include "lab/chapter/loans.h"
#include "lab/chapter/recording_publisher.h"

namespace outbox::cli {

Command AddNaiveSendFirstHoldCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "naive-send-first-hold",
      "Dual write done wrong the other way: send LoanCreated for L-4001 and wait for its ack, "
      "then HOLD before the database write; kill -9 it to leave a phantom event in Kafka");
  auto options = std::make_shared<PublishOptions>();
  options->count = 1;
  AddDeliveryTimeoutOption(*sub, options->delivery_timeout_ms);
  return {sub, [&global, options]() -> ExitCode {
            // The schema must exist, as for every command, although nothing is written.
            auto store = lab::OpenLabStore(global.db, global.MakeStoreOptions());
            lab::Loan loan = lab::ChapterLoan(3001, store->clock().EpochMs());  // L-4001
            loan.book_id = "B-401";
            const OutboxEvent event = lab::LoanCreatedEvent(loan, 3001);  // evt-4001
            auto publisher = MakePublisher(global, *options, store->RunId());
            NoteBrokerIncarnation(publisher->handle(), *store, options->delivery_timeout_ms);
            const auto history = global.OpenHistory();
            lab::RecordingPublisher recording(*publisher, history.get());
            lab::Note(history.get(), "invoke", "txn", event.event_id);  // stays open: killed before the write
            OutboundMessage message{0, event.event_id, event.payload, event.event_id, event.event_type};
            const DeliveryResult result = recording.Publish({message}).front();
            if (!result.ok) lab::Note(history.get(), "fail", "txn", event.event_id, result.error);
            if (!result.ok)
              throw CommandError(ExitCode::kDeliveryFailed,
                                 fmt::format("naive-send-first-hold: send of {} failed: {}",
                                             event.event_id, result.error));
            fmt::print("[naive-send-first] sent key={} partition={} offset={}\n", event.event_id,
                       result.partition, result.offset);
            lab::HoldUntilKilled(fmt::format(
                "[naive-send-first] event {} sent, business row {} NOT written; HOLD before DB "
                "write",
                event.event_id, loan.loan_id));
          }};
}

}  // namespace outbox::cli
