#include <fmt/format.h>

#include "cli/command.h"
#include "lab/topic_reader.h"

namespace outbox::cli {

Command AddConsumeCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "consume",
      "Print the whole topic as key,value lines, like the chapter's kafka-console-consumer "
      "--from-beginning, then exit");
  struct Options {
    bool with_offsets = false;
    int timeout_ms = 10000;
  };
  auto options = std::make_shared<Options>();
  sub->add_flag("--with-offsets", options->with_offsets,
                "Prefix each line with partition=P offset=O");
  sub->add_option("--timeout-ms", options->timeout_ms, "Bound on reading the topic, ms")
      ->check(PositiveInteger())
      ->capture_default_str();
  return {sub, [&global, options]() -> ExitCode {
            const auto records = lab::ReadTopic({global.RequireBrokers(), global.topic,
                                                 global.ParsedProperties(), options->timeout_ms});
            for (const auto& r : records) {
              if (options->with_offsets) fmt::print("partition={} offset={} ", r.partition, r.offset);
              fmt::print("{},{}\n", r.key, r.value);
            }
            return ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
