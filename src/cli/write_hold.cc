#include <fmt/format.h>

#include "cli/command.h"
#include "cli/row_lines.h"
#include "lab/chapter/loans.h"
#include "lab/faults/lab_failpoints.h"
#include "outbox/failpoint.h"

namespace outbox::cli {

Command AddWriteHoldCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "write-hold",
      "Write N loans, each with its outbox event in the same transaction, then HOLD before "
      "publishing; kill -9 it");
  auto count = std::make_shared<std::int64_t>(0);
  sub->add_option("N", *count, "Number of loan transactions")
      ->required()
      ->transform(PositiveInteger());
  auto lines = std::make_shared<RowLineOptions>();
  AddRowLineOptions(*sub, *lines);
  return {sub, [&global, count, lines]() -> ExitCode {
            const bool row_lines = PrintsRowLines(*lines, *count);
            lab::ArmHoldUnlessConfigured(lab::kWriteHoldBeforePublish);
            auto store = lab::OpenLabStore(global.db, global.MakeStoreOptions());
            const auto history = global.OpenHistory();
            // Numbering continues after the rows a previous run left.
            std::int64_t start = lab::NextLoanIndex(*store) - 1;
            for (std::int64_t k = 1; k <= *count; ++k) {
              std::int64_t i = start + k;
              lab::WrittenLoan w;
              for (;;) {
                try {
                  w = lab::WriteLoanWithEvent(*store, i, history.get());
                  break;
                } catch (const std::exception& e) {
                  // Another writer took index i meanwhile (two terminals, one database): go on
                  // after its rows. Only while it moved on.
                  const std::int64_t next = lab::NextLoanIndex(*store);
                  if (!lab::IsUniqueViolation(e) || next <= i) throw;
                  start = next - k;
                  i = next;
                }
              }
              if (!row_lines) continue;
              fmt::print("[write] txn i={} loan={} event={} committed business={} outbox={}\n", i,
                         w.loan.loan_id, w.event.event_id, lab::CountLoans(*store),
                         store->Count().total);
              std::fflush(stdout);
            }
            if (!row_lines) {
              fmt::print("[write] committed={} business={} outbox={}\n", *count,
                         lab::CountLoans(*store), store->Count().total);
              std::fflush(stdout);
            }
            lab::Note(history.get(), "info", "hold", "before publish");
            // The registry's hold (an OUTBOX_FAILPOINTS entry for the point may replace it).
            HitFailpoint(lab::kWriteHoldBeforePublish, lab::kWriteHoldLine);
            return ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
