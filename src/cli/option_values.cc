#include "cli/option_values.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>

#include "outbox/parse_integer.h"
#include "outbox/pg/connection.h"

namespace outbox::cli {

std::string TopicNameProblem(std::string_view topic) {
  // Kafka's Topic.MAX_NAME_LENGTH: 249, so that "<topic>-<partition>" fits a file name of 255.
  constexpr std::size_t kMaxLength = 249;
  if (topic.empty()) return "a topic name cannot be empty";
  if (topic == "." || topic == "..") return fmt::format("a topic cannot be named '{}'", topic);
  if (topic.size() > kMaxLength)
    return fmt::format("a topic name has at most {} characters, got {}", kMaxLength, topic.size());
  for (const char c : topic) {
    const bool legal = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '_' || c == '-';
    if (!legal)
      return fmt::format(
          "a topic name takes only the letters a-z and A-Z, digits, '.', '_' and '-' (Kafka's "
          "rule), got '{}'",
          topic);
  }
  return {};
}

std::string BrokerListProblem(std::string_view brokers) {
  std::size_t begin = 0;
  while (begin < brokers.size()) {
    const std::size_t end = std::min(brokers.find_first_of(", ", begin), brokers.size());
    std::string_view entry = brokers.substr(begin, end - begin);
    begin = end + 1;
    if (entry.empty()) continue;  // "a, b": librdkafka skips the empty pieces too
    std::string_view address = entry;
    if (const auto scheme = address.find("://"); scheme != std::string_view::npos)
      address.remove_prefix(scheme + 3);
    std::string_view host = address;
    std::string_view port;
    bool has_port = false;
    if (!address.empty() && address.front() == '[') {  // [IPv6]:PORT
      const auto close = address.find(']');
      if (close == std::string_view::npos)
        return fmt::format("broker '{}' opens '[' and never closes it", entry);
      host = address.substr(0, close + 1);
      if (close + 1 < address.size()) {
        if (address[close + 1] != ':')
          return fmt::format("broker '{}': expected ':PORT' after ']'", entry);
        has_port = true;
        port = address.substr(close + 2);
      }
    } else if (address.find(':') == address.rfind(':') &&
               address.find(':') != std::string_view::npos) {  // HOST:PORT, not bare IPv6
      const auto colon = address.find(':');
      host = address.substr(0, colon);
      has_port = true;
      port = address.substr(colon + 1);
    }
    if (host.empty() || host == "[]")
      return fmt::format("broker '{}' names no host (HOST:PORT, e.g. 127.0.0.1:9092)", entry);
    if (!has_port) continue;  // librdkafka's default port, 9092
    const bool digits = !port.empty() && port.size() <= 5 &&
                        std::all_of(port.begin(), port.end(),
                                    [](char c) { return c >= '0' && c <= '9'; });
    const int number = digits ? std::stoi(std::string(port)) : 0;
    if (number < 1 || number > 65535)
      return fmt::format("broker '{}': the port must be a number from 1 to 65535, got '{}'",
                         entry, port);
  }
  return {};
}

std::string DbPathProblem(std::string_view db) {
  if (pg::IsPostgresUrl(db)) return {};
  if (db.empty()) return "the database path is empty: give a file path, e.g. --db outbox.db";
  if (db == ":memory:")
    return "':memory:' is a database that vanishes when the command exits: give a file path, "
           "e.g. --db outbox.db";
  if (db.rfind("file:", 0) == 0)
    return fmt::format("'{}' is an SQLite URI: give a plain file path, e.g. --db {}", db,
                       db.substr(5).empty() ? std::string_view("outbox.db") : db.substr(5));
  return {};
}

CLI::Validator IntegerInRange(std::int64_t min, std::int64_t max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        if (const std::optional<std::int64_t> value = ParseInteger(text, min, max)) {
          // Decimal, as read here: CLI11 converts with strtoll base 0, so "010" would become 8
          // (octal) and "09" an error; a leading zero means nothing to a user.
          text = std::to_string(*value);
          return {};
        }
        if (min == 1)
          return fmt::format("must be a positive integer (at most {}), got '{}'", max, text);
        return fmt::format("must be a whole number between {} and {}, got '{}'", min, max, text);
      },
      fmt::format("INTEGER in [{}, {}]", min, max), "IntegerInRange");
}

CLI::Validator LanguageName() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const std::string language = text.substr(0, text.find_first_of("_.@-"));
        if (language == "zh" || language == "en") {
          text = language;
          return {};
        }
        if (language == "C" || language == "POSIX") {
          text = "en";
          return {};
        }
        return fmt::format("must be en or zh (--lang or OUTBOX_LANG), got '{}'", text);
      },
      "{en,zh}", "LanguageName");
}

void AddBusinessTableOptions(CLI::App& sub, std::string& table, std::string& key) {
  CLI::Option* table_option = sub.add_option(
      "--business-table", table,
      "Your application's business table (e.g. orders): atomicity is judged against its rows "
      "instead of the lab's business_loan; each row's --business-key is an aggregate id");
  CLI::Option* key_option =
      sub.add_option("--business-key", key, "The column of --business-table holding the aggregate id");
  table_option->needs(key_option);
  key_option->needs(table_option);
}

void AddIsolationOption(CLI::App& sub, std::string& isolation) {
  sub.add_option("--isolation", isolation,
                 "Read the topic as read_committed (librdkafka's default: records of aborted or "
                 "open Kafka transactions are not seen) or read_uncommitted (every record "
                 "written, aborted ones too)")
      ->check(CLI::IsMember({"read_committed", "read_uncommitted"}))
      ->capture_default_str();
}

std::vector<std::pair<std::string, std::string>> WithIsolation(
    std::vector<std::pair<std::string, std::string>> properties, const std::string& isolation) {
  properties.emplace_back("isolation.level", isolation);
  return properties;
}

}  // namespace outbox::cli
