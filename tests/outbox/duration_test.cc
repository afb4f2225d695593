// Durations as text: the units, the rejections, and the round trip.
#include "outbox/duration.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

using outbox::FormatDuration;
using outbox::ParseDurationMs;

TEST_CASE("ParseDurationMs reads an integer followed by ms s m h or d", "[parse]") {
  CHECK(ParseDurationMs("0s") == 0);
  CHECK(ParseDurationMs("500ms") == 500);
  CHECK(ParseDurationMs("10s") == 10'000);
  CHECK(ParseDurationMs("5m") == 300'000);
  CHECK(ParseDurationMs("12h") == 43'200'000);
  CHECK(ParseDurationMs("7d") == 604'800'000);
}

TEST_CASE("ParseDurationMs rejects a missing or unknown unit and anything but a whole number",
          "[parse]") {
  const std::string bad = GENERATE(as<std::string>{}, "", "10", "s", "1.5s", "-1s", "-0s", "+1s",
                                   " 1s", "1s ", "1 s", "10sec", "1S", "1w", "1ms5",
                                   "9223372036854775807s", "99999999999999999999ms");
  INFO("text: '" << bad << "'");
  CHECK_FALSE(ParseDurationMs(bad).has_value());
}

TEST_CASE("FormatDuration picks the largest exact unit and parses back to the same ms",
          "[parse]") {
  CHECK(FormatDuration(0) == "0ms");
  CHECK(FormatDuration(1500) == "1500ms");
  CHECK(FormatDuration(10'000) == "10s");
  CHECK(FormatDuration(90'000) == "90s");
  CHECK(FormatDuration(3'600'000) == "1h");
  CHECK(FormatDuration(86'400'000) == "1d");
  for (const std::int64_t ms : {0LL, 1LL, 999LL, 1000LL, 61'000LL, 3'600'000LL, 90'061'001LL})
    CHECK(ParseDurationMs(FormatDuration(ms)) == ms);
}
