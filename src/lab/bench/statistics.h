// Statistics for the bench's figures: medians and percentiles of samples,
// rates and ratios that are 0 instead of dividing by zero.
#pragma once

#include <cstdint>
#include <vector>

namespace outbox::lab {

// The median of values: the middle one, or the mean of the two middle ones
// for an even count; 0 for none.
double Median(std::vector<double> values);

// The p-th percentile (0 < p <= 100) by the nearest-rank method: the smallest
// value with at least p% of the values at or below it (p99 of 1..100 is 99,
// p100 the maximum); 0 for none.
double Percentile(std::vector<double> values, double p);

// count per second; 0 when seconds <= 0.
double Rate(std::int64_t count, double seconds);

// numerator ÷ denominator; 0 when denominator <= 0.
double Ratio(double numerator, double denominator);

// A figure taken once per interleaved round: its median (the figure the bench reports) and the
// range of the rounds, so a reader sees how far one run's value can be trusted.
struct Spread {
  double median = 0;
  double min = 0;
  double max = 0;
  std::int64_t rounds = 0;  // values it was taken from; 0: none (all fields 0)
};

// Median, minimum and maximum of values; all 0 for none.
Spread SpreadOf(const std::vector<double>& values);

// One value per round: numerators[i] ÷ denominators[i] (Ratio), for the shorter length, leaving
// out a round where either rate is 0: a lane that moved no events in it (a slice smaller than
// one batch, which the relay finished in an earlier slice) measured nothing there.
std::vector<double> RoundRatios(const std::vector<double>& numerators,
                                const std::vector<double>& denominators);

// True when the spread's range (max - min) is wider than its median's distance from target:
// another run could land on the other side of the target. False for fewer than 2 rounds.
bool Noisy(const Spread& spread, double target);

}  // namespace outbox::lab
