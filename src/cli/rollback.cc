#include <fmt/format.h>

#include <algorithm>

#include "cli/command.h"
#include "lab/loans.h"
#include "outbox/error.h"

namespace outbox::cli {

Command AddRollbackCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "rollback",
      "Shared fate: insert loan L-3001 and an outbox row reusing an existing event_id in one "
      "transaction; the unique constraint fails and both roll back");
  return {sub, [&global] {
            auto store = lab::OpenLabDatabase(global.db, global.MakeStoreOptions());
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
            {
              auto txn = store->BeginWrite();
              lab::InsertLoan(txn.connection(), loan);
              try {
                store->Enqueue(txn, event);
                // Unreachable with the UNIQUE constraint; never commit a collision.
                fmt::print("[rollback] outbox insert unexpectedly succeeded; rolling back\n");
              } catch (const DbError& e) {
                fmt::print("[rollback] outbox insert failed: {} (event_id '{}')\n", e.what(),
                           existing_event_id);
              }
            }  // no Commit(): the destructor rolls back the loan too
            bool present = false;
            {
              auto txn = store->BeginRead();
              present = lab::LoanExists(txn.connection(), loan.loan_id);
            }
            fmt::print("[rollback] business_loan has {} = {}\n", loan.loan_id, present);
            return present ? ExitCode::kExpectationFailed : ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
