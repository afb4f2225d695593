#include <fmt/format.h>
#include <fmt/ranges.h>

#include <optional>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/wal_relay_run.h"
#include "cli/drain.h"
#include "cli/duration.h"
#include "cli/option_values.h"
#include "cli/publishing.h"
#include "lab/broker/json_bytes.h"
#include "lab/chapter/loans.h"
#include "lab/check/checker.h"
#include "lab/check/reconciliation.h"
#include "lab/check/verdict_text.h"

namespace outbox::cli {
namespace {

struct CheckOptions {
  bool json = false;
  std::int64_t timeout_ms = 10000;  // --read-timeout
  std::vector<std::string> histories;
  std::string expect;
  std::string synchronous_used = "full";
  bool ids = false;
  bool drain = false;
  std::int64_t delivery_timeout_ms = 10000;  // --delivery-timeout, for --drain
  std::string lang = "en";
  std::string business_table;  // --business-table: the application's (default: business_loan)
  std::string business_key;    // --business-key
  std::string isolation = "read_committed";  // --isolation
  bool exactly_once = false;                 // --exactly-once
};

ExitCode ExitCodeOf(lab::Verdict verdict) {
  switch (verdict) {
    case lab::Verdict::kValid: return ExitCode::kOk;
    case lab::Verdict::kInvalid: return ExitCode::kExpectationFailed;
    case lab::Verdict::kNotDrained: return ExitCode::kNotDrained;
    case lab::Verdict::kCannotJudge: return ExitCode::kCannotJudge;
  }
  return ExitCode::kExpectationFailed;
}

void PrintJson(const lab::CheckResult& r, const std::string& run_id,
               const std::map<std::string, std::int64_t>& expected,
               const std::vector<std::string>& mismatches) {
  const lab::HistoryVerdict& h = r.history;
  nlohmann::ordered_json out;
  out["valid"] = r.valid();
  out["verdict"] = lab::VerdictName(r.verdict());
  out["run_id"] = run_id;
  out["business_rows"] = r.business_rows;
  out["outbox_rows"] = r.outbox_rows;
  out["kafka_records"] = r.kafka_records;
  out["other_run_records"] = r.other_run_records;
  out["ok"] = r.ok;
  out["lost"] = r.lost;
  out["pending"] = r.pending;
  out["parked"] = r.parked;
  out["retention_unknown"] = r.retention_unknown;
  out["duplicated_changed"] = r.duplicated_changed;
  out["reused_event_ids"] = r.reused_event_ids;
  out["lost_beyond_retention"] = r.lost_beyond_retention;
  out["restart_unknown"] = r.restart_unknown;
  out["published_during_read"] = r.published_during_read;
  if (r.broker_restart.restarted)
    out["broker_restart"] = {{"gone", r.broker_restart.gone},
                             {"current", r.broker_restart.current},
                             {"reason", lab::BrokerRestartReason(r.broker_restart)}};
  out["partitions"] = nlohmann::ordered_json::array();
  for (const lab::PartitionExtent& p : r.partitions)
    out["partitions"].push_back({{"partition", p.partition}, {"log_start", p.log_start},
                                 {"end", p.end}, {"compacted", p.compacted}});
  out["duplicates_forbidden"] = r.duplicates_forbidden;
  out["duplicated"] = nlohmann::ordered_json::object();
  for (const auto& [id, n] : r.duplicated) out["duplicated"][id] = n;
  out["phantom"] = r.phantom;
  out["atomicity"] = r.atomicity;
  out["atomicity_skipped"] = r.atomicity_skipped;
  out["business_table"] = r.business_table;
  out["lost_after_mark"] = r.lost_after_mark;
  out["stuck"] = r.stuck;
  out["order_violations"] = r.order_violations;
  out["order_hazards"] = nlohmann::ordered_json::array();
  for (const lab::OrderHazard& hazard : r.order_hazards)
    out["order_hazards"].push_back({{"aggregate_id", hazard.aggregate_id},
                                    {"partitions", hazard.partitions},
                                    {"keyed_by_aggregate", hazard.keyed_by_aggregate}});
  out["undone"] = r.undone;
  out["undone_phantom"] = r.undone_phantom;
  out["corrupt"] = r.corrupt;
  if (h.present) {
    out["history"] = {{"attempts", h.attempts},
                      {"acknowledged", h.acknowledged},
                      {"failed", h.failed},
                      {"indeterminate", h.indeterminate},
                      {"ok", h.ok},
                      {"recovered", h.recovered},
                      {"unexpected", h.unexpected},
                      {"malformed_lines", h.malformed_lines},
                      {"marked", h.marked},
                      {"fenced", h.fenced},
                      {"parked", h.parked},
                      {"marked_without_ack", h.marked_without_ack},
                      {"fenced_duplicates", h.fenced_duplicates},
                      {"producer_duplicates", h.producer_duplicates}};
  }
  if (!expected.empty()) {
    out["expectations_met"] = mismatches.empty();
    out["mismatches"] = mismatches;
  }
  fmt::print("{}\n", lab::DumpJson(out));
}

// history_empty: --history was given and its files hold no operation at all.
void PrintText(const lab::CheckResult& r, const CheckOptions& o, lab::Lang lang,
               const std::map<std::string, std::int64_t>& expected,
               const std::vector<std::string>& mismatches, bool history_empty) {
  const lab::HistoryVerdict& h = r.history;
  const auto list = [&o](const std::vector<std::string>& ids) { return lab::ShortIdList(ids, o.ids); };
  fmt::print("[check] business={} outbox={} kafka-records={}\n", r.business_rows, r.outbox_rows,
             r.kafka_records);
  if (r.other_run_records > 0)
    fmt::print("[check] other runs' records on the topic: {} (another database or an earlier "
               "reset; not counted)\n",
               r.other_run_records);
  for (const lab::PartitionExtent& p : r.partitions)
    if (p.log_start > 0)
      fmt::print("[check] broker retention: partition {} starts at offset {} (offsets 0..{} were "
                 "dropped)\n",
                 p.partition, p.log_start, p.log_start - 1);
  for (const lab::PartitionExtent& p : r.partitions)
    if (p.compacted > 0)
      fmt::print("[check] compacted topic (cleanup.policy=compact): partition {} holds no record "
                 "at {} of its offsets {}..{} (compaction keeps a key's last record only)\n",
                 p.partition, p.compacted, p.log_start, p.end - 1);
  if (h.present)
    fmt::print("[check] history: attempts={} acknowledged={} failed={} indeterminate={} ok={} "
               "recovered={} unexpected={}\n",
               h.attempts, h.acknowledged, h.failed, h.indeterminate, h.ok, h.recovered,
               h.unexpected.size());
  if (h.present)
    fmt::print("[check] history settles: marked={} fenced={} parked={} marked-without-ack={} "
               "duplicates-after-fencing={} producer-duplicates={}\n",
               h.marked, h.fenced, h.parked, h.marked_without_ack.size(),
               h.fenced_duplicates.size(), h.producer_duplicates.size());
  if (!h.producer_duplicates.empty())
    fmt::print("[check] written twice by the producer, sent once (a producer retry, not a relay "
               "re-send): {}\n",
               list(h.producer_duplicates));
  if (!h.unexpected.empty())
    fmt::print("[check] unexpected (in Kafka, but no writer in the history attempted it): {}\n",
               list(h.unexpected));
  // Records yet no writer at all: the writers ran without the history, not a phantom write.
  if (!h.unexpected.empty() && h.attempts == 0 && !history_empty)
    fmt::print("[check] the history holds no writer's transaction: were the writers run with "
               "--history/OUTBOX_HISTORY too?\n");
  if (history_empty)
    fmt::print("[check] the history {} empty: was it written by this run's processes with "
               "--history/OUTBOX_HISTORY?\n",
               o.histories.size() == 1 ? "file is" : "files are");
  if (!h.marked_without_ack.empty())
    fmt::print("[check] marked without an ack (lost-after-mark evidence): {}\n",
               list(h.marked_without_ack));
  fmt::print("[check] ok={} lost={} duplicated={} phantom={} atomicity={} lost-after-mark={} "
             "stuck={} order-violations={}\n",
             r.ok, r.lost.size(), r.duplicated.size(), r.phantom.size(), r.atomicity.size(),
             r.lost_after_mark.size(), r.stuck.size(), r.order_violations.size());
  if (!r.order_hazards.empty()) {
    std::vector<std::string> items;
    bool keyed_by_aggregate = true;
    for (const lab::OrderHazard& hazard : r.order_hazards) {
      items.push_back(fmt::format("{} on {}", lab::EscapeBytes(hazard.aggregate_id),
                                  fmt::join(hazard.partitions, "+")));
      keyed_by_aggregate = keyed_by_aggregate && hazard.keyed_by_aggregate;
    }
    fmt::print("[check] order hazards={}: aggregates on more than one partition, whose events a "
               "consumer may apply out of order ({}): {}\n",
               r.order_hazards.size(),
               keyed_by_aggregate
                   ? "keyed by aggregate id, so the key->partition mapping changed: another "
                     "partitioner or partition count"
                   : "not every record is keyed by its aggregate id: relay --key aggregate-id "
                     "pins an aggregate to one partition",
               list(items));
  }
  if (!r.stuck.empty() || !r.retention_unknown.empty() || !r.restart_unknown.empty() ||
      !r.published_during_read.empty())
    fmt::print("[check] pending={} parked={} cannot-judge={}{}\n", r.pending.size(),
               r.parked.size(), r.retention_unknown.size() + r.restart_unknown.size(),
               r.published_during_read.empty()
                   ? std::string()
                   : fmt::format(" published-during-read={}", r.published_during_read.size()));
  if (r.atomicity_skipped)
    fmt::print("[check] atomicity skipped: business_loan is empty, so these events come from "
               "another application; outbox judged against Kafka only (name its table with "
               "--business-table TABLE --business-key COLUMN to judge atomicity)\n");
  if (!r.duplicated.empty()) {
    std::vector<std::string> items;
    for (const auto& [id, n] : r.duplicated) items.push_back(fmt::format("{} x{}", id, n));
    if (r.duplicates_forbidden)
      fmt::print("[check] duplicated: {} (a violation: the run was relayed --exactly-once and "
                 "read read_committed, where a duplicate means a committed transaction was "
                 "sent again)\n",
                 list(items));
    else if (o.exactly_once)
      fmt::print("[check] duplicated: {} (read_uncommitted also shows the records of aborted "
                 "transactions; read_committed consumers never see them)\n",
                 list(items));
    else
      fmt::print("[check] duplicated: {} {}\n", list(items), lab::DuplicateNote(lang));
  }
  if (!r.duplicated_changed.empty())
    fmt::print("[check] sent again with another value (the row changed between the sends; an "
               "idempotent consumer keeps the first): {}\n",
               list(r.duplicated_changed));
  if (o.exactly_once)
    fmt::print("[check] exactly-once, read {}: {}\n", o.isolation,
               r.duplicates_forbidden
                   ? "any duplicate is a violation; a consumer gets this only by reading "
                     "read_committed, and the relay paid one Kafka transaction per batch"
                   : "duplicates allowed here: aborted transactions' records are visible to this "
                     "isolation level");
  if (!r.reused_event_ids.empty())
    fmt::print("[check] event id reused by another outbox row (an idempotent consumer keeps the "
               "first event and drops the other as a duplicate: lost to it): {}\n",
               list(r.reused_event_ids));
  if (!r.lost.empty()) fmt::print("[check] lost: {}\n", list(r.lost));
  if (!r.pending.empty())
    fmt::print("[check] pending (committed, not yet published: the relay will send them): {}\n",
               list(r.pending));
  if (!r.parked.empty())
    fmt::print("[check] parked (sent only after `outbox-lab unpark`): {}\n", list(r.parked));
  if (!r.published_during_read.empty())
    fmt::print("[check] published while the topic was read (a live relay; their records may lie "
               "past the end read, so neither ok nor lost: check again once it is idle): {}\n",
               list(r.published_during_read));
  if (!r.retention_unknown.empty())
    fmt::print("[check] cannot judge (broker retention): {}\n", list(r.retention_unknown));
  if (r.lost_beyond_retention > 0)
    fmt::print("[check] lost: at least {} of the {} published events not in Kafka: the broker "
               "dropped only {} offsets, so the rest never reached it\n",
               r.lost_beyond_retention, r.retention_unknown.size(), r.dropped_offsets);
  if (!r.restart_unknown.empty())
    fmt::print("[check] cannot judge (broker restarted): {}: {}\n",
               lab::BrokerRestartReason(r.broker_restart), list(r.restart_unknown));
  else if (r.broker_restart.restarted)
    fmt::print("[check] note: {}\n", lab::BrokerRestartNote(r.broker_restart));
  if (!r.phantom.empty()) fmt::print("[check] phantom: {}\n", list(r.phantom));
  if (!r.atomicity.empty()) fmt::print("[check] atomicity: {}\n", list(r.atomicity));
  if (!r.undone.empty())
    fmt::print("[check] power loss ({}): undone={} undone-phantom={} corrupt={}\n",
               r.undo_allowed ? "allowed below full" : "an error at full", r.undone.size(),
               r.undone_phantom.size(), r.corrupt.empty() ? 0 : 1);
  if (!r.undone.empty()) fmt::print("[check] undone: {}\n", list(r.undone));
  // Corruption has causes besides a power cut (a bad disk, a copy taken mid-write, a stray
  // write): name what is found and how to recover, as every other command does.
  if (!r.corrupt.empty())
    fmt::print("[check] corrupt: the database file is corrupt ({}): restore it from a backup, "
               "or see the damage with PRAGMA integrity_check; `reset` with another --db path "
               "starts a new run in a fresh file. The counts above are what the damaged file "
               "still gave (a damaged run id makes every record look like another run's)\n",
               r.corrupt);
  fmt::print("[check] {}\n", lab::CheckVerdictLine(r, lang));
  for (const auto& line : mismatches) fmt::print("[check] MISMATCH {}\n", line);
  if (!expected.empty() && mismatches.empty()) {
    if (r.verdict() == lab::Verdict::kCannotJudge)
      fmt::print("[check] the {} expectations are not judged: the events above cannot be (exit "
                 "16)\n",
                 expected.size());
    else
      fmt::print("[check] all {} expectations hold\n", expected.size());
  }
}

}  // namespace

Command AddCheckCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "check",
      "Judge a run from the database and the whole topic: ok, lost, duplicated, phantom, "
      "atomicity, lost-after-mark, pending, order violations. Only this run's records count "
      "(header run_id). Exit 0 valid, 1 invalid, 15 not drained yet (unpublished rows: run the "
      "relay, then check), 16 cannot judge (the broker dropped records, or the in-memory embedded "
      "broker was restarted since they were published); when it cannot check, the "
      "code of the error as for every command (docs/exit-codes.md: 6 no database, 8 no broker ...). "
      "Duplicates never invalidate (at-least-once), except with --exactly-once --isolation "
      "read_committed. With --expect: exit 0 when every "
      "expectation holds, 1 when one does not, 16 when some events cannot be judged");
  auto o = std::make_shared<CheckOptions>();
  sub->add_flag("--json", o->json, "Print one JSON object (every id, whatever --ids)");
  sub->add_option("--history", o->histories,
                  "History files written with --history by writers and relays (repeatable); adds "
                  "attempts, acknowledged, recovered and unexpected")
      ->check(CLI::ExistingFile);
  sub->add_option("--expect", o->expect,
                  "Exit 0 only if these hold, e.g. valid=1,ok=5,lost=0,duplicated=3 (keys: the "
                  "report's numbers; a list counts its entries; history_* need --history)")
      // Checked while parsing: a typo is a usage error (exit 2) and costs no topic read.
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            try {
              lab::ParseExpectations(text, lab::CheckExpectationKeys());
            } catch (const ConfigError& e) {
              return e.what();
            }
            return {};
          },
          "KEY=N,...", "Expectations"));
  sub->add_option("--synchronous-used", o->synchronous_used,
                  "The synchronous level the run's processes used: below full, commits undone by "
                  "a power cut (and events the relay published from them) are reported but allowed. "
                  "On PostgreSQL: off for synchronous_commit=off (a server crash can undo "
                  "acknowledged commits), full for on")
      ->check(CLI::IsMember({"off", "normal", "full", "extra"}))
      ->capture_default_str();
  sub->add_flag("--ids", o->ids,
                "Print every id of a list (default: the first 10 and how many more)");
  sub->add_flag("--drain", o->drain,
                "First run the relay until nothing is left to send (as `relay --until-empty`, "
                "Jepsen's final drain), then judge");
  AddDeliveryTimeoutOption(*sub, o->delivery_timeout_ms);
  sub->add_option("--lang", o->lang, "Language of the verdict line: en or zh (the chapter's terms)")
      ->transform(LanguageName())
      ->envname("OUTBOX_LANG")
      ->capture_default_str();
  AddReadTimeoutOption(*sub, o->timeout_ms);
  AddBusinessTableOptions(*sub, o->business_table, o->business_key);
  AddIsolationOption(*sub, o->isolation);
  sub->add_flag("--exactly-once", o->exactly_once,
                "The run was relayed with relay --exactly-once: under --isolation "
                "read_committed every duplicate is a violation (exit 1); under read_uncommitted "
                "duplicates are allowed (aborted transactions' records are visible there)");
  Command command{sub, [&global, o]() -> ExitCode {
                    // Parse expectations first: a typo must not cost a topic read.
                    std::map<std::string, std::int64_t> expected;
                    if (!o->expect.empty()) {
                      expected = lab::ParseExpectations(o->expect, lab::CheckExpectationKeys());
                      for (const auto& [key, value] : expected)
                        if (key.rfind("history_", 0) == 0 && o->histories.empty())
                          throw CommandError(
                              ExitCode::kUsage,
                              fmt::format("--expect {}={}: history keys need --history FILE{}",
                                          key, value,
                                          global.history.empty()
                                              ? std::string()
                                              : fmt::format(" (check reads no history by "
                                                            "itself: add --history {})",
                                                            global.history)));
                    }
                    const lab::Lang lang = lab::ParseLang(o->lang);
                    const lab::BusinessTable business{o->business_table, o->business_key};
                    if (!o->business_table.empty()) lab::RequireBusinessTable(business);
                    if (o->drain) {
                      const LoopReport drained = DrainOutbox(global, o->delivery_timeout_ms);
                      // On stderr under --json, so stdout stays one JSON object.
                      fmt::print(o->json ? stderr : stdout,
                                 "[check] drain: the relay ran until empty: batches={} acked={} "
                                 "marked={} failed={} parked={}\n",
                                 drained.batches, drained.acked, drained.marked, drained.failed,
                                 drained.parked);
                      std::fflush(stdout);
                    }
                    lab::CheckResult r;
                    std::string run_id;
                    // The database opens first: a missing file, no schema or a locked or
                    // unreadable database is reported as such (exit 4-7, 11) before the topic
                    // read costs time or a missing broker hides it.
                    std::unique_ptr<OutboxStore> store;
                    try {
                      store = lab::OpenLabStore(global.db, global.MakeStoreOptions(),
                                                OpenMode::kReadOnly);
                      run_id = store->RunId();
                    } catch (const DbError& e) {
                      // Damage that stops the reads is a finding, not a failure to check. A
                      // file that is not SQLite at all (SQLITE_NOTADB) is an error (exit 5),
                      // as for every other command.
                      if (e.primary_code() != SQLITE_CORRUPT) throw;
                      r.corrupt = e.reason();  // SQLite's words, not our SQL
                    }
                    // What was published before the topic read fixed the partitions' ends
                    // (under the WAL relay, by its slot read now): a live relay's later marks
                    // are then not taken for lost events (CheckRun, published_during_read).
                    std::optional<WalProgress> wal;
                    std::optional<std::unordered_set<std::string>> published_before_read;
                    if (store) {
                      try {
                        if (store->backend() == Backend::kPostgres) wal = ReadWalProgress(global.db);
                        published_before_read = lab::PublishedEventIds(*store, wal ? &*wal : nullptr);
                      } catch (const DbError& e) {
                        if (e.primary_code() != SQLITE_CORRUPT) throw;  // judged below
                      }
                    }
                    // Every topic the run used (--topic-template), else --topic; a corrupt
                    // database names no event types: --topic then.
                    const lab::TopicLog log = lab::ReadTopicLogs(
                        {global.RequireBrokers(), global.topic,
                         WithIsolation(global.ParsedProperties(), o->isolation),
                         static_cast<int>(o->timeout_ms), /*wait_for_open_transactions=*/true},
                        store ? lab::TopicsOfRun(*store, global.topic, global.topic_template)
                              : std::vector<std::string>{global.topic});
                    if (!global.topic_template.empty() && !o->json)
                      fmt::print("[check] topics read (--topic-template {}): {}\n",
                                 global.topic_template, log.topic);
                    std::vector<lab::HistoryOp> ops;
                    std::int64_t malformed = 0;
                    std::int64_t before_reset = 0;
                    if (!o->histories.empty()) {
                      ops = lab::ReadHistories(o->histories, &malformed);
                      const auto others = lab::OtherRunsInHistory(ops, run_id);
                      if (!others.empty() && !o->json)
                        fmt::print("[check] history: warning: records of another run (run id "
                                   "{}) are counted as this run's: another database appends to "
                                   "this history, or this run's reset is not recorded in it; "
                                   "give each database its own --history file\n",
                                   fmt::join(others, ", "));
                      before_reset = lab::DropBeforeLastReset(ops, run_id);
                    }
                    if (before_reset > 0 && !o->json)
                      fmt::print("[check] history: {} records before the last reset left out (an "
                                 "earlier run)\n",
                                 before_reset);
                    if (store) {
                      try {
                        lab::RunRecords run = lab::RecordsOfRun(log.records, run_id);
                        // The WAL relay marks no row: its slot says what is still pending.
                        if (wal && !o->json) PrintWalProgress("check", *wal);
                        r = lab::CheckRun(*store, run.records,
                                          o->histories.empty() ? nullptr : &ops, log.partitions,
                                          log.broker_incarnation,
                                          o->business_table.empty() ? nullptr : &business,
                                          wal ? &*wal : nullptr,
                                          published_before_read ? &*published_before_read
                                                                : nullptr);
                        r.other_run_records = run.other_run_records;
                        // Published rows missing from a topic the broker does not have: a wrong
                        // --topic, not lost events (counts ok + lost: every published row).
                        lab::RequireTopicIfPublished(
                            log, r.ok + static_cast<std::int64_t>(r.lost.size()),
                            static_cast<std::int64_t>(run.records.size()));
                      } catch (const DbError& e) {
                        if (e.primary_code() != SQLITE_CORRUPT) throw;
                        r = lab::CheckResult{};
                        r.corrupt = e.reason();  // SQLite's words, not our SQL
                      }
                    }
                    if (!r.corrupt.empty())
                      r.kafka_records = static_cast<std::int64_t>(log.records.size());
                    r.undo_allowed = ParseSynchronous(o->synchronous_used) < Synchronous::kFull;
                    r.duplicates_forbidden = o->exactly_once && o->isolation == "read_committed";
                    r.history.malformed_lines = malformed;
                    const auto mismatches =
                        lab::CompareExpectations(expected, lab::CheckValues(r));
                    if (o->json) PrintJson(r, run_id, expected, mismatches);
                    else
                      PrintText(r, *o, lang, expected, mismatches,
                                !o->histories.empty() && ops.empty() && malformed == 0);
                    // Events no number can speak for: no expectation about them holds either
                    // (a CI gate of lost=0 must not pass a run whose records the broker lost).
                    if (r.verdict() == lab::Verdict::kCannotJudge) return ExitCode::kCannotJudge;
                    if (!expected.empty())
                      return mismatches.empty() ? ExitCode::kOk : ExitCode::kExpectationFailed;
                    return ExitCodeOf(r.verdict());
                  }};
  return command;
}

}  // namespace outbox::cli
