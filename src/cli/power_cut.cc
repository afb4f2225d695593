#include <fmt/format.h>

#include <limits>

#include "cli/command.h"
#include "cli/option_values.h"
#include "lab/faults/power_cut.h"

namespace outbox::cli {

Command AddPowerCutCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "power-cut",
      "Simulate a power cut under --db after every process using it was killed: each file "
      "written through --vfs powerloss returns to its last-synced content, the -shm is deleted. "
      "Prints what was undone");
  struct Options {
    bool torn = false;
    std::optional<std::uint64_t> seed;
  };
  auto o = std::make_shared<Options>();
  sub->add_flag("--torn", o->torn,
                "Also garble the last unsynced sector of each file (a torn write)");
  sub->add_option("--seed", o->seed,
                  "Keep a random subset of unsynced writes, drawn from this seed (replayable)")
      ->transform(IntegerInRange(0, std::numeric_limits<std::int64_t>::max()));
  return {sub, [&global, o] {
            RejectPostgres(global, "power-cut");
            lab::PowerCutReport r;
            try {
              r = lab::PowerCut(global.db, {o->torn, o->seed});
            } catch (const Error& e) {
              // A file that cannot be read or rewritten: not a bug, an unusable database.
              throw CommandError(ExitCode::kDbUnavailable, e.what());
            }
            if (!r.log_found)
              fmt::print("[power-cut] no power-loss log for {}: nothing was written through "
                         "--vfs powerloss since the last cut\n",
                         global.db);
            std::int64_t undone = 0, kept = 0, bytes = 0;
            for (const lab::FileUndo& f : r.files) {
              fmt::print("[power-cut] {}: undid {} writes ({} bytes), kept {}, torn {} bytes, "
                         "size {} -> {}\n",
                         f.path, f.changes_undone, f.bytes_undone, f.changes_kept, f.torn_bytes,
                         f.size_before, f.size_after);
              undone += f.changes_undone;
              kept += f.changes_kept;
              bytes += f.bytes_undone;
            }
            if (r.shm_removed) fmt::print("[power-cut] removed {}-shm\n", global.db);
            if (r.ignored_log_bytes > 0)
              fmt::print("[power-cut] ignored a torn log tail of {} bytes\n", r.ignored_log_bytes);
            fmt::print("[power-cut] files={} writes-undone={} writes-kept={} bytes-undone={} "
                       "wal-frames {} -> {} wal-commits {} -> {} frames-lost={} commits-lost={}\n",
                       r.files.size(), undone, kept, bytes, r.wal_before.frames,
                       r.wal_after.frames, r.wal_before.commits, r.wal_after.commits,
                       r.wal_frames_lost, r.wal_commits_lost);
            return ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
