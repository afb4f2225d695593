// Duration options: parsed into ms while CLI11 parses, so a bad value is a
// CLI11 parse error (main maps every one to exit 2), never a run-time error.
#include "cli/duration.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace {

// Parses args (after the program name) for an app with --timeout DURATION in
// [1ms, 1h] (legacy --timeout-ms) into ms, starting at 10s.
std::int64_t Parse(std::vector<std::string> args) {
  CLI::App app("test");
  std::int64_t ms = 10'000;
  outbox::cli::AddDurationOption(app, "--timeout,--old-timeout", ms, "a timeout", 1, 3'600'000,
                                 "--timeout-ms");
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  app.parse(args);
  return ms;
}

}  // namespace

TEST_CASE("A duration option stores ms and keeps its default when absent", "[cli]") {
  CHECK(Parse({}) == 10'000);
  CHECK(Parse({"--timeout", "1500ms"}) == 1500);
  CHECK(Parse({"--timeout", "2s"}) == 2000);
  CHECK(Parse({"--old-timeout", "1h"}) == 3'600'000);
  CHECK(Parse({"--timeout-ms", "250"}) == 250);
}

TEST_CASE("A bad or out-of-range duration is a parse error", "[cli]") {
  const std::vector<std::string> args = GENERATE(
      std::vector<std::string>{"--timeout", "10"}, std::vector<std::string>{"--timeout", "0s"},
      std::vector<std::string>{"--timeout", "2h"}, std::vector<std::string>{"--timeout", "x"},
      std::vector<std::string>{"--timeout-ms", "0"}, std::vector<std::string>{"--timeout-ms", "1s"},
      std::vector<std::string>{"--timeout", "2s", "--timeout-ms", "100"},
      std::vector<std::string>{"--timeout-ms", "100", "--old-timeout", "2s"});
  INFO(args[0] << " " << args[1]);
  CHECK_THROWS_AS(Parse(args), CLI::ParseError);
}

TEST_CASE("A duration too long for 64-bit ms is out of range and not 'not a duration'", "[cli]") {
  try {
    Parse({"--timeout", "999999999999d"});
    FAIL("999999999999d was accepted");
  } catch (const CLI::ParseError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("must be between 1ms and 1h"));
  }
  try {
    Parse({"--timeout", "1.5s"});
    FAIL("1.5s was accepted");
  } catch (const CLI::ParseError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("expected a duration such as"));
  }
}
