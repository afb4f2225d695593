#include <fmt/format.h>

#include "cli/command.h"
#include "lab/loans.h"

namespace outbox::cli {

Command AddResetCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "reset", "Create the database (and its directory) with empty business_loan and outbox tables");
  return {sub, [&global] {
            lab::ResetLabDatabase(global.db, global.MakeStoreOptions());
            fmt::print("[reset] schema ready db={}\n", global.db);
            return ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
