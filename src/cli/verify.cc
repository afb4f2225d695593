#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sqlite3.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_set>

#include "cli/command.h"
#include "cli/duration.h"
#include "cli/option_values.h"
#include "lab/broker/json_bytes.h"
#include "lab/chapter/loans.h"
#include "lab/check/reconciliation.h"
#include "lab/check/verdict_text.h"
#include "cli/wal_relay_run.h"
#include "outbox/wal_progress.h"
#include "outbox/error.h"
#include "outbox/store.h"

namespace outbox::cli {
namespace {

struct VerifyOptions {
  bool json = false;
  std::string expect;
  bool no_kafka = false;
  std::int64_t timeout_ms = 10000;  // --read-timeout
  bool ids = false;
  std::string lang = "en";
  std::string business_table;  // --business-table
  std::string business_key;    // --business-key
  std::string isolation = "read_committed";  // --isolation
};

void PrintText(const lab::DbSnapshot& db, const std::optional<lab::KafkaReconciliation>& kafka,
               const std::vector<lab::PartitionExtent>& partitions, const std::string& topic,
               const VerifyOptions& o, lab::Lang lang) {
  if (!kafka) return;
  const auto list = [&o](const std::vector<std::string>& ids) { return lab::ShortIdList(ids, o.ids); };
  // One word per thing: not sent yet (unpublished, the relay owes it), lost (published, gone
  // from a complete log), cannot judge (retention, a restarted in-memory broker).
  const std::size_t cannot_judge = kafka->retention_unknown.size() + kafka->restart_unknown.size();
  fmt::print("[verify] kafka topic={} records={} distinct-event-ids={} duplicated-ids={} "
             "not-sent-yet={} lost={}{} unexpected={}\n",
             topic, kafka->records, kafka->distinct_event_ids, kafka->duplicates.size(),
             kafka->unsent.size(), kafka->lost.size(),
             cannot_judge ? fmt::format(" cannot-judge={}", cannot_judge) : std::string(),
             kafka->unexpected.size());
  // lost= counts published events missing from Kafka; a loan with no outbox row is lost before
  // any intent to send, and the closing line says so: say here why lost= does not count it.
  if (db.orphan_loans > 0)
    fmt::print("[verify] lost before the outbox (a loan committed without an outbox row: no "
               "event to send, so not in lost= above): {}\n",
               db.orphan_loans);
  if (kafka->other_run_records > 0)
    fmt::print("[verify] other runs' records on the topic: {} (another database or an earlier "
               "reset; not counted)\n",
               kafka->other_run_records);
  for (const lab::PartitionExtent& p : partitions)
    if (p.log_start > 0)
      fmt::print("[verify] broker retention: partition {} starts at offset {} (offsets 0..{} were "
                 "dropped)\n",
                 p.partition, p.log_start, p.log_start - 1);
  for (const lab::PartitionExtent& p : partitions)
    if (p.compacted > 0)
      fmt::print("[verify] compacted topic (cleanup.policy=compact): partition {} holds no record "
                 "at {} of its offsets {}..{} (compaction keeps a key's last record only)\n",
                 p.partition, p.compacted, p.log_start, p.end - 1);
  const std::size_t shown = o.ids ? kafka->duplicates.size()
                                  : std::min(kafka->duplicates.size(), lab::kIdsShown);
  for (std::size_t i = 0; i < shown; ++i)
    fmt::print("[verify] duplicate {} x{} {}\n", lab::EscapeBytes(kafka->duplicates[i].first),
               kafka->duplicates[i].second, lab::DuplicateNote(lang));
  if (shown < kafka->duplicates.size())
    fmt::print("[verify] ... and {} more duplicated ids (--ids prints all)\n",
               kafka->duplicates.size() - shown);
  // Parked rows are unpublished too, but the relay sends them only after an unpark.
  const std::unordered_set<std::string> parked(db.parked_event_ids.begin(),
                                               db.parked_event_ids.end());
  std::vector<std::string> will_send;
  std::vector<std::string> parked_unsent;
  for (const std::string& id : kafka->unsent)
    (parked.count(id) ? parked_unsent : will_send).push_back(id);
  if (!will_send.empty())
    fmt::print("[verify] not sent yet (unpublished: the relay will send them): {}\n",
               list(will_send));
  if (!parked_unsent.empty())
    fmt::print("[verify] not sent yet and parked (sent only after `outbox-lab unpark`): {}\n",
               list(parked_unsent));
  if (!kafka->lost.empty())
    fmt::print("[verify] lost (marked published, not in Kafka): {}\n", list(kafka->lost));
  if (!kafka->restart_unknown.empty())
    fmt::print("[verify] cannot judge (broker restarted): {}: {}\n",
               lab::BrokerRestartReason(kafka->broker_restart), list(kafka->restart_unknown));
  else if (kafka->broker_restart.restarted)
    fmt::print("[verify] note: {}\n", lab::BrokerRestartNote(kafka->broker_restart));
  if (!kafka->retention_unknown.empty())
    fmt::print("[verify] cannot judge (broker retention; published, not in what is left): {}\n",
               list(kafka->retention_unknown));
  if (kafka->lost_beyond_retention > 0)
    fmt::print("[verify] lost: at least {} of these: the broker dropped only {} offsets\n",
               kafka->lost_beyond_retention, kafka->dropped_offsets);
  if (!kafka->unexpected.empty())
    fmt::print("[verify] unexpected (in Kafka, not in the outbox): {}\n", list(kafka->unexpected));
  if (!kafka->committed_during_read.empty())
    fmt::print("[verify] committed while the topic was read (a live writer; their records are in "
               "records= above, not in unexpected=): {}\n",
               list(kafka->committed_during_read));
  if (!kafka->marked_during_read.empty())
    fmt::print("[verify] marked while the topic was read (a live relay; in Kafka, and not sent "
               "again): {}\n",
               list(kafka->marked_during_read));
  fmt::print("\n{}", lab::ReconciliationTable(db, *kafka, lang, o.ids));
}

// verify --json's object; aborted_visible: the topic was read with read_uncommitted.
nlohmann::ordered_json ToJson(const lab::DbSnapshot& db,
                              const std::optional<lab::KafkaReconciliation>& kafka,
                              const std::vector<lab::PartitionExtent>& partitions,
                              const std::string& topic, lab::Lang lang, bool aborted_visible) {
  nlohmann::ordered_json out;
  out["business_loan"] = db.business_loans;
  out["atomicity_skipped"] = db.atomicity_skipped;
  out["outbox"] = db.outbox.total;
  out["published"] = db.outbox.published;
  out["unpublished"] = db.outbox.unpublished;
  out["archived_or_purged"] = db.archived_event_ids.size();
  out["run_id"] = db.run_id;
  if (kafka) {
    nlohmann::ordered_json k;
    k["topic"] = topic;
    k["records"] = kafka->records;
    k["distinct_event_ids"] = kafka->distinct_event_ids;
    k["duplicates"] = nlohmann::ordered_json::object();
    for (const auto& [id, count] : kafka->duplicates) k["duplicates"][id] = count;
    k["missing"] = kafka->missing;
    k["unexpected"] = kafka->unexpected;
    k["committed_during_read"] = kafka->committed_during_read;
    k["marked_during_read"] = kafka->marked_during_read;
    k["unsent"] = kafka->unsent;
    k["parked"] = db.parked_event_ids;
    k["sent_unmarked"] = kafka->sent_unmarked;
    k["lost"] = kafka->lost;
    k["retention_unknown"] = kafka->retention_unknown;
    k["lost_beyond_retention"] = kafka->lost_beyond_retention;
    k["restart_unknown"] = kafka->restart_unknown;
    k["other_run_records"] = kafka->other_run_records;
    k["partitions"] = nlohmann::ordered_json::array();
    for (const lab::PartitionExtent& p : partitions)
      k["partitions"].push_back({{"partition", p.partition}, {"log_start", p.log_start},
                                 {"end", p.end}, {"compacted", p.compacted}});
    out["kafka"] = k;
  } else {
    out["kafka"] = nullptr;
  }
  out["meaning"] =
      lab::ExplainReconciliation(db, kafka ? &*kafka : nullptr, lang, aborted_visible);
  return out;
}

}  // namespace

Command AddVerifyCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "verify",
      "Count business, outbox, published and unpublished rows; with a broker, reconcile the "
      "outbox against this run's records of the topic (header run_id); end with one line "
      "saying what the numbers mean");
  auto options = std::make_shared<VerifyOptions>();
  sub->add_flag("--json", options->json, "Print one JSON object");
  AddIsolationOption(*sub, options->isolation);
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
  sub->add_flag("--ids", options->ids,
                "Print every id of a list (default: the first 10 and how many more)");
  sub->add_option("--lang", options->lang,
                  "Language of the closing line and the final table: en or zh (the chapter's "
                  "terms: 账目, 数值, 业务表行数 ...)")
      ->transform(LanguageName())
      ->envname("OUTBOX_LANG")
      ->capture_default_str();
  AddReadTimeoutOption(*sub, options->timeout_ms);
  AddBusinessTableOptions(*sub, options->business_table, options->business_key);
  return {sub, [&global, options]() -> ExitCode {
            // Parse expectations first: a typo must not cost a topic read.
            std::map<std::string, std::int64_t> expected;
            if (!options->expect.empty()) expected = lab::ParseExpectations(options->expect);
            const lab::Lang lang = lab::ParseLang(options->lang);
            auto store = lab::OpenLabStore(global.db, global.MakeStoreOptions(), OpenMode::kReadOnly);
            const lab::BusinessTable business{options->business_table, options->business_key};
            // A quick integrity check first: a corrupt file must not pass for a run's numbers.
            if (store->backend() == Backend::kSqlite) {
              const std::string answer = static_cast<Store&>(*store).QuickCheck();
              if (answer != "ok") throw DbError(fmt::format("PRAGMA quick_check: {}", answer),
                                                SQLITE_CORRUPT, answer);
            }
            // The WAL relay marks no row: where it has a slot, the slot says what is pending.
            std::optional<WalProgress> wal;
            if (store->backend() == Backend::kPostgres) wal = ReadWalProgress(global.db);
            const lab::DbSnapshot db = lab::TakeDbSnapshot(
                *store, options->business_table.empty() ? nullptr : &business,
                wal ? &*wal : nullptr);
            if (!options->json && wal) PrintWalProgress("verify", *wal);
            if (!options->json && db.atomicity_skipped)
              fmt::print("[verify] atomicity skipped: business_loan is empty, so these events "
                         "come from another application; outbox reconciled against Kafka only "
                         "(--business-table TABLE --business-key COLUMN names its table)\n");
            if (!options->json)
              fmt::print("[verify] business_loan={} outbox={} published={} unpublished={}{}\n",
                         db.business_loans, db.outbox.total, db.outbox.published,
                         db.outbox.unpublished,
                         db.archived_event_ids.empty()
                             ? std::string()
                             : fmt::format(" archived-or-purged={} (published, then removed "
                                           "by purge)",
                                           db.archived_event_ids.size()));
            std::fflush(stdout);
            std::optional<lab::KafkaReconciliation> kafka;
            std::vector<lab::PartitionExtent> partitions;
            std::string topics_read = global.topic;
            if (!global.brokers.empty() && !options->no_kafka) {
              // Every topic the run used (--topic-template), else --topic.
              const lab::TopicLog log = lab::ReadTopicLogs(
                  {global.brokers, global.topic,
                   WithIsolation(global.ParsedProperties(), options->isolation),
                   static_cast<int>(options->timeout_ms), /*wait_for_open_transactions=*/true},
                  lab::TopicsOfRun(*store, global.topic, global.topic_template));
              topics_read = log.topic;
              // A restarted in-memory broker lost the topic with its records: cannot judge
              // (exit 16, below), not a wrong --topic.
              if (!lab::JudgeBrokerRestart(db.broker_incarnations, log.broker_incarnation).restarted)
                lab::RequireTopicIfPublished(
                    log, db.outbox.published,
                    std::count_if(
                        log.records.begin(), log.records.end(),
                        [&](const lab::TopicRecord& r) { return r.run_id == db.run_id; }));
              kafka = lab::Reconcile(db, log);
              // The database was read first: records of rows committed since are no phantoms.
              if (!kafka->unexpected.empty() || !kafka->sent_unmarked.empty())
                lab::SetAsideCommittedDuringRead(
                    *kafka, lab::TakeDbSnapshot(
                                *store, options->business_table.empty() ? nullptr : &business,
                                wal ? &*wal : nullptr));
              partitions = log.partitions;
            }
            const auto mismatches = lab::CompareExpectations(expected, lab::ActualValues(db, kafka));
            // Records an in-memory broker took with it, or that retention may have dropped: no
            // number about them means anything (unless more are missing than were dropped).
            const bool cannot_judge =
                kafka && (!kafka->restart_unknown.empty() ||
                          (!kafka->retention_unknown.empty() && kafka->lost_beyond_retention == 0));
            if (options->json) {
              auto out = ToJson(db, kafka, partitions, topics_read, lang,
                                options->isolation == "read_uncommitted");
              if (!expected.empty()) {
                out["expectations_met"] = mismatches.empty();
                out["mismatches"] = mismatches;
              }
              fmt::print("{}\n", lab::DumpJson(out));
            } else {
              PrintText(db, kafka, partitions, topics_read, *options, lang);
              for (const auto& line : mismatches) fmt::print("[verify] MISMATCH {}\n", line);
              if (!expected.empty() && mismatches.empty()) {
                if (cannot_judge)
                  fmt::print("[verify] the {} expectations are not judged: some events cannot be "
                             "(exit 16)\n",
                             expected.size());
                else
                  fmt::print("[verify] all {} expectations hold\n", expected.size());
              }
              fmt::print("[verify] {}\n",
                         lab::ExplainReconciliation(db, kafka ? &*kafka : nullptr, lang,
                                                    options->isolation == "read_uncommitted"));
            }
            if (cannot_judge) return ExitCode::kCannotJudge;
            return mismatches.empty() ? ExitCode::kOk : ExitCode::kExpectationFailed;
          }};
}

}  // namespace outbox::cli
