#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "lab/loans.h"
#include "outbox/error.h"

namespace outbox::cli {
namespace {

OutboxStatus ReadStatus(const GlobalOptions& global) {
  Store store(global.db, global.MakeStoreOptions(), OpenMode::kExisting);
  return store.Status(store.clock().EpochMs());
}

// Prometheus text exposition format, version 0.0.4.
std::string PrometheusText(const OutboxStatus& s) {
  std::string out;
  auto gauge = [&out](const char* name, const char* help, double value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, value);
  };
  gauge("outbox_unpublished_rows", "Rows not yet published, parked rows included.", s.unpublished);
  gauge("outbox_pending_rows", "Rows not yet published and not parked.", s.pending);
  gauge("outbox_oldest_pending_age_seconds",
        "Age of the oldest pending row; alert on this, not on the row count.",
        static_cast<double>(s.oldest_pending_age_ms) / 1000.0);
  gauge("outbox_backoff_rows", "Unpublished rows waiting for their next attempt.", s.in_backoff);
  gauge("outbox_parked_rows", "Rows parked after max attempts; need outbox-lab unpark.", s.parked);
  gauge("outbox_claimed_rows", "Unpublished rows under an unexpired relay claim.", s.claimed);
  gauge("outbox_published_rows", "Published rows still in the outbox table (until purge).",
        s.published);
  gauge("outbox_archived_rows", "Rows in outbox_archive.", s.archived);
  return out;
}

}  // namespace

Command AddStatusCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "status", "Backlog of the outbox: unpublished (pending + parked), pending, oldest pending "
                "age, backoff, parked, claimed, published");
  auto json = std::make_shared<bool>(false);
  sub->add_flag("--json", *json, "Print one JSON object");
  return {sub, [&global, json]() -> ExitCode {
            const OutboxStatus s = ReadStatus(global);
            if (*json) {
              nlohmann::ordered_json out;
              out["unpublished"] = s.unpublished;
              out["pending"] = s.pending;
              out["oldest_pending_age_ms"] = s.oldest_pending_age_ms;
              out["in_backoff"] = s.in_backoff;
              out["parked"] = s.parked;
              out["claimed"] = s.claimed;
              out["published"] = s.published;
              out["archived"] = s.archived;
              fmt::print("{}\n", out.dump());
            } else {
              fmt::print("[status] unpublished={} pending={} oldest-pending-age-ms={} "
                         "in-backoff={} parked={} claimed={} published={} archived={}\n",
                         s.unpublished, s.pending, s.oldest_pending_age_ms, s.in_backoff,
                         s.parked, s.claimed, s.published, s.archived);
            }
            return ExitCode::kOk;
          }};
}

Command AddMetricsCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "metrics", "The status numbers in Prometheus text format, to stdout or a node_exporter "
                 "textfile");
  auto textfile = std::make_shared<std::string>();
  sub->add_option("--textfile", *textfile,
                  "Write to this .prom file atomically (for node_exporter's textfile collector)");
  return {sub, [&global, textfile]() -> ExitCode {
            const std::string text = PrometheusText(ReadStatus(global));
            if (textfile->empty()) {
              fmt::print("{}", text);
              return ExitCode::kOk;
            }
            // node_exporter may read at any moment: never let it see half a file.
            const std::string tmp = *textfile + ".tmp";
            {
              std::ofstream out(tmp, std::ios::trunc);
              out << text;
              if (!out.flush()) ThrowSystemError(fmt::format("write '{}'", tmp), errno);
            }
            if (std::rename(tmp.c_str(), textfile->c_str()) != 0)
              ThrowSystemError(fmt::format("rename '{}' to '{}'", tmp, *textfile), errno);
            return ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
