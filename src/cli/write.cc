#include <fmt/format.h>

#include "cli/command.h"
#include "cli/row_lines.h"
#include "lab/lab_failpoints.h"
#include "lab/loans.h"
#include "outbox/failpoint.h"

namespace outbox::cli {

Command AddWriteCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "write",
      "Write N loans, each with its outbox event in one transaction, and exit (the workload "
      "for relays and failpoint sweeps; write-hold is the chapter's holding variant)");
  auto count = std::make_shared<std::int64_t>(0);
  auto lines = std::make_shared<RowLineOptions>();
  sub->add_option("N", *count, "Number of loan transactions")->required()->check(PositiveInteger());
  AddRowLineOptions(*sub, *lines);
  return {sub, [&global, count, lines]() -> ExitCode {
            const bool row_lines = PrintsRowLines(*lines, *count);
            auto store = lab::OpenLabStore(global.db, global.MakeStoreOptions());
            const auto history = global.OpenHistory();
            const std::int64_t start = lab::NextLoanIndex(*store) - 1;
            for (std::int64_t k = 1; k <= *count; ++k) {
              const lab::WrittenLoan w = lab::WriteLoanWithEvent(*store, start + k, history.get());
              if (row_lines) {
                fmt::print("[write] txn i={} loan={} event={} committed\n", start + k,
                           w.loan.loan_id, w.event.event_id);
                std::fflush(stdout);  // scripts act on each line as it comes
              }
            }
            fmt::print("[write] committed={}\n", *count);
            std::fflush(stdout);
            // write-hold's hold point, off unless OUTBOX_FAILPOINTS arms it.
            HitFailpoint(lab::kWriteHoldBeforePublish, lab::kWriteHoldLine);
            return ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
