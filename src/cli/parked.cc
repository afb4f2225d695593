#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "lab/broker/json_bytes.h"
#include "outbox/open_store.h"
#include "outbox/error.h"

namespace outbox::cli {

Command AddParkedCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "parked", "List parked rows and rows failing in backoff: attempts, last error, age; to "
                "decide what to unpark");
  struct Options {
    bool json = false;
    std::int64_t limit = 100;
  };
  auto o = std::make_shared<Options>();
  sub->add_flag("--json", o->json, "Print one JSON object");
  sub->add_option("--limit", o->limit, "Rows listed at most (the counts cover all)")
      ->transform(PositiveInteger())
      ->capture_default_str();
  return {sub, [&global, o]() -> ExitCode {
            auto store = OpenStore(global.db, OpenMode::kReadOnly, global.MakeStoreOptions());
            const std::int64_t now_ms = store->clock().EpochMs();
            const TroubledRows troubled = store->ListTroubled(now_ms, o->limit);
            if (o->json) {
              nlohmann::ordered_json out;
              out["parked"] = troubled.parked;
              out["failing"] = troubled.failing;
              out["rows"] = nlohmann::ordered_json::array();
              for (const TroubledRow& row : troubled.rows)
                out["rows"].push_back({{"id", row.id},
                                       {"event_id", row.event_id},
                                       {"aggregate_id", row.aggregate_id},
                                       {"event_type", row.event_type},
                                       {"state", row.parked ? "parked" : "backoff"},
                                       {"attempts", row.attempts},
                                       {"last_error", row.last_error},
                                       {"age_ms", row.age_ms},
                                       {"next_attempt_in_ms",
                                        row.parked ? 0 : std::max<std::int64_t>(
                                                             0, row.next_attempt_at_ms - now_ms)}});
              fmt::print("{}\n", lab::DumpJson(out));
              return ExitCode::kOk;
            }
            for (const TroubledRow& row : troubled.rows)
              fmt::print("[parked] id={} state={} attempts={} age-ms={} event-id={} aggregate={} "
                         "last-error={}\n",
                         row.id, row.parked ? "parked" : "backoff", row.attempts, row.age_ms,
                         lab::EscapeBytes(row.event_id), lab::EscapeBytes(row.aggregate_id),
                         lab::EscapeBytes(row.last_error));
            fmt::print("[parked] parked={} failing={} listed={}\n", troubled.parked,
                       troubled.failing, troubled.rows.size());
            return ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
