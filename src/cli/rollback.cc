#include <fmt/format.h>

#include <algorithm>

#include "cli/command.h"
#include "lab/chapter/loans.h"
#include "outbox/error.h"

namespace outbox::cli {

Command AddRollbackCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "rollback",
      "Shared fate: insert loan L-3001 and an outbox row reusing an existing event_id in one "
      "transaction; the unique constraint fails and both roll back");
  return {sub, [&global] {
            auto store = lab::OpenLabStore(global.db, global.MakeStoreOptions());
            const OutboxSnapshot snapshot = store->Snapshot();
            const auto first = std::find_if(snapshot.rows.begin(), snapshot.rows.end(),
                                            [](const SnapshotRow& row) { return !row.archived; });
            if (first == snapshot.rows.end())
              throw CommandError(ExitCode::kPrecondition,
                                 fmt::format("rollback: the outbox in '{}' has no event to collide "
                                             "with; run write-hold first", global.db));
            const std::string existing_event_id = first->event_id;

            lab::Loan loan = lab::ChapterLoan(2001, store->clock().EpochMs());  // L-3001
            loan.book_id = "B-301";
            OutboxEvent event = lab::LoanCreatedEvent(loan, 2001);
            event.event_id = existing_event_id;
            // Never committed: the loan rolls back with the failed outbox insert.
            const std::string failure = lab::InsertLoanWithCollidingEvent(*store, loan, event);
            if (failure.empty())  // unreachable with the UNIQUE constraint
              fmt::print("[rollback] outbox insert unexpectedly succeeded; rolled back\n");
            else
              fmt::print("[rollback] outbox insert failed: {} (event_id '{}')\n", failure,
                         existing_event_id);
            const bool present = lab::LoanExists(*store, loan.loan_id);
            fmt::print("[rollback] business_loan has {} = {}\n", loan.loan_id, present);
            return present ? ExitCode::kExpectationFailed : ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
