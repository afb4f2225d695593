#include <fmt/format.h>

#include <cstdio>
#include <optional>

#include "cli/command.h"
#include "lab/chapter/history.h"
#include "lab/chapter/loans.h"
#include "outbox/pg/connection.h"

namespace outbox::cli {

Command AddResetCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "reset",
      "Create the database (and its directory) with empty business_loan and outbox tables; on a "
      "database with rows, say how many it removed");
  return {sub, [&global] {
            // Opened before the reset: a history it cannot write fails the command with the
            // database untouched. No process record: a reset is a mark, not a report lane.
            std::optional<lab::History> history;
            if (!global.history.empty()) history.emplace(global.history, *global.clock);
            lab::ResetRemoved removed;
            const auto store = lab::ResetLabStore(global.db, global.MakeStoreOptions(), &removed);
            // A history kept across runs (OUTBOX_HISTORY): check reads only what follows this.
            if (history) history->Record("ok", lab::kResetOp, store->RunId());
            const ResetCounts& outbox = removed.outbox;
            if (removed.loans > 0 || outbox.outbox_rows > 0 || outbox.archived > 0)
              fmt::print("[reset] removed business_loan={} outbox={} ({}) archived={}\n",
                         removed.loans, outbox.outbox_rows,
                         outbox.lab_table
                             ? fmt::format("published={} unpublished={}", outbox.published,
                                           outbox.outbox_rows - outbox.published)
                             : std::string("a table of another design, not the lab's"),
                         outbox.archived);
            fmt::print("[reset] schema ready db={}\n", pg::RedactPassword(global.db));
            std::fflush(stdout);
            return ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
