// Checks of option values that CLI11 cannot express by itself, as pure
// functions (testable without a command line) plus the CLI11 validators that
// apply them while the command line is parsed, so every bad value is a usage
// error (exit 2) whose one line names the option, the rule and the value.
// Pure functions; thread-safe.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace outbox::cli {

// "" when topic is a name Kafka accepts, else why not. The rule is Kafka's
// (org.apache.kafka.common.internals.Topic.validate): 1 to 249 characters of
// [a-zA-Z0-9._-], and neither "." nor "..".
std::string TopicNameProblem(std::string_view topic);

// "" when db names an SQLite database file (or a PostgreSQL URL,
// postgresql:// or postgres://, see outbox/pg/connection.h), else why not:
// empty, ":memory:" (a database that vanishes with the process, so the next
// command would find no file) or a "file:" URI (SQLite would open a different
// path than the one the lab's other file checks look at).
std::string DbPathProblem(std::string_view db);

// "" when brokers is a bootstrap list librdkafka reads as meant, else why not. The form is
// librdkafka's bootstrap.servers (CONFIGURATION.md; rd_kafka_broker_name_parse): entries
// separated by ',' or spaces, each [PROTOCOL://]HOST[:PORT], an IPv6 host in brackets. A port
// must be 1 to 65535: librdkafka keeps it in 16 bits, so 99999 would silently dial 34463. An
// empty brokers is fine (no broker configured; commands that need one say so).
std::string BrokerListProblem(std::string_view brokers);

// A CLI11 validator for a whole number in [min, max] (ParseInteger: no sign other than a
// leading '-', no suffix, no spaces); add it with transform(), not check(): it rewrites the
// text in decimal, since CLI11 alone reads "010" as octal 8 and refuses "09". Fails while
// parsing with "must be a whole number between MIN and MAX, got 'TEXT'" ("must be a positive
// integer ..." when min is 1), so the value also fits the option's variable: pass max = the
// largest value that variable holds.
CLI::Validator IntegerInRange(std::int64_t min, std::int64_t max);

// CLI11 check and transform for --lang (and OUTBOX_LANG): en or zh; a locale name as LANG
// holds it is read by its language (zh_CN.UTF-8 -> zh, en_US.UTF-8, C and POSIX -> en).
// Fails with "must be en or zh (--lang or OUTBOX_LANG), got 'TEXT'" otherwise.
CLI::Validator LanguageName();

// Adds --business-table TABLE and --business-key COLUMN to sub (check, verify): the
// application's business table to judge atomicity against, instead of the lab's business_loan.
// Each needs the other (a usage error otherwise, exit 2).
void AddBusinessTableOptions(CLI::App& sub, std::string& table, std::string& key);

// Adds --isolation read_committed|read_uncommitted to sub (check, verify, consume): the
// isolation.level the topic is read with (librdkafka CONFIGURATION.md; its default, and this
// option's, is read_committed). read_committed never shows the records of an aborted or still
// open Kafka transaction (relay --exactly-once); read_uncommitted shows every record written.
void AddIsolationOption(CLI::App& sub, std::string& isolation);

// properties (the -X list) with isolation.level=isolation appended, so --isolation wins over -X.
std::vector<std::pair<std::string, std::string>> WithIsolation(
    std::vector<std::pair<std::string, std::string>> properties, const std::string& isolation);

}  // namespace outbox::cli
