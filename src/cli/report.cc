#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <string>
#include <unordered_set>

#include "cli/command.h"
#include "cli/duration.h"
#include "lab/chapter/loans.h"
#include "lab/check/checker.h"
#include "lab/check/reconciliation.h"
#include "lab/report/model.h"
#include "lab/report/page.h"
#include "lab/report/page_file.h"

namespace outbox::cli {

Command AddReportCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "report",
      "Write one self-contained HTML page of a run: a timeline per process from the histories "
      "(kills, holds, transactions, sends, marks), the topic as a strip of offsets with "
      "duplicates linked to their cause, the reconciliation and the checker's verdict. Reads "
      "what check reads. Exit 0 when written, whatever the verdict");
  struct Options {
    std::string html;
    std::vector<std::string> histories;
    std::int64_t timeout_ms = 10000;  // --read-timeout
    std::string title = "outbox-lab report";
  };
  auto o = std::make_shared<Options>();
  sub->add_option("--html", o->html, "The page to write (replaced if it exists)")->required();
  sub->add_option("--history", o->histories,
                  "History files written with --history by writers and relays (repeatable): "
                  "the timeline's lanes")
      ->check(CLI::ExistingFile);
  sub->add_option("--title", o->title, "The page's heading")->capture_default_str();
  AddReadTimeoutOption(*sub, o->timeout_ms);
  return {sub, [&global, o]() -> ExitCode {
            RejectPostgres(global, "report");
            lab::RequireWritableFile(o->html);  // before the topic read, not after it
            auto store = lab::OpenLabDatabase(global.db, global.MakeStoreOptions(), OpenMode::kReadOnly);
            // What was published before the topic read, as check reads it: a live relay's later
            // marks are then not taken for lost events.
            const std::unordered_set<std::string> published_before_read =
                lab::PublishedEventIds(*store);
            // Only this run's records (header run_id), as verify and check count them.
            // Every topic the run used (--topic-template), else --topic.
            const lab::TopicLog log = lab::ReadTopicLogs(
                {global.RequireBrokers(), global.topic, global.ParsedProperties(),
                 static_cast<int>(o->timeout_ms), /*wait_for_open_transactions=*/true},
                lab::TopicsOfRun(*store, global.topic, global.topic_template));
            const auto records = lab::RecordsOfRun(log.records, store->RunId()).records;
            // The history every other command writes (--history before the subcommand, or
            // OUTBOX_HISTORY) is the timeline's too when no report --history is given.
            if (o->histories.empty() && !global.history.empty()) {
              std::error_code ec;
              if (!std::filesystem::is_regular_file(global.history, ec))
                throw CommandError(ExitCode::kUsage,
                                   fmt::format("report: history file '{}' (--history or "
                                               "OUTBOX_HISTORY) does not exist",
                                               global.history));
              o->histories = {global.history};
              fmt::print("[report] history {} (--history / OUTBOX_HISTORY)\n", global.history);
            }
            std::int64_t malformed = 0;
            std::vector<lab::HistoryOp> ops;
            if (!o->histories.empty()) {
              ops = lab::ReadHistories(o->histories, &malformed);
              if (const auto others = lab::OtherRunsInHistory(ops, store->RunId());
                  !others.empty())
                fmt::print("[report] history: warning: records of another run (run id {}) are "
                           "drawn as this run's: another database appends to this history, or "
                           "this run's reset is not recorded in it; give each database its own "
                           "--history file\n",
                           fmt::join(others, ", "));
              // Records of an earlier run (before the last reset) are neither lanes nor verdict.
              if (const std::int64_t left_out = lab::DropBeforeLastReset(ops, store->RunId());
                  left_out > 0)
                fmt::print("[report] history: {} records before the last reset left out\n",
                           left_out);
            }
            lab::ReportModel model =
                lab::BuildReportModel(*store, records, ops, !o->histories.empty(), malformed,
                                      log.broker_incarnation, log.partitions,
                                      &published_before_read);
            model.title = o->title;
            model.db_path = global.db;
            model.topic = log.topic;
            const std::string html = lab::RenderReportHtml(model);
            lab::WriteFileAtomically(o->html, html);
            fmt::print("[report] wrote {} ({} bytes): {} lanes, {} records, verdict {}\n", o->html,
                       html.size(), model.lanes.size(), model.cells.size(),
                       model.check.verdict() == lab::Verdict::kInvalid
                           ? "INVALID"
                           : lab::VerdictName(model.check.verdict()));
            return ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
