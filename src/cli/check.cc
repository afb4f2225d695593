#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/duration.h"
#include "lab/json_bytes.h"
#include "lab/checker.h"
#include "lab/loans.h"
#include "lab/reconciliation.h"

namespace outbox::cli {
namespace {

// Ids come from rows other programs wrote: shown escaped (lab::EscapeBytes).
std::string Join(const std::vector<std::string>& items) {
  std::string text;
  for (const auto& item : items) text += (text.empty() ? "" : ", ") + lab::EscapeBytes(item);
  return text;
}

}  // namespace

Command AddCheckCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "check",
      "Judge a run from the database and the whole topic: ok, lost, duplicated, phantom, "
      "atomicity, lost-after-mark, stuck, order violations. Exit 0 valid, 1 invalid, 2 could "
      "not check. Duplicates never invalidate (at-least-once). With --expect: exit 0 when every "
      "expectation holds, 1 when one does not");
  struct Options {
    bool json = false;
    std::int64_t timeout_ms = 10000;  // --read-timeout
    std::vector<std::string> histories;
    std::string expect;
    std::string synchronous_used = "full";
  };
  auto o = std::make_shared<Options>();
  sub->add_flag("--json", o->json, "Print one JSON object");
  sub->add_option("--history", o->histories,
                  "History files written with --history by writers and relays (repeatable); adds "
                  "attempts, acknowledged, recovered and unexpected")
      ->check(CLI::ExistingFile);
  sub->add_option("--expect", o->expect,
                  "Exit 0 only if these hold, e.g. valid=1,ok=5,lost=0,duplicated=3 (keys: the "
                  "report's numbers; a list counts its entries; history_* need --history)");
  sub->add_option("--synchronous-used", o->synchronous_used,
                  "The synchronous level the run's processes used: below full, commits undone by "
                  "a power cut (and events the relay published from them) are reported but allowed")
      ->check(CLI::IsMember({"off", "normal", "full", "extra"}))
      ->capture_default_str();
  AddReadTimeoutOption(*sub, o->timeout_ms);
  Command command{sub, [&global, o]() -> ExitCode {
                    // Parse expectations first: a typo must not cost a topic read.
                    std::map<std::string, std::int64_t> expected;
                    if (!o->expect.empty()) {
                      expected = lab::ParseExpectations(o->expect, lab::CheckExpectationKeys());
                      for (const auto& [key, value] : expected)
                        if (key.rfind("history_", 0) == 0 && o->histories.empty())
                          throw ConfigError(fmt::format(
                              "--expect {}={}: history keys need --history", key, value));
                    }
                    const auto records = lab::ReadTopic(
                        {global.RequireBrokers(), global.topic, global.ParsedProperties(), static_cast<int>(o->timeout_ms)});
                    std::vector<lab::HistoryOp> ops;
                    std::int64_t malformed = 0;
                    if (!o->histories.empty()) ops = lab::ReadHistories(o->histories, &malformed);
                    lab::CheckResult r;
                    try {
                      auto store = lab::OpenLabDatabase(global.db, global.MakeStoreOptions());
                      r = lab::CheckRun(*store, records, o->histories.empty() ? nullptr : &ops);
                    } catch (const DbError& e) {
                      // Damage that stops the reads is a finding, not a failure to check.
                      if (e.primary_code() != SQLITE_CORRUPT && e.primary_code() != SQLITE_NOTADB)
                        throw;
                      r.corrupt = e.what();
                      r.kafka_records = static_cast<std::int64_t>(records.size());
                    }
                    r.undo_allowed = ParseSynchronous(o->synchronous_used) < Synchronous::kFull;
                    r.history.malformed_lines = malformed;
                    const lab::HistoryVerdict& h = r.history;
                    const auto mismatches =
                        lab::CompareExpectations(expected, lab::CheckValues(r));
                    if (o->json) {
                      nlohmann::ordered_json out;
                      out["valid"] = r.valid();
                      out["business_rows"] = r.business_rows;
                      out["outbox_rows"] = r.outbox_rows;
                      out["kafka_records"] = r.kafka_records;
                      out["ok"] = r.ok;
                      out["lost"] = r.lost;
                      out["duplicated"] = nlohmann::ordered_json::object();
                      for (const auto& [id, n] : r.duplicated) out["duplicated"][id] = n;
                      out["phantom"] = r.phantom;
                      out["atomicity"] = r.atomicity;
                      out["lost_after_mark"] = r.lost_after_mark;
                      out["stuck"] = r.stuck;
                      out["order_violations"] = r.order_violations;
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
                                          {"fenced_duplicates", h.fenced_duplicates}};
                      }
                      if (!expected.empty()) {
                        out["expectations_met"] = mismatches.empty();
                        out["mismatches"] = mismatches;
                      }
                      fmt::print("{}\n", lab::DumpJson(out));
                    } else {
                      fmt::print("[check] business={} outbox={} kafka-records={}\n", r.business_rows,
                                 r.outbox_rows, r.kafka_records);
                      if (h.present)
                        fmt::print("[check] history: attempts={} acknowledged={} failed={} "
                                   "indeterminate={} ok={} recovered={} unexpected={}\n",
                                   h.attempts, h.acknowledged, h.failed, h.indeterminate, h.ok,
                                   h.recovered, h.unexpected.size());
                      if (h.present)
                        fmt::print("[check] history settles: marked={} fenced={} parked={} "
                                   "marked-without-ack={} duplicates-after-fencing={}\n",
                                   h.marked, h.fenced, h.parked, h.marked_without_ack.size(),
                                   h.fenced_duplicates.size());
                      if (!h.marked_without_ack.empty())
                        fmt::print("[check] marked without an ack (lost-after-mark evidence): {}\n",
                                   Join(h.marked_without_ack));
                      fmt::print("[check] ok={} lost={} duplicated={} phantom={} atomicity={} "
                                 "lost-after-mark={} stuck={} order-violations={}\n",
                                 r.ok, r.lost.size(), r.duplicated.size(), r.phantom.size(),
                                 r.atomicity.size(), r.lost_after_mark.size(), r.stuck.size(),
                                 r.order_violations.size());
                      if (!r.lost.empty()) fmt::print("[check] lost: {}\n", Join(r.lost));
                      if (!r.phantom.empty()) fmt::print("[check] phantom: {}\n", Join(r.phantom));
                      if (!r.atomicity.empty()) fmt::print("[check] atomicity: {}\n", Join(r.atomicity));
                      if (!r.stuck.empty()) fmt::print("[check] stuck: {}\n", Join(r.stuck));
                      if (!r.undone.empty() || !r.corrupt.empty())
                        fmt::print("[check] power loss ({}): undone={} undone-phantom={} "
                                   "corrupt={}\n",
                                   r.undo_allowed ? "allowed below full" : "an error at full",
                                   r.undone.size(), r.undone_phantom.size(), r.corrupt.empty() ? 0 : 1);
                      if (!r.undone.empty()) fmt::print("[check] undone: {}\n", Join(r.undone));
                      if (!r.corrupt.empty()) fmt::print("[check] corrupt: {}\n", r.corrupt);
                      fmt::print("[check] {}\n", r.valid() ? "valid" : "INVALID");
                      for (const auto& line : mismatches) fmt::print("[check] MISMATCH {}\n", line);
                      if (!expected.empty() && mismatches.empty())
                        fmt::print("[check] all {} expectations hold\n", expected.size());
                    }
                    if (!expected.empty())
                      return mismatches.empty() ? ExitCode::kOk : ExitCode::kExpectationFailed;
                    return r.valid() ? ExitCode::kOk : ExitCode::kExpectationFailed;
                  },
                  ExitCode::kUsage};  // 2: could not check
  return command;
}

}  // namespace outbox::cli
