#include <fmt/format.h>

#include <limits>

#include "cli/command.h"
#include "cli/duration.h"
#include "cli/option_values.h"
#include "outbox/parse_integer.h"
#include "outbox/error.h"
#include "outbox/pg/connection.h"
#include "outbox/topic_template.h"

namespace outbox::cli {

void AddGlobalOptions(CLI::App& app, GlobalOptions& global) {
  app.add_option("--db", global.db, "SQLite database file (the chapter's -Doutbox.db), or a postgresql:// URL "
                 "(docs/postgresql.md)")
      ->envname("OUTBOX_DB")
      ->check(CLI::Validator([](std::string& db) { return DbPathProblem(db); }, "PATH", "DbPath"))
      ->capture_default_str();
  app.add_option("--brokers", global.brokers,
                 "Kafka bootstrap servers, e.g. 127.0.0.1:9092; empty means no broker")
      ->envname("KAFKA_BOOTSTRAP_SERVERS")
      ->check(CLI::Validator([](std::string& brokers) { return BrokerListProblem(brokers); },
                             "HOST:PORT", "BrokerList"));
  app.add_option("--topic", global.topic,
                 "Kafka topic: 1 to 249 characters of a-z, A-Z, 0-9, '.', '_' and '-'")
      ->envname("OUTBOX_TOPIC")
      ->check(CLI::Validator([](std::string& topic) { return TopicNameProblem(topic); }, "TOPIC",
                             "TopicName"))
      ->capture_default_str();
  // Routing (docs/routing-and-headers.md): the relay sends by it, and verify, check, consume
  // and report read every topic it gives the outbox's rows.
  app.add_option("--topic-template", global.topic_template,
                 "Topic per event, e.g. 'outbox.{event_type}': relay sends each row to the "
                 "template filled with its event type (a row whose topic would be illegal is "
                 "parked); verify, check, consume and report read every topic the outbox's rows "
                 "map to. --topic then names only the exactly-once state topic")
      ->envname("OUTBOX_TOPIC_TEMPLATE")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            try {
              TopicTemplate::Parse(text);
              return {};
            } catch (const ConfigError& e) {
              return e.what();
            }
          },
          "TEMPLATE", "TopicTemplate"));
  app.add_option("-X", global.properties,
                 "librdkafka property name=value, repeatable (as kcat -X); unknown names are errors. "
                 "Records go out uncompressed unless -X compression.type=lz4|zstd|snappy|gzip "
                 "(readers then need that codec; kafkajs has only gzip built in)")
      ->type_name("PROP=VALUE");
  app.add_option("--synchronous", global.synchronous,
                 "SQLite PRAGMA synchronous: off|normal|full|extra. A commit survives kill -9 at "
                 "any setting; below full, power loss can undo it")
      ->check(CLI::IsMember({"off", "normal", "full", "extra"}))
      ->capture_default_str();
  app.add_option("--history", global.history,
                 "Append a JSON-lines history of business transactions, sends and marks here "
                 "(for `check --history`)")
      ->envname("OUTBOX_HISTORY");
  app.add_option("--vfs", global.vfs,
                 "SQLite VFS: unix, or powerloss to log unsynced writes for `power-cut` and take "
                 "the vfs.* failpoints")
      ->envname("OUTBOX_VFS")
      ->check(CLI::IsMember({"unix", "powerloss"}))
      ->capture_default_str();
  AddDurationOption(app, "--busy-timeout", global.busy_timeout_ms,
                    "How long to wait for another writer's lock (sqlite3_busy_timeout)", 0,
                    3'600'000, "--busy-timeout-ms");
  // Every client applies -X last, so -X bootstrap.servers=... is the address really used: make
  // it the brokers value here, the one place, so that every message names that address.
  app.parse_complete_callback([&global] {
    for (const std::string& text : global.properties) {
      try {
        const kafka::Property property = kafka::ParseProperty(text);
        if (property.first == "bootstrap.servers") global.brokers = property.second;
      } catch (const ConfigError&) {
        // Reported with exit 3 by main, before anything runs.
      }
    }
  });
}

void RejectPostgres(const GlobalOptions& global, std::string_view command) {
  if (!pg::IsPostgresUrl(global.db)) return;
  throw CommandError(ExitCode::kUnsupportedOnPostgres,
                     fmt::format("{} does not run on PostgreSQL yet (--db {}); give an SQLite "
                                 "file path instead",
                                 command, pg::RedactPassword(global.db)));
}

CLI::Validator PositiveInteger() { return IntegerInRange(1, std::numeric_limits<int>::max()); }

StoreOptions GlobalOptions::MakeStoreOptions() const {
  StoreOptions options;
  options.synchronous = ParseSynchronous(synchronous);
  options.busy_timeout_ms = static_cast<int>(busy_timeout_ms);
  options.clock = clock.get();
  return options;
}

std::vector<kafka::Property> GlobalOptions::ParsedProperties() const {
  std::vector<kafka::Property> parsed;
  for (const std::string& text : properties) parsed.push_back(kafka::ParseProperty(text));
  return parsed;
}

std::unique_ptr<lab::History> GlobalOptions::OpenHistory() const {
  if (history.empty()) return nullptr;
  return std::make_unique<lab::History>(history, *clock, process_name);
}

const std::string& GlobalOptions::RequireBrokers() const {
  if (brokers.empty())
    throw ConfigError(
        "no broker configured: pass --brokers HOST:PORT or set KAFKA_BOOTSTRAP_SERVERS "
        "(./run.sh starts an embedded broker for you)");
  return brokers;
}

void GlobalOptions::CheckBrokers() const {
  // -X bootstrap.servers=... replaces --brokers after the parse (above), unchecked there.
  if (const std::string problem = BrokerListProblem(brokers); !problem.empty())
    throw ConfigError("-X bootstrap.servers: " + problem);
}

}  // namespace outbox::cli
