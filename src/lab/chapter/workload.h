// Workload: which aggregate (loan) each write of the lab's writer touches.
// The issue 8 bench runs every latency figure on three spreads:
//   own   every event its own aggregate: the i-th write creates loan i
//         (today's `write`, one LoanCreated per loan);
//   50    50 aggregates: write i touches loan 1 + (i - 1) mod 50, round robin;
//   zipf  a skewed spread over 1,000 aggregates: write i touches loan k with
//         probability proportional to 1/k (Zipf, exponent 1), so loan 1 gets
//         about 13% of the writes and loan 1,000 about 0.013%.
// The first write of a loan inserts it with a LoanCreated event; later writes
// of the same loan renew it (LoanRenewed), so each aggregate is still one loan
// and `check` still finds one business row behind every event.
// The choice is a pure function of the write's index, so a run is repeatable.
#pragma once

#include <cstdint>
#include <string>

namespace outbox::lab {

enum class Workload { kOwnAggregate, kFiftyAggregates, kZipf };

inline constexpr std::int64_t kFiftyAggregates = 50;
inline constexpr std::int64_t kZipfAggregates = 1000;

// "own" | "50" | "zipf". Throws ConfigError on anything else.
Workload ParseWorkload(const std::string& text);
// The spelling ParseWorkload reads.
std::string WorkloadName(Workload workload);

// The loan number (>= 1) that the index-th write (index >= 1) touches; the
// loan id is then L-(1000 + number), as ChapterLoan. kOwnAggregate returns
// index itself.
std::int64_t LoanNumberFor(Workload workload, std::int64_t index);

}  // namespace outbox::lab
