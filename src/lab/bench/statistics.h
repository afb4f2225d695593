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

}  // namespace outbox::lab
