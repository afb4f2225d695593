// What every subcommand shares: the global options and the shape of a
// subcommand (CLI11 wiring plus the function that runs it).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/exit_code.h"
#include "cli/usage_hints.h"
#include "lab/chapter/history.h"
#include "outbox/clock.h"
#include "outbox/error.h"
#include "outbox/kafka/handles.h"
#include "outbox/store.h"

namespace outbox::cli {

struct GlobalOptions {
  std::string db = "outbox.db";
  std::string brokers;  // empty: no broker configured
  std::string topic = "v2c7.outbox";
  std::string topic_template;  // --topic-template; empty: every record on topic
  std::vector<std::string> properties;  // -X name=value, as given
  std::string synchronous = "full";
  std::int64_t busy_timeout_ms = 5000;  // --busy-timeout
  std::string history;  // JSON-lines history file to append to; empty: none
  // The one clock of this process: every store, relay and history reads it.
  std::shared_ptr<Clock> clock = std::make_shared<SystemClock>();
  std::string process_name;  // the chosen subcommand, set by main after parsing; names history lanes
  std::string vfs = "unix";  // "powerloss": SQLite I/O goes through the power-loss shim
  // How the user runs the lab, for hints that quote a command: run.sh's $0 (it exports
  // OUTBOX_LAB_FRONTEND), or empty for outbox-lab called directly. Set by main.
  std::string frontend;

  // frontend and db, for CommandLine (cli/usage_hints.h).
  Invocation invocation() const { return {frontend, db}; }

  StoreOptions MakeStoreOptions() const;
  // Parsed -X properties. Throws ConfigError.
  std::vector<kafka::Property> ParsedProperties() const;
  // Throws ConfigError when no broker is configured.
  const std::string& RequireBrokers() const;
  // Throws ConfigError when brokers (as -X bootstrap.servers left it) is not a list
  // librdkafka reads as meant (BrokerListProblem, option_values.h); --brokers itself is
  // checked while parsing.
  void CheckBrokers() const;
  // The --history file opened for appending (recording this process as
  // process_name), or null. Throws ConfigError.
  std::unique_ptr<lab::History> OpenHistory() const;
};

// A subcommand: its CLI11 app and the function main() calls when it was chosen.
struct Command {
  Command(CLI::App* sub, std::function<ExitCode()> runner)
      : app(sub), run(std::move(runner)) {}

  CLI::App* app = nullptr;
  std::function<ExitCode()> run;
};

void AddGlobalOptions(CLI::App& app, GlobalOptions& global);

// CLI11 validator for counts (add with transform()): a whole number in [1, INT_MAX]
// (IntegerInRange, cli/option_values.h), so it fits an int, else "must be a positive integer
// (at most 2147483647), got '0'": a usage error (exit 2).
CLI::Validator PositiveInteger();

// An expected failure of a command (not a bug): main prints
// "outbox-lab: error: <message>" once and exits with code.
class CommandError : public outbox::Error {
 public:
  CommandError(ExitCode code, const std::string& message) : Error(message), code_(code) {}
  ExitCode code() const noexcept { return code_; }

 private:
  ExitCode code_;
};

// Throws CommandError kUnsupportedOnPostgres ("<command> does not run on PostgreSQL yet ...")
// when global.db is a postgresql:// URL: for the commands not yet ported to the PostgreSQL store
// (README, "PostgreSQL"), so they fail at once instead of treating the URL as a file name.
void RejectPostgres(const GlobalOptions& global, std::string_view command);

// One per file under src/cli/.
Command AddResetCommand(CLI::App& app, const GlobalOptions& global);
Command AddNaiveHoldCommand(CLI::App& app, const GlobalOptions& global);
Command AddNaiveSendFirstHoldCommand(CLI::App& app, const GlobalOptions& global);
Command AddRollbackCommand(CLI::App& app, const GlobalOptions& global);
Command AddWriteHoldCommand(CLI::App& app, const GlobalOptions& global);
Command AddPublishHoldCommand(CLI::App& app, const GlobalOptions& global);
Command AddPublishCommand(CLI::App& app, const GlobalOptions& global);
Command AddVerifyCommand(CLI::App& app, const GlobalOptions& global);
Command AddConsumeCommand(CLI::App& app, const GlobalOptions& global);
Command AddBrokerCommand(CLI::App& app, const GlobalOptions& global);
Command AddBrokerCtlCommand(CLI::App& app, const GlobalOptions& global);
Command AddRelayCommand(CLI::App& app, const GlobalOptions& global);
Command AddBatchLoopCommand(CLI::App& app, const GlobalOptions& global);
Command AddWriteCommand(CLI::App& app, const GlobalOptions& global);
Command AddFailpointsCommand(CLI::App& app, const GlobalOptions& global);
Command AddCheckCommand(CLI::App& app, const GlobalOptions& global);
Command AddStatusCommand(CLI::App& app, const GlobalOptions& global);
Command AddMetricsCommand(CLI::App& app, const GlobalOptions& global);
Command AddPurgeCommand(CLI::App& app, const GlobalOptions& global);
Command AddUnparkCommand(CLI::App& app, const GlobalOptions& global);
Command AddParkedCommand(CLI::App& app, const GlobalOptions& global);
Command AddBenchCommand(CLI::App& app, const GlobalOptions& global);
Command AddReportCommand(CLI::App& app, const GlobalOptions& global);
Command AddPowerCutCommand(CLI::App& app, const GlobalOptions& global);

}  // namespace outbox::cli
