// Statistics: median, nearest-rank percentile, rates and ratios, spreads of rounds.
#include "lab/bench/statistics.h"

#include <catch2/catch.hpp>

#include <vector>

using outbox::lab::Median;
using outbox::lab::Noisy;
using outbox::lab::Percentile;
using outbox::lab::Rate;
using outbox::lab::Ratio;
using outbox::lab::RoundRatios;
using outbox::lab::Spread;
using outbox::lab::SpreadOf;

TEST_CASE("Median takes the middle value or the mean of the two middle values", "[bench]") {
  CHECK(Median({}) == 0);
  CHECK(Median({7}) == 7);
  CHECK(Median({3, 1, 2}) == 2);
  CHECK(Median({4, 1, 3, 2}) == 2.5);
}

TEST_CASE("Percentile uses the nearest rank", "[bench]") {
  std::vector<double> hundred;
  for (int i = 100; i >= 1; --i) hundred.push_back(i);  // unsorted on purpose
  CHECK(Percentile(hundred, 99) == 99);
  CHECK(Percentile(hundred, 50) == 50);
  CHECK(Percentile(hundred, 100) == 100);
  CHECK(Percentile(hundred, 0.5) == 1);
  CHECK(Percentile({5, 1000}, 99) == 1000);  // two samples: p99 is the larger
  CHECK(Percentile({}, 99) == 0);
}

TEST_CASE("Rate and Ratio give 0 instead of dividing by zero", "[bench]") {
  CHECK(Rate(500, 2.0) == 250);
  CHECK(Rate(500, 0) == 0);
  CHECK(Ratio(3, 4) == 0.75);
  CHECK(Ratio(3, 0) == 0);
}

TEST_CASE("SpreadOf gives the median and the range of the rounds", "[bench]") {
  const Spread spread = SpreadOf({1.2, 0.8, 1.0, 3.0, 0.9});
  CHECK(spread.median == 1.0);
  CHECK(spread.min == 0.8);
  CHECK(spread.max == 3.0);
  CHECK(spread.rounds == 5);
  CHECK(SpreadOf({}).rounds == 0);
  CHECK(SpreadOf({}).median == 0);
}

TEST_CASE("RoundRatios divides round by round up to the shorter list", "[bench]") {
  const std::vector<double> ratios = RoundRatios({10, 30, 50}, {5, 10});
  REQUIRE(ratios.size() == 2);
  CHECK(ratios[0] == 2);
  CHECK(ratios[1] == 3);
}

TEST_CASE("RoundRatios leaves out a round where either lane moved no events", "[bench]") {
  // Rounds 2 and 3: the relay had finished in round 1 (a slice smaller than its batch), then
  // the raw lane had nothing to do in round 4.
  const std::vector<double> ratios = RoundRatios({40, 0, 0, 60}, {10, 20, 30, 0});
  REQUIRE(ratios.size() == 1);
  CHECK(ratios[0] == 4);
  CHECK(RoundRatios({0, 0}, {5, 5}).empty());
}

TEST_CASE("Noisy holds when the range is wider than the distance to the target", "[bench]") {
  CHECK_FALSE(Noisy({1.0, 0.75, 1.25, 5}, 1.5));  // range 0.5, distance 0.5: not wider
  CHECK_FALSE(Noisy({1.0, 0.9, 1.1, 5}, 1.5));  // range 0.2 < distance 0.5
  CHECK(Noisy({1.4, 1.2, 1.7, 5}, 1.5));        // range 0.5 > distance 0.1
  CHECK_FALSE(Noisy({1.4, 1.0, 2.0, 1}, 1.5));  // one round: no spread to judge
}
