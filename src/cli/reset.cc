#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <optional>

#include "cli/command.h"
#include "lab/loans.h"
#include "outbox/pg/connection.h"

namespace outbox::cli {
namespace {

// The rows a reset is about to remove.
struct RemovedRows {
  std::int64_t loans = 0;
  OutboxCounts outbox;
  std::int64_t archived = 0;
};

// Counts the rows of an existing lab database, or nullopt when there is no file or no lab schema
// (nothing to remove). Throws DbError as OpenLabDatabase does: a file reset cannot count, it
// cannot reset either, and the error says why.
std::optional<RemovedRows> CountRows(const GlobalOptions& global) {
  std::error_code ec;
  if (!pg::IsPostgresUrl(global.db) && !std::filesystem::exists(global.db, ec)) return std::nullopt;
  std::unique_ptr<OutboxStore> store;
  try {
    store = lab::OpenLabStore(global.db, global.MakeStoreOptions());
  } catch (const SchemaMissingError&) {
    return std::nullopt;
  }
  RemovedRows removed;
  removed.loans = lab::CountLoans(*store);
  removed.outbox = store->Count();
  removed.archived = store->Status(store->clock().EpochMs()).archived;
  return removed;
}

}  // namespace

Command AddResetCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "reset",
      "Create the database (and its directory) with empty business_loan and outbox tables; on a "
      "database with rows, say how many it removed");
  return {sub, [&global] {
            const std::optional<RemovedRows> removed = CountRows(global);
            lab::ResetLabStore(global.db, global.MakeStoreOptions());
            if (removed && (removed->loans > 0 || removed->outbox.total > 0 || removed->archived > 0))
              fmt::print("[reset] removed business_loan={} outbox={} (published={} unpublished={}) "
                         "archived={}\n",
                         removed->loans, removed->outbox.total, removed->outbox.published,
                         removed->outbox.unpublished, removed->archived);
            fmt::print("[reset] schema ready db={}\n", pg::RedactPassword(global.db));
            std::fflush(stdout);
            return ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
