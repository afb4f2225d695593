// ParseInteger: whole base-10 integers within bounds, nothing else.
#include "outbox/parse_integer.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>

using outbox::ParseInteger;
using outbox::ParseIntegerPrefix;

TEST_CASE("ParseInteger accepts whole base-10 integers within the bounds", "[parse]") {
  CHECK(ParseInteger("0") == 0);
  CHECK(ParseInteger("42") == 42);
  CHECK(ParseInteger("-7") == -7);
  CHECK(ParseInteger("007") == 7);
  CHECK(ParseInteger("9223372036854775807") == std::numeric_limits<std::int64_t>::max());
  CHECK(ParseInteger("-9223372036854775808") == std::numeric_limits<std::int64_t>::min());
  CHECK(ParseInteger("1", 1, 1) == 1);
  CHECK(ParseInteger("5", 0, 10) == 5);
}

TEST_CASE("ParseInteger rejects text that is not exactly one integer", "[parse]") {
  const std::string bad = GENERATE(as<std::string>{}, "", " ", "-", "+1", " 1", "1 ", "1.0", "1e3",
                                   "12abc", "abc", "0x10", "1,000", "9223372036854775808",
                                   "-9223372036854775809", "99999999999999999999");
  INFO("text: '" << bad << "'");
  CHECK_FALSE(ParseInteger(bad).has_value());
}

TEST_CASE("ParseInteger rejects values outside the bounds", "[parse]") {
  CHECK_FALSE(ParseInteger("0", 1).has_value());
  CHECK_FALSE(ParseInteger("-1", 0).has_value());
  CHECK_FALSE(ParseInteger("11", 0, 10).has_value());
  CHECK(ParseInteger("10", 0, 10) == 10);
}

TEST_CASE("ParseIntegerPrefix splits a leading integer from its suffix", "[parse]") {
  const auto ms = ParseIntegerPrefix("500ms");
  REQUIRE(ms.has_value());
  CHECK(ms->value == 500);
  CHECK(ms->rest == "ms");
  const auto bare = ParseIntegerPrefix("12");
  REQUIRE(bare.has_value());
  CHECK(bare->rest.empty());
  CHECK_FALSE(ParseIntegerPrefix("ms").has_value());
  CHECK_FALSE(ParseIntegerPrefix("").has_value());
  CHECK_FALSE(ParseIntegerPrefix("99999999999999999999s").has_value());
}
