// outbox-lab: the one binary. The only place that catches exceptions and
// chooses exit codes (cli/exit_code.h).
#include <fmt/format.h>
#include <librdkafka/rdkafka.h>
#include <libpq-fe.h>
#include <sqlite3.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <optional>
#include <vector>

#include "cli/command.h"
#include "cli/exit_code.h"
#include "outbox/error.h"
#include "lab/faults/lab_failpoints.h"
#include "lab/faults/powerloss_vfs.h"
#include "outbox/failpoint.h"
#include "outbox/pg/connection.h"

namespace {

using outbox::cli::ExitCode;

ExitCode ForDbError(const outbox::DbError& e) {
  switch (e.primary_code()) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return ExitCode::kDbBusy;
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT: return ExitCode::kDbNotSqlite;
    case SQLITE_READONLY: return ExitCode::kDbReadOnly;
    case SQLITE_CANTOPEN:
    case SQLITE_PERM: return ExitCode::kDbUnavailable;
    default: return ExitCode::kDbError;
  }
}

// SQLSTATE classes: https://www.postgresql.org/docs/15/errcodes-appendix.html
ExitCode ForPgError(const outbox::pg::PgError& e) {
  const std::string& state = e.sqlstate();
  if (e.connection_lost() || state == "3D000" || state == "28000" || state == "28P01")
    return ExitCode::kDbUnavailable;  // unreachable, gone, no such database, login refused
  if (state == "42P01" || state == "3F000") return ExitCode::kSchemaMissing;  // no table / schema
  if (state == "55P03" || state == "40P01" || state == "40001") return ExitCode::kDbBusy;
  if (state == "25006") return ExitCode::kDbReadOnly;  // read_only_sql_transaction (a standby)
  return ExitCode::kDbError;
}

// One message for a corrupt database file, whichever command met it: what the file is and how
// to recover, never the SQL that tripped over it.
std::string CorruptMessage(const std::string& db, const outbox::DbError& e) {
  return fmt::format("database '{}' is corrupt ({}): restore it from a backup, or see the damage "
                     "with `sqlite3 '{}' 'PRAGMA integrity_check'` (`.recover` may save rows); "
                     "`reset` with another --db path starts a new run in a fresh file",
                     db, e.reason(), db);
}

int Fail(ExitCode code, const char* message) {
  // One line, whatever the message holds: librdkafka's errstr ends with a newline of its own.
  std::string line(message);
  for (char& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  while (!line.empty() && line.back() == ' ') line.pop_back();
  fmt::print(stderr, "outbox-lab: error: {}\n", line);
  return static_cast<int>(code);
}

// SQLite says only "disk I/O error"; the power-loss shim knows which file and why.
std::string WithFault(const outbox::DbError& e,
                      const std::optional<outbox::lab::PowerlossVfs>& powerloss) {
  const std::string fault = powerloss ? powerloss->LastFault() : std::string();
  const int primary = e.primary_code();
  if (fault.empty() || (primary != SQLITE_IOERR && primary != SQLITE_FULL)) return e.what();
  return fmt::format("{}: {}", e.what(), fault);
}

// --vfs powerloss and --synchronous are SQLite's: on a postgresql:// --db they would change
// nothing, so they fail instead of being ignored (exit 18). --synchronous full is the default and
// passes. The server's own setting goes in the URL: options=-csynchronous_commit%3Doff.
void RejectSqliteOnlyOptions(const outbox::cli::GlobalOptions& global) {
  if (!outbox::pg::IsPostgresUrl(global.db)) return;
  if (global.vfs != "unix")
    throw outbox::cli::CommandError(ExitCode::kUnsupportedOnPostgres,
                                    fmt::format("--vfs {} is SQLite's I/O layer; it does not apply "
                                                "to a PostgreSQL --db",
                                                global.vfs));
  if (global.synchronous != "full")
    throw outbox::cli::CommandError(
        ExitCode::kUnsupportedOnPostgres,
        fmt::format("--synchronous {} is SQLite's PRAGMA; on PostgreSQL put the server's setting "
                    "in the URL (options=-csynchronous_commit%3Doff)",
                    global.synchronous));
}

// validate_only: check the command line as far as it can be checked without touching anything
// (the parse, -X, failpoints, SQLite-only options) and return 0 without running the command;
// run.sh asks this (OUTBOX_LAB_VALIDATE_ONLY=1) before it starts or stops a broker for a command.
int RunCommand(const outbox::cli::Command& command, const outbox::cli::GlobalOptions& global,
               bool validate_only) {
  // The default VFS while the command runs, so every connection opens through it.
  std::optional<outbox::lab::PowerlossVfs> powerloss;
  try {
    // Reject an unknown -X property or failpoint spec before anything touches the database.
    outbox::kafka::MakeConf(global.ParsedProperties());
    global.CheckBrokers();
    outbox::lab::RegisterLabFailpoints();
    outbox::ConfigureFailpointsFromEnv();
    RejectSqliteOnlyOptions(global);
    if (global.vfs == outbox::lab::PowerlossVfs::kName) powerloss.emplace();
    else outbox::lab::RequireNoVfsFailpoints();
    if (validate_only) return static_cast<int>(ExitCode::kOk);
    return static_cast<int>(command.run());
  } catch (const outbox::cli::CommandError& e) {
    return Fail(e.code(), e.what());
  } catch (const outbox::SchemaMissingError& e) {
    return Fail(ExitCode::kSchemaMissing,
                fmt::format("{}; run `{}` first", e.what(),
                            outbox::cli::CommandLine(global.invocation(), "reset"))
                    .c_str());
  } catch (const outbox::DbError& e) {
    if (e.primary_code() == SQLITE_CORRUPT && !powerloss)
      return Fail(ExitCode::kDbNotSqlite, CorruptMessage(global.db, e).c_str());
    return Fail(ForDbError(e), WithFault(e, powerloss).c_str());
  } catch (const outbox::pg::PgError& e) {
    return Fail(ForPgError(e), e.what());
  } catch (const outbox::KafkaError& e) {
    if (e.code() == outbox::kProducerFatalCode) return Fail(ExitCode::kProducerFatal, e.what());
    return Fail(ExitCode::kBrokerUnavailable, e.what());
  } catch (const outbox::FailpointError& e) {
    return Fail(ExitCode::kFailpoint, e.what());
  } catch (const outbox::SystemError& e) {
    return Fail(ExitCode::kSystem, e.what());
  } catch (const outbox::ConfigError& e) {
    return Fail(ExitCode::kConfig, e.what());
  } catch (const std::exception& e) {
    return Fail(ExitCode::kInternal, e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace outbox::cli;
  CLI::App app{
      "outbox-lab: a crash-injection lab for the transactional outbox pattern (chapter 7.1).\n"
      "Writes loans and their outbox events to an SQLite file, publishes them to Kafka, and\n"
      "reconciles both after kill -9.",
      "outbox-lab"};
  app.require_subcommand(1);
  app.fallthrough();  // global options may follow the subcommand
  // The libraries' versions as loaded at run time: they decide the broker's and the store's
  // behaviour (the embedded broker is librdkafka's mock cluster).
  app.set_version_flag(
      "--version",
      [] {
        const int pq = PQlibVersion();
        return fmt::format("outbox-lab {} (librdkafka {}, SQLite {}, libpq {}.{})",
                           OUTBOX_LAB_VERSION, rd_kafka_version_str(), sqlite3_libversion(),
                           pq / 10000, pq % 10000);
      },
      "Print the version of outbox-lab and of the librdkafka, SQLite and libpq it runs with, and "
      "exit");
  GlobalOptions global;
  if (const char* frontend = std::getenv("OUTBOX_LAB_FRONTEND")) global.frontend = frontend;
  AddGlobalOptions(app, global);
  const std::vector<Command> commands = {
      AddResetCommand(app, global),       AddNaiveHoldCommand(app, global),
      AddNaiveSendFirstHoldCommand(app, global),
      AddRollbackCommand(app, global),    AddWriteHoldCommand(app, global),
      AddPublishHoldCommand(app, global), AddPublishCommand(app, global),
      AddVerifyCommand(app, global),      AddConsumeCommand(app, global),
      AddBrokerCommand(app, global),      AddBrokerCtlCommand(app, global),
      AddRelayCommand(app, global),       AddWriteCommand(app, global),
      AddFailpointsCommand(app, global),  AddCheckCommand(app, global),
      AddStatusCommand(app, global),      AddMetricsCommand(app, global),
      AddPurgeCommand(app, global),       AddUnparkCommand(app, global),
      AddBenchCommand(app, global),       AddReportCommand(app, global),
      AddPowerCutCommand(app, global),
      AddParkedCommand(app, global),      AddBatchLoopCommand(app, global),
  };
  ShowGlobalOptionsInSubcommandHelp(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::vector<std::string> args(argv, argv + argc);
    return Fail(ExitCode::kUsage, ExplainParseError(app, e, args, global.invocation()).c_str());
  }

  const Command* chosen = nullptr;
  for (const Command& command : commands)
    if (command.app->parsed()) chosen = &command;
  if (!chosen) return Fail(ExitCode::kUsage, "a subcommand is required (see --help for the list)");
  global.process_name = chosen->app->get_name();
  const char* validate_only = std::getenv("OUTBOX_LAB_VALIDATE_ONLY");
  return RunCommand(*chosen, global, validate_only && std::string(validate_only) == "1");
}
