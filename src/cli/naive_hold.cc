#include <fmt/format.h>

#include "cli/command.h"
#include "lab/chapter/hold.h"
#include "lab/chapter/loans.h"

namespace outbox::cli {

Command AddNaiveHoldCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "naive-hold",
      "Dual write done wrong: commit business row L-2001 with no outbox row, then HOLD before "
      "sending; kill -9 it to orphan the row");
  return {sub, [&global]() -> ExitCode {
            auto store = lab::OpenLabStore(global.db, global.MakeStoreOptions());
            lab::Loan loan = lab::ChapterLoan(1001, store->clock().EpochMs());  // L-2001, B-1101
            loan.book_id = "B-201";
            if (!lab::InsertLoanWithoutEvent(*store, loan))
              throw CommandError(ExitCode::kPrecondition,
                                 fmt::format("naive-hold: loan {} already exists in '{}'; run `{}` first",
                                             loan.loan_id, global.db,
                                             CommandLine(global.invocation(), "reset")));
            lab::HoldUntilKilled(fmt::format(
                "[naive] business row {} committed; HOLD before send", loan.loan_id));
          }};
}

}  // namespace outbox::cli
