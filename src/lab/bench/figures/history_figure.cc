#include <fmt/format.h>
#include <unistd.h>

#include "lab/bench/bench_support.h"
#include "lab/bench/statistics.h"
#include "outbox/error.h"

namespace outbox::lab::bench {

namespace {

constexpr int kPollWarmupRepetitions = 10;

// The relay's poll on a database holding history_backlog unpublished rows
// after retained published rows (history first, as in a live table).
PollFigure MeasurePoll(const BenchmarkOptions& options, const std::string& path,
                       std::int64_t retained) {
  auto store = FreshDatabase(path, options.store);
  if (retained > 0) Populate(*store, 1, retained, /*published=*/true);
  Populate(*store, retained + 1, options.history_backlog, /*published=*/false);

  ClaimRequest request;
  request.owner = fmt::format("bench-{}", getpid());
  request.limit = options.history_backlog;
  std::vector<double> has_claimable_us, claim_us, poll_us, release_us;
  for (std::int64_t rep = -kPollWarmupRepetitions; rep < options.poll_repetitions; ++rep) {
    request.now_ms = store->clock().EpochMs();
    const auto t0 = SteadyClock::now();
    const bool claimable = store->HasClaimable(request);
    const auto t1 = SteadyClock::now();
    const Claim claim = store->ClaimBatch(request);
    const auto t2 = SteadyClock::now();
    store->ReleaseClaim(claim.token);
    const auto t3 = SteadyClock::now();
    if (!claimable || static_cast<std::int64_t>(claim.rows.size()) != options.history_backlog)
      throw DbError(fmt::format("history poll on '{}': claimed {} of {} rows", path,
                                claim.rows.size(), options.history_backlog),
                    SQLITE_INTERNAL);
    if (rep < 0) continue;  // warm-up: page cache, statement cache
    has_claimable_us.push_back(Micros(t0, t1));
    claim_us.push_back(Micros(t1, t2));
    poll_us.push_back(Micros(t0, t2));
    release_us.push_back(Micros(t2, t3));
  }
  PollFigure figure;
  figure.retained_published = retained;
  figure.has_claimable_us = Median(has_claimable_us);
  figure.claim_us = Median(claim_us);
  figure.poll_us = Median(poll_us);
  figure.poll_p99_us = Percentile(poll_us, 99);
  figure.release_us = Median(release_us);
  return figure;
}

}  // namespace

HistoryFigure MeasureHistory(const BenchmarkOptions& options, const TempDir& dir) {
  HistoryFigure figure;
  if (options.progress)
    options.progress(fmt::format("history: poll with 0 published rows, {} polls",
                                 options.poll_repetitions));
  figure.without_history = MeasurePoll(options, dir.File("history-0.db"), 0);
  if (options.progress)
    options.progress(fmt::format("history: poll with {} published rows, {} polls",
                                 options.history_rows, options.poll_repetitions));
  figure.with_history = MeasurePoll(options, dir.File("history-n.db"), options.history_rows);
  figure.ratio = Ratio(figure.with_history.poll_us, figure.without_history.poll_us);
  return figure;
}

}  // namespace outbox::lab::bench
