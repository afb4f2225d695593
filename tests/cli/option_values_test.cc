// Option values CLI11 cannot check by itself: Kafka topic names, database
// paths, and integers that must fit the option's variable.
#include "cli/option_values.h"

#include <catch2/catch.hpp>

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

namespace {

// Parses args (after the program name) for an app with --n INTEGER in [min, max].
std::int64_t ParseN(std::vector<std::string> args, std::int64_t min, std::int64_t max) {
  CLI::App app("test");
  std::int64_t n = 7;
  app.add_option("--n", n, "a count")->transform(outbox::cli::IntegerInRange(min, max));
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  app.parse(args);
  return n;
}

}  // namespace

TEST_CASE("Topic names follow Kafka's rule", "[cli]") {
  using outbox::cli::TopicNameProblem;
  CHECK(TopicNameProblem("v2c7.outbox").empty());
  CHECK(TopicNameProblem("A-z_0.9").empty());
  CHECK(TopicNameProblem(std::string(249, 'a')).empty());
  CHECK(TopicNameProblem("") == "a topic name cannot be empty");
  CHECK(TopicNameProblem(".") == "a topic cannot be named '.'");
  CHECK(TopicNameProblem("..") == "a topic cannot be named '..'");
  CHECK(TopicNameProblem(std::string(250, 'a')) ==
        "a topic name has at most 249 characters, got 250");
  CHECK(TopicNameProblem("bad topic!") ==
        "a topic name takes only the letters a-z and A-Z, digits, '.', '_' and '-' (Kafka's "
        "rule), got 'bad topic!'");
  CHECK_FALSE(TopicNameProblem("caf\xc3\xa9").empty());
}

TEST_CASE("A broker list is HOST:PORT entries with ports librdkafka can hold", "[cli]") {
  using outbox::cli::BrokerListProblem;
  CHECK(BrokerListProblem("").empty());
  CHECK(BrokerListProblem("127.0.0.1:9092").empty());
  CHECK(BrokerListProblem("a:1,b:65535 c").empty());
  CHECK(BrokerListProblem("PLAINTEXT://kafka-1:9092,SSL://kafka-2:9093").empty());
  CHECK(BrokerListProblem("[::1]:9092,[fe80::1]").empty());
  CHECK(BrokerListProblem("::1").empty());  // bare IPv6: librdkafka's to read
  CHECK(BrokerListProblem("127.0.0.1:99999") ==
        "broker '127.0.0.1:99999': the port must be a number from 1 to 65535, got '99999'");
  CHECK(BrokerListProblem("a:9092,b:0") ==
        "broker 'b:0': the port must be a number from 1 to 65535, got '0'");
  CHECK(BrokerListProblem("host:") ==
        "broker 'host:': the port must be a number from 1 to 65535, got ''");
  CHECK(BrokerListProblem("host:90x") ==
        "broker 'host:90x': the port must be a number from 1 to 65535, got '90x'");
  CHECK(BrokerListProblem(":9092") ==
        "broker ':9092' names no host (HOST:PORT, e.g. 127.0.0.1:9092)");
  CHECK(BrokerListProblem("[::1:9092") == "broker '[::1:9092' opens '[' and never closes it");
  CHECK(BrokerListProblem("[::1]9092") == "broker '[::1]9092': expected ':PORT' after ']'");
}

TEST_CASE("A database is a file path or a PostgreSQL URL", "[cli]") {
  using outbox::cli::DbPathProblem;
  CHECK(DbPathProblem("outbox.db").empty());
  CHECK(DbPathProblem("/tmp/my dir/x.db").empty());
  CHECK(DbPathProblem("postgresql://lab@127.0.0.1:55432/lab").empty());
  CHECK(DbPathProblem("postgres://lab@127.0.0.1/lab").empty());
  CHECK(DbPathProblem("") == "the database path is empty: give a file path, e.g. --db outbox.db");
  CHECK(DbPathProblem(":memory:") ==
        "':memory:' is a database that vanishes when the command exits: give a file path, e.g. "
        "--db outbox.db");
  CHECK(DbPathProblem("file:uri.db") ==
        "'file:uri.db' is an SQLite URI: give a plain file path, e.g. --db uri.db");
}

TEST_CASE("An integer option takes whole numbers in its range only", "[cli]") {
  CHECK(ParseN({}, 1, INT_MAX) == 7);
  CHECK(ParseN({"--n", "1"}, 1, INT_MAX) == 1);
  CHECK(ParseN({"--n", "2147483647"}, 1, INT_MAX) == INT_MAX);
  CHECK(ParseN({"--n", "0"}, 0, 5) == 0);
  // Decimal with leading zeros: CLI11 alone reads "010" as octal 8 (unpark 010 took row 8).
  CHECK(ParseN({"--n", "010"}, 1, INT_MAX) == 10);
  CHECK(ParseN({"--n", "09"}, 1, INT_MAX) == 9);
  CHECK(ParseN({"--n", "-010"}, INT64_MIN, INT64_MAX) == -10);
  const std::string bad = GENERATE("0", "-1", "abc", "3000000000", "1.5", "+3", " 3", "3x", "");
  INFO("--n '" << bad << "'");
  CHECK_THROWS_AS(ParseN({"--n", bad}, 1, INT_MAX), CLI::ValidationError);
}

TEST_CASE("An integer option names its range when it refuses a value", "[cli]") {
  const auto message = [](const std::string& text, std::int64_t min, std::int64_t max) {
    std::string copy = text;
    return outbox::cli::IntegerInRange(min, max)(copy);
  };
  CHECK(message("3000000000", 1, INT_MAX) ==
        "must be a positive integer (at most 2147483647), got '3000000000'");
  CHECK(message("-1", 0, 100) == "must be a whole number between 0 and 100, got '-1'");
  CHECK(message("42", 0, 100).empty());
}
