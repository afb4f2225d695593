#include "lab/bench/statistics.h"

#include <algorithm>
#include <cmath>

namespace outbox::lab {

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(values.size()));
  const auto index = static_cast<std::size_t>(std::clamp(rank, 1.0, static_cast<double>(values.size())));
  return values[index - 1];
}

double Rate(std::int64_t count, double seconds) {
  return seconds > 0 ? static_cast<double>(count) / seconds : 0;
}

double Ratio(double numerator, double denominator) {
  return denominator > 0 ? numerator / denominator : 0;
}

Spread SpreadOf(const std::vector<double>& values) {
  Spread spread;
  if (values.empty()) return spread;
  spread.median = Median(values);
  const auto [min, max] = std::minmax_element(values.begin(), values.end());
  spread.min = *min;
  spread.max = *max;
  spread.rounds = static_cast<std::int64_t>(values.size());
  return spread;
}

std::vector<double> RoundRatios(const std::vector<double>& numerators,
                                const std::vector<double>& denominators) {
  std::vector<double> ratios;
  for (std::size_t i = 0; i < std::min(numerators.size(), denominators.size()); ++i)
    if (numerators[i] > 0 && denominators[i] > 0)
      ratios.push_back(Ratio(numerators[i], denominators[i]));
  return ratios;
}

bool Noisy(const Spread& spread, double target) {
  return spread.rounds >= 2 && spread.max - spread.min > std::abs(spread.median - target);
}

}  // namespace outbox::lab
