#include <fmt/format.h>
#include <unistd.h>

#include "lab/bench/bench_support.h"
#include "lab/bench/statistics.h"
#include "outbox/error.h"

namespace outbox::lab::bench {

namespace {

constexpr int kPollWarmupRepetitions = 10;
// Rounds of the history figure: the polls alternate between the two tables round by round.
constexpr std::int64_t kHistoryRounds = 5;

// The relay's poll on a database holding history_backlog unpublished rows
// after retained published rows (history first, as in a live table).
class Poller {
 public:
  Poller(const BenchmarkOptions& options, const std::string& path, std::int64_t retained)
      : options_(options), path_(path), store_(FreshDatabase(path, options.store)) {
    figure_.retained_published = retained;
    if (retained > 0) Populate(*store_, 1, retained, /*published=*/true);
    Populate(*store_, retained + 1, options.history_backlog, /*published=*/false);
    request_.owner = fmt::format("bench-{}", getpid());
    request_.limit = options.history_backlog;
    for (int rep = 0; rep < kPollWarmupRepetitions; ++rep) Poll();  // page cache, statements
    has_claimable_us_.clear();
    claim_us_.clear();
    poll_us_.clear();
    release_us_.clear();
  }

  // Polls count times; returns the median poll of these, µs.
  double Round(std::int64_t count) {
    std::vector<double> round;
    for (std::int64_t rep = 0; rep < count; ++rep) round.push_back(Poll());
    return Median(round);
  }

  PollFigure Figure() {
    figure_.has_claimable_us = Median(has_claimable_us_);
    figure_.claim_us = Median(claim_us_);
    figure_.poll_us = Median(poll_us_);
    figure_.poll_p99_us = Percentile(poll_us_, 99);
    figure_.release_us = Median(release_us_);
    return figure_;
  }

 private:
  double Poll() {
    request_.now_ms = store_->clock().EpochMs();
    const auto t0 = SteadyClock::now();
    const bool claimable = store_->HasClaimable(request_);
    const auto t1 = SteadyClock::now();
    const Claim claim = store_->ClaimBatch(request_);
    const auto t2 = SteadyClock::now();
    store_->ReleaseClaim(claim.token);
    const auto t3 = SteadyClock::now();
    if (!claimable || static_cast<std::int64_t>(claim.rows.size()) != options_.history_backlog)
      throw DbError(fmt::format("history poll on '{}': claimed {} of {} rows", path_,
                                claim.rows.size(), options_.history_backlog),
                    SQLITE_INTERNAL);
    has_claimable_us_.push_back(Micros(t0, t1));
    claim_us_.push_back(Micros(t1, t2));
    poll_us_.push_back(Micros(t0, t2));
    release_us_.push_back(Micros(t2, t3));
    return Micros(t0, t2);
  }

  const BenchmarkOptions& options_;
  std::string path_;
  std::unique_ptr<Store> store_;
  ClaimRequest request_;
  PollFigure figure_;
  std::vector<double> has_claimable_us_, claim_us_, poll_us_, release_us_;
};

}  // namespace

HistoryFigure MeasureHistory(const BenchmarkOptions& options, const TempDir& dir) {
  if (options.progress)
    options.progress(fmt::format("history: tables with 0 and {} published rows, {} polls each in "
                                 "{} alternating rounds",
                                 options.history_rows, options.poll_repetitions, kHistoryRounds));
  Poller without(options, dir.File("history-0.db"), 0);
  Poller with(options, dir.File("history-n.db"), options.history_rows);
  std::vector<double> ratios;
  std::int64_t done = 0;
  for (std::int64_t round = 0; round < kHistoryRounds; ++round) {
    const std::int64_t count = options.poll_repetitions * (round + 1) / kHistoryRounds - done;
    done += count;
    if (count <= 0) continue;
    double with_us = 0, without_us = 0;
    if (round % 2 == 0) {
      without_us = without.Round(count);
      with_us = with.Round(count);
    } else {
      with_us = with.Round(count);
      without_us = without.Round(count);
    }
    ratios.push_back(Ratio(with_us, without_us));
  }
  HistoryFigure figure;
  figure.without_history = without.Figure();
  figure.with_history = with.Figure();
  figure.ratio_spread = SpreadOf(ratios);
  figure.ratio = figure.ratio_spread.median;
  return figure;
}

}  // namespace outbox::lab::bench
