#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "outbox/failpoint.h"

namespace outbox::cli {

Command AddFailpointsCommand(CLI::App& app, const GlobalOptions&) {
  CLI::App* sub = app.add_subcommand(
      "failpoints",
      "List every failpoint and what is durable when the process stops there. Enable with "
      "OUTBOX_FAILPOINTS='name=[P%][N*]action[(arg)][->...];...', actions off, kill, hold, "
      "pause (until SIGUSR1), sleep(ms), error");
  auto json = std::make_shared<bool>(false);
  sub->add_flag("--json", *json,
                "Print a JSON array of {name, durable, once} (once: reached at most once per "
                "process, so only hit 1 can fire)");
  return {sub, [json]() -> ExitCode {
            if (*json) {
              nlohmann::ordered_json out = nlohmann::ordered_json::array();
              for (const auto& fp : AllFailpoints())
                out.push_back({{"name", fp.name}, {"durable", fp.durable}, {"once", fp.once}});
              fmt::print("{}\n", out.dump());
            } else {
              for (const auto& fp : AllFailpoints()) fmt::print("{:<30} durable: {}\n", fp.name, fp.durable);
            }
            return ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
