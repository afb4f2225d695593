#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>
#include <optional>

#include "cli/command.h"
#include "cli/duration.h"
#include "lab/json_bytes.h"
#include "lab/loans.h"
#include "lab/reconciliation.h"

namespace outbox::cli {
namespace {

struct VerifyOptions {
  bool json = false;
  std::string expect;
  bool no_kafka = false;
  std::int64_t timeout_ms = 10000;  // --read-timeout
};

std::string DuplicateList(const lab::KafkaReconciliation& kafka) {
  if (kafka.duplicates.empty()) return "none";
  std::string text;
  for (const auto& [id, count] : kafka.duplicates)
    text += fmt::format("{}{} x{}", text.empty() ? "" : ", ", lab::EscapeBytes(id), count);
  return text;
}

void PrintText(const lab::DbSnapshot& db, const std::optional<lab::KafkaReconciliation>& kafka,
               const std::string& topic) {
  if (!kafka) return;
  fmt::print("[verify] kafka topic={} records={} distinct-event-ids={} duplicated-ids={} "
             "missing={} unexpected={}\n",
             topic, kafka->records, kafka->distinct_event_ids, kafka->duplicates.size(),
             kafka->missing.size(), kafka->unexpected.size());
  for (const auto& [id, count] : kafka->duplicates)
    fmt::print("[verify] duplicate {} x{}\n", lab::EscapeBytes(id), count);
  for (const auto& id : kafka->missing) fmt::print("[verify] missing {} (in outbox, not in Kafka)\n", lab::EscapeBytes(id));
  for (const auto& id : kafka->unexpected)
    fmt::print("[verify] unexpected {} (in Kafka, not in outbox)\n", lab::EscapeBytes(id));
  fmt::print("\n{:<26} {}\n", "reconciliation", "value");
  fmt::print("{:<26} {}\n", "business rows", db.business_loans);
  fmt::print("{:<26} {}\n", "outbox rows", db.outbox.total);
  fmt::print("{:<26} {}\n", "published=TRUE", db.outbox.published);
  fmt::print("{:<26} {}\n", "Kafka records", kafka->records);
  fmt::print("{:<26} {}\n", "Kafka distinct event ids", kafka->distinct_event_ids);
  fmt::print("{:<26} {}\n", "duplicated ids", DuplicateList(*kafka));
}

nlohmann::ordered_json ToJson(const lab::DbSnapshot& db,
                              const std::optional<lab::KafkaReconciliation>& kafka,
                              const std::string& topic) {
  nlohmann::ordered_json out;
  out["business_loan"] = db.business_loans;
  out["outbox"] = db.outbox.total;
  out["published"] = db.outbox.published;
  out["unpublished"] = db.outbox.unpublished;
  if (kafka) {
    nlohmann::ordered_json k;
    k["topic"] = topic;
    k["records"] = kafka->records;
    k["distinct_event_ids"] = kafka->distinct_event_ids;
    k["duplicates"] = nlohmann::ordered_json::object();
    for (const auto& [id, count] : kafka->duplicates) k["duplicates"][id] = count;
    k["missing"] = kafka->missing;
    k["unexpected"] = kafka->unexpected;
    out["kafka"] = k;
  } else {
    out["kafka"] = nullptr;
  }
  return out;
}

}  // namespace

Command AddVerifyCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "verify",
      "Count business, outbox, published and unpublished rows; with a broker, reconcile the "
      "outbox against every record of the topic");
  auto options = std::make_shared<VerifyOptions>();
  sub->add_flag("--json", options->json, "Print one JSON object");
  sub->add_option("--expect", options->expect,
                  "Fail (exit 1) unless these hold, e.g. business=5,outbox=5,published=5,"
                  "unpublished=0,kafka_records=8,kafka_distinct=5 (also kafka_duplicates, "
                  "kafka_missing, kafka_unexpected)")
      // Checked while parsing: a typo is a usage error (exit 2) and costs no topic read.
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            try {
              lab::ParseExpectations(text);
            } catch (const ConfigError& e) {
              return e.what();
            }
            return {};
          },
          "KEY=N,...", "Expectations"));
  sub->add_flag("--no-kafka", options->no_kafka, "Check the database only, even with a broker");
  AddReadTimeoutOption(*sub, options->timeout_ms);
  return {sub, [&global, options]() -> ExitCode {
            // Parse expectations first: a typo must not cost a topic read.
            std::map<std::string, std::int64_t> expected;
            if (!options->expect.empty()) expected = lab::ParseExpectations(options->expect);
            auto store = lab::OpenLabDatabase(global.db, global.MakeStoreOptions());
            const lab::DbSnapshot db = lab::TakeDbSnapshot(*store);
            if (!options->json)
              fmt::print("[verify] business_loan={} outbox={} published={} unpublished={}\n",
                         db.business_loans, db.outbox.total, db.outbox.published,
                         db.outbox.unpublished);
            std::fflush(stdout);
            std::optional<lab::KafkaReconciliation> kafka;
            if (!global.brokers.empty() && !options->no_kafka) {
              const auto records = lab::ReadTopic(
                  {global.brokers, global.topic, global.ParsedProperties(), static_cast<int>(options->timeout_ms)});
              kafka = lab::Reconcile(db.outbox_event_ids, records);
            }
            const auto mismatches = lab::CompareExpectations(expected, lab::ActualValues(db, kafka));
            if (options->json) {
              auto out = ToJson(db, kafka, global.topic);
              if (!expected.empty()) {
                out["expectations_met"] = mismatches.empty();
                out["mismatches"] = mismatches;
              }
              fmt::print("{}\n", lab::DumpJson(out));
            } else {
              PrintText(db, kafka, global.topic);
              for (const auto& line : mismatches) fmt::print("[verify] MISMATCH {}\n", line);
              if (!expected.empty() && mismatches.empty())
                fmt::print("[verify] all {} expectations hold\n", expected.size());
            }
            return mismatches.empty() ? ExitCode::kOk : ExitCode::kExpectationFailed;
          }};
}

}  // namespace outbox::cli
