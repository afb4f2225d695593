#include <fmt/format.h>

#include <limits>

#include "cli/command.h"
#include "cli/duration.h"
#include "cli/option_values.h"
#include "outbox/open_store.h"
#include "outbox/error.h"
#include "outbox/pg/connection.h"

namespace outbox::cli {

Command AddPurgeCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "purge",
      "Delete (or --archive) published rows older than a duration, in bounded batches; never "
      "an unpublished or parked row");
  struct Options {
    std::int64_t older_than_ms = 0;
    bool archive = false;
    std::int64_t batch_size = 1000;
  };
  auto o = std::make_shared<Options>();
  AddDurationOption(*sub, "--older-than", o->older_than_ms,
                    "Purge rows published longer ago than this, e.g. 7d, 12h, 30m, 0s", 0,
                    std::numeric_limits<std::int64_t>::max())
      ->required()
      ->default_str("");  // required: no default to show
  sub->add_flag("--archive", o->archive, "Move the rows to outbox_archive instead of dropping them");
  sub->add_option("--batch-size", o->batch_size, "Rows per transaction")
      ->transform(PositiveInteger())
      ->capture_default_str();
  return {sub, [&global, o]() -> ExitCode {
            auto store = OpenStore(global.db, OpenMode::kExisting, global.MakeStoreOptions());
            const PurgeReport r = store->PurgeOlderThan(o->older_than_ms, o->batch_size, o->archive);
            fmt::print("[purge] deleted={} archived={} batches={}\n", r.deleted, r.archived, r.batches);
            return ExitCode::kOk;
          }};
}

Command AddUnparkCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "unpark", "Make parked rows claimable again (attempts reset): one id, or --all");
  struct Options {
    std::int64_t id = 0;
    bool all = false;
  };
  auto o = std::make_shared<Options>();
  // Any 64-bit id: another program may insert a row with id 0, a negative id or one past 2^31.
  auto* id = sub->add_option("ID", o->id, "Outbox id of the parked row (as `parked` lists it)")
                 ->transform(IntegerInRange(std::numeric_limits<std::int64_t>::min(),
                                        std::numeric_limits<std::int64_t>::max()));
  sub->add_flag("--all", o->all, "Unpark every parked row")->excludes(id);
  return {sub, [&global, o, id]() -> ExitCode {
            if (!o->all && id->count() == 0)
              throw CommandError(ExitCode::kUsage, "unpark: give an outbox id or --all");
            auto store = OpenStore(global.db, OpenMode::kExisting, global.MakeStoreOptions());
            if (o->all) {
              fmt::print("[unpark] unparked={}\n", store->UnparkAll());
              return ExitCode::kOk;
            }
            if (!store->Unpark(o->id))
              throw CommandError(ExitCode::kPrecondition,
                                 fmt::format("unpark: no parked row with id {} in '{}'", o->id,
                                             pg::RedactPassword(global.db)));
            fmt::print("[unpark] unparked id={}\n", o->id);
            return ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
