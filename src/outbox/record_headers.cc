#include "outbox/record_headers.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

namespace outbox {
namespace {

// A name for an error line: JSON-escaped (valid UTF-8 after parsing, but it may hold control
// characters or a newline that would break the one-line rule).
std::string Quoted(const std::string& name) {
  return nlohmann::json(name).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

ParsedHeaders Failure(std::string why) {
  ParsedHeaders parsed;
  parsed.error = "headers column: " + std::move(why);
  return parsed;
}

}  // namespace

ParsedHeaders ParseRecordHeaders(const std::string& column) noexcept {
  try {
    if (column.empty()) return {};
    // The JSON parser would stop at a NUL and pass what follows it unread.
    if (const auto nul = column.find('\0'); nul != std::string::npos)
      return Failure(fmt::format("a NUL byte at byte {}", nul + 1));
    // ordered_json keeps the object's order; a repeated name keeps its last value.
    nlohmann::ordered_json object;
    try {
      object = nlohmann::ordered_json::parse(column);
    } catch (const nlohmann::json::parse_error& e) {
      // e.byte counts the bytes read, 1-based: one past the end means the text stopped early.
      if (e.byte > column.size())
        return Failure(fmt::format("invalid JSON: it ends after {} bytes", column.size()));
      return Failure(fmt::format("invalid JSON at byte {}", e.byte));
    }
    if (!object.is_object()) return Failure(fmt::format("a JSON {}, not an object of string values", object.type_name()));
    if (object.size() > kMaxRecordHeaders)
      return Failure(fmt::format("{} headers, more than {}", object.size(), kMaxRecordHeaders));
    ParsedHeaders parsed;
    std::size_t bytes = 0;
    for (const auto& [name, value] : object.items()) {
      if (name.empty()) return Failure("a header with an empty name");
      if (std::find(kRelayHeaderNames.begin(), kRelayHeaderNames.end(), name) != kRelayHeaderNames.end())
        return Failure(fmt::format("{} is a header the relay sets itself", Quoted(name)));
      if (!value.is_string())
        return Failure(fmt::format("the value of {} is a {}, not a string", Quoted(name), value.type_name()));
      // An escaped NUL (\u0000): librdkafka's clients read a header name as a C string, so
      // "event_id\u0000" would reach them as a second event_id header, a forgery.
      if (name.find('\0') != std::string::npos)
        return Failure(fmt::format("the name {} holds a NUL character", Quoted(name)));
      if (value.get_ref<const std::string&>().find('\0') != std::string::npos)
        return Failure(fmt::format("the value of {} holds a NUL character", Quoted(name)));
      parsed.headers.push_back({name, value.get<std::string>()});
      bytes += name.size() + parsed.headers.back().value.size();
    }
    if (bytes > kMaxRecordHeaderBytes)
      return Failure(fmt::format("{} bytes of header names and values, more than {}", bytes,
                                 kMaxRecordHeaderBytes));
    return parsed;
  } catch (const std::exception& e) {
    // Out of memory or a nesting too deep for the parser: still the row's fault, not the relay's.
    return Failure(fmt::format("cannot be read: {}", e.what()));
  }
}

}  // namespace outbox
