#include <fmt/format.h>

#include <chrono>
#include <thread>
#include <vector>

#include "cli/command.h"
#include "cli/option_values.h"
#include "cli/duration.h"
#include "cli/stop_signal.h"
#include "cli/row_lines.h"
#include "lab/chapter/loans.h"
#include "lab/chapter/workload.h"
#include "lab/faults/lab_failpoints.h"
#include "outbox/duration.h"
#include "outbox/event.h"
#include "outbox/failpoint.h"

namespace outbox::cli {

namespace {
// Times one batch runs again after the server broke a deadlock with another writer.
constexpr int kConflictRetries = 10;
}  // namespace

Command AddWriteCommand(CLI::App& app, const GlobalOptions& global) {
  CLI::App* sub = app.add_subcommand(
      "write",
      "Write N loans, each with its outbox event in one transaction, and exit (the workload "
      "for relays and failpoint sweeps; write-hold is the chapter's holding variant)");
  auto count = std::make_shared<std::int64_t>(0);
  auto lines = std::make_shared<RowLineOptions>();
  auto workload = std::make_shared<std::string>("own");
  auto rate = std::make_shared<std::int64_t>(0);
  sub->add_option("N", *count, "Number of loan transactions")->required()->transform(PositiveInteger());
  sub->add_option("--workload", *workload,
                  "Which loan each transaction touches: own (each a new loan), 50 (round robin "
                  "over 50 loans) or zipf (Zipf-skewed over 1,000 loans); a later transaction "
                  "of a loan renews it, with a LoanRenewed event")
      ->check(CLI::IsMember({"own", "50", "zipf"}))
      ->capture_default_str();
  sub->add_option("--rate", *rate,
                  "Commit at a steady pace of this many transactions per second (each starts at "
                  "its own slot from the first; a late one does not shift the rest); 0: as fast "
                  "as possible")
      ->transform(IntegerInRange(0, 1'000'000'000))
      ->capture_default_str();
  auto delay_ms = std::make_shared<std::int64_t>(0);
  AddDurationOption(*sub, "--delay", *delay_ms,
                    "Delayed publish: each event's not_before is its INSERT's time plus this (the "
                    "database's clock: PostgreSQL's server, SQLite's this process); the relay "
                    "sends none before it; 0s: at once",
                    0, kMaxDelayMs);
  auto batch = std::make_shared<std::int64_t>(1);
  sub->add_option("--batch", *batch,
                  "Loans per transaction: each keeps its own business row and outbox row with "
                  "the same event id, but they commit together, one commit (fsync) per batch; "
                  "--rate then paces the batches' loans")
      ->transform(PositiveInteger())
      ->capture_default_str();
  AddRowLineOptions(*sub, *lines);
  return {sub, [&global, count, lines, workload, rate, delay_ms, batch]() -> ExitCode {
            const bool row_lines = PrintsRowLines(*lines, *count);
            // Ctrl-C or SIGTERM: the transaction in progress commits, then the count.
            StopSignalFd stop;
            auto store = lab::OpenLabStore(global.db, global.MakeStoreOptions());
            const auto history = global.OpenHistory();
            std::int64_t start = lab::NextLoanIndex(*store) - 1;
            const lab::Workload spread = lab::ParseWorkload(*workload);
            const auto begin = std::chrono::steady_clock::now();
            for (std::int64_t k = 1; k <= *count;) {
              if (stop.Received()) {
                fmt::print("[write] stopped on signal: committed={} of {} (each one durable with "
                           "its outbox row; the other {} never began)\n",
                           k - 1, *count, *count - (k - 1));
                std::fflush(stdout);
                return ExitCode::kOk;
              }
              if (*rate > 0)  // pacing the workload, not synchronising with anyone
                std::this_thread::sleep_until(begin + std::chrono::nanoseconds(
                                                          (k - 1) * 1'000'000'000 / *rate));
              const std::int64_t first = k;
              std::vector<lab::LoanToWrite> loans;
              std::vector<lab::WrittenLoan> written;
              for (int conflicts = 0;; ) {
                loans.clear();
                for (k = first; k <= *count && static_cast<std::int64_t>(loans.size()) < *batch;
                     ++k)
                  loans.push_back({start + k, lab::LoanNumberFor(spread, start + k)});
                try {
                  written = lab::WriteLoansWithEvents(*store, loans, history.get(), *delay_ms);
                  break;
                } catch (const std::exception& e) {
                  // Two writers on one database (two terminals): a deadlock the server broke
                  // runs the batch again; indexes another writer took since the start go on
                  // after its rows, only while it moved on.
                  if (lab::IsDeadlockOrSerialization(e) && ++conflicts < kConflictRetries)
                    continue;
                  const std::int64_t next = lab::NextLoanIndex(*store);
                  if (!lab::IsUniqueViolation(e) || next <= start + first) throw;
                  start = next - first;
                }
              }
              if (row_lines) {
                for (std::size_t i = 0; i < written.size(); ++i)
                  fmt::print("[write] txn i={} loan={} event={} committed\n", loans[i].index,
                             written[i].loan.loan_id, written[i].event.event_id);
                std::fflush(stdout);  // scripts act on each line as it comes
              }
            }
            if (*delay_ms > 0)
              fmt::print("[write] committed={} delay={}\n", *count, FormatDuration(*delay_ms));
            else
              fmt::print("[write] committed={}\n", *count);
            std::fflush(stdout);
            // write-hold's hold point, off unless OUTBOX_FAILPOINTS arms it; Ctrl-C ends a hold.
            stop.Unblock();
            HitFailpoint(lab::kWriteHoldBeforePublish, lab::kWriteHoldLine);
            return ExitCode::kOk;
          }};
}

}  // namespace outbox::cli
