#include "lab/chapter/workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "outbox/error.h"

namespace outbox::lab {
namespace {

// splitmix64 (Steele, Lea, Flood 2014): a well-mixed 64-bit value from the index alone.
std::uint64_t Mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Cumulative Zipf(1) weights over 1..kZipfAggregates, normalised to [0, 1].
const std::array<double, kZipfAggregates>& ZipfCumulative() {
  static const std::array<double, kZipfAggregates> cumulative = [] {
    std::array<double, kZipfAggregates> c{};
    double sum = 0;
    for (std::int64_t k = 1; k <= kZipfAggregates; ++k) {
      sum += 1.0 / static_cast<double>(k);
      c[static_cast<std::size_t>(k - 1)] = sum;
    }
    for (double& value : c) value /= sum;
    return c;
  }();
  return cumulative;
}

}  // namespace

Workload ParseWorkload(const std::string& text) {
  if (text == "own") return Workload::kOwnAggregate;
  if (text == "50") return Workload::kFiftyAggregates;
  if (text == "zipf") return Workload::kZipf;
  throw ConfigError(fmt::format("workload '{}': expected own, 50 or zipf", text));
}

std::string WorkloadName(Workload workload) {
  switch (workload) {
    case Workload::kOwnAggregate: return "own";
    case Workload::kFiftyAggregates: return "50";
    case Workload::kZipf: return "zipf";
  }
  return "own";
}

std::int64_t LoanNumberFor(Workload workload, std::int64_t index) {
  switch (workload) {
    case Workload::kOwnAggregate:
      return index;
    case Workload::kFiftyAggregates:
      return 1 + (index - 1) % kFiftyAggregates;
    case Workload::kZipf: {
      // A uniform draw in [0, 1) from the top 53 bits, then the inverse of the cumulative weights.
      const double u =
          static_cast<double>(Mix(static_cast<std::uint64_t>(index)) >> 11) * 0x1.0p-53;
      const auto& c = ZipfCumulative();
      const auto at = std::upper_bound(c.begin(), c.end(), u);
      return std::min<std::int64_t>(kZipfAggregates, 1 + (at - c.begin()));
    }
  }
  return index;
}

}  // namespace outbox::lab
