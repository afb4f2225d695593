#include <fmt/format.h>

#include <array>
#include <filesystem>
#include <memory>

#include "lab/bench/bench_support.h"
#include "lab/bench/statistics.h"
#include "lab/chapter/loans.h"

namespace outbox::lab::bench {

namespace {

// write_txns transactions of one variant on store, txns [first, last), each
// BEGIN IMMEDIATE + insert(s) + COMMIT. Returns the seconds they took.
double RunWrites(Store& store, const std::vector<Loan>& loans, const std::vector<OutboxEvent>& events,
                 std::size_t first, std::size_t last, bool with_outbox) {
  const auto start = SteadyClock::now();
  for (std::size_t i = first; i < last; ++i) {
    auto txn = store.BeginWrite();
    InsertLoan(txn.connection(), loans[i]);
    if (with_outbox) store.Enqueue(txn, events[i]);
    txn.Commit();
  }
  return SecondsSince(start);
}

}  // namespace

WritePathFigure MeasureWriteRounds(const BenchmarkOptions& options, const std::string& backend,
                                   const WriteRoundFactory& fresh_round) {
  WritePathFigure figure;
  figure.txns = options.write_txns;
  std::vector<Loan> loans;
  std::vector<OutboxEvent> events;
  for (std::int64_t i = 1; i <= options.write_txns; ++i) {
    loans.push_back(ChapterLoan(i, options.store.clock->EpochMs()));
    events.push_back(LoanCreatedEvent(loans.back(), i));
  }
  std::vector<double> slice_ratios;
  for (std::int64_t round = 0; round < options.write_rounds; ++round) {
    if (options.progress)
      options.progress(fmt::format("{}write path round {}/{}: {} business-only and {} "
                                   "business+outbox transactions, interleaved",
                                   backend, round + 1, options.write_rounds, options.write_txns,
                                   options.write_txns));
    const WriteRun run = fresh_round();
    double seconds[2] = {0, 0};
    std::size_t done = 0;
    for (int slice = 0; slice < kSlices; ++slice) {
      const auto end = static_cast<std::size_t>(SliceEnd(options.write_txns, slice));
      // Alternate which variant goes first, so drift (page cache, disk) hits both alike.
      const int first_variant = (slice + static_cast<int>(round)) % 2;
      double slice_seconds[2] = {0, 0};
      for (const int variant : {first_variant, 1 - first_variant})
        slice_seconds[variant] = run(variant == 1, loans, events, done, end);
      for (const int variant : {0, 1}) seconds[variant] += slice_seconds[variant];
      // The same transactions on both sides: txn/s with ÷ txn/s without = seconds without ÷ with.
      if (end > done) slice_ratios.push_back(Ratio(slice_seconds[0], slice_seconds[1]));
      done = end;
    }
    figure.business_only_tps.push_back(Rate(options.write_txns, seconds[0]));
    figure.with_outbox_tps.push_back(Rate(options.write_txns, seconds[1]));
  }
  figure.business_only_median_tps = Median(figure.business_only_tps);
  figure.with_outbox_median_tps = Median(figure.with_outbox_tps);
  figure.ratio_spread = SpreadOf(slice_ratios);
  figure.ratio = figure.ratio_spread.median;
  return figure;
}

// Each round: both variants on fresh databases (MeasureWriteRounds).
WritePathFigure MeasureWritePath(const BenchmarkOptions& options, const TempDir& dir) {
  std::array<std::unique_ptr<Store>, 2> stores;  // the round's: business-only, business+outbox
  return MeasureWriteRounds(options, "", [&]() -> WriteRun {
    for (int variant = 0; variant < 2; ++variant) {
      stores[variant].reset();
      const std::string path = dir.File(fmt::format("write-{}.db", variant));
      std::error_code ec;
      for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(path + suffix, ec);
      stores[variant] = FreshDatabase(path, options.store);
    }
    return [&stores](bool with_outbox, const std::vector<Loan>& loans,
                    const std::vector<OutboxEvent>& events, std::size_t first, std::size_t last) {
      return RunWrites(*stores[with_outbox ? 1 : 0], loans, events, first, last, with_outbox);
    };
  });
}

}  // namespace outbox::lab::bench
