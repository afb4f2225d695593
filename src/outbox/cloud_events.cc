#include "outbox/cloud_events.h"

#include <fmt/format.h>

#include <algorithm>

#include "outbox/error.h"

namespace outbox {
namespace {

// Year, month, day of a day count since 1970-01-01 in the proleptic Gregorian calendar
// (Howard Hinnant, "chrono-Compatible Low-Level Date Algorithms", civil_from_days).
struct CivilDate {
  std::int64_t year;
  unsigned month;
  unsigned day;
};
CivilDate CivilFromDays(std::int64_t z) {
  z += 719468;
  const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const auto doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  const unsigned d = doy - (153 * mp + 2) / 5 + 1;
  const unsigned m = mp < 10 ? mp + 3 : mp - 9;
  const std::int64_t y = static_cast<std::int64_t>(yoe) + era * 400 + (m <= 2 ? 1 : 0);
  return {y, m, d};
}

// "" when text is valid UTF-8 (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF)
// free of the control characters U+0000-U+001F and U+007F-U+009F; else why, with the 1-based
// position of the first offending byte.
std::string StringProblem(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c < 0x20 || c == 0x7f)
      return fmt::format("byte {} is a control character (0x{:02x})", i + 1, c);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t length = 0;
    std::uint32_t code = 0;
    if (c >= 0xc2 && c <= 0xdf) length = 2, code = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) length = 3, code = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) length = 4, code = c & 0x07;
    else return fmt::format("byte {} is not UTF-8 (0x{:02x})", i + 1, c);
    if (n - i < length) return fmt::format("byte {} starts a UTF-8 sequence cut short", i + 1);
    for (std::size_t k = 1; k < length; ++k) {
      if ((p[i + k] & 0xc0) != 0x80)
        return fmt::format("byte {} is not UTF-8 (0x{:02x})", i + k + 1, p[i + k]);
      code = (code << 6) | (p[i + k] & 0x3f);
    }
    const bool overlong = (length == 3 && code < 0x800) || (length == 4 && code < 0x10000);
    if (overlong || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff))
      return fmt::format("byte {} is not UTF-8 (0x{:02x})", i + 1, c);
    if (code >= 0x80 && code <= 0x9f)
      return fmt::format("byte {} is a control character (U+{:04X})", i + 1, code);
    i += length;
  }
  return {};
}

ParsedHeaders Failure(std::string why) {
  ParsedHeaders parsed;
  parsed.error = "cloudevents: " + std::move(why);
  return parsed;
}

}  // namespace

HeaderConvention ParseHeaderConvention(const std::string& text) {
  if (text == "lab") return HeaderConvention::kLab;
  if (text == "cloudevents") return HeaderConvention::kCloudEvents;
  throw ConfigError(fmt::format("header convention '{}': expected lab or cloudevents", text));
}

std::string CloudEventsSourceProblem(std::string_view source) {
  constexpr std::size_t kMaxBytes = 4096;
  if (source.empty()) return "a CloudEvents source cannot be empty (it is required)";
  if (source.size() > kMaxBytes)
    return fmt::format("a CloudEvents source has at most {} bytes, got {}", kMaxBytes,
                       source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    const auto c = static_cast<unsigned char>(source[i]);
    if (c <= 0x20 || c >= 0x7f)
      return fmt::format(
          "a CloudEvents source is a URI reference: printable ASCII without spaces (byte {} is "
          "0x{:02x})",
          i + 1, c);
  }
  return {};
}

std::string Rfc3339FromEpochMs(std::int64_t epoch_ms) {
  // The years 0000-9999, as ms since the epoch: RFC 3339's four-digit year.
  constexpr std::int64_t kMin = -62167219200000;  // 0000-01-01T00:00:00.000Z
  constexpr std::int64_t kMax = 253402300799999;  // 9999-12-31T23:59:59.999Z
  if (epoch_ms < kMin || epoch_ms > kMax) return {};
  constexpr std::int64_t kMsPerDay = 86'400'000;
  std::int64_t days = epoch_ms / kMsPerDay;
  std::int64_t ms_of_day = epoch_ms % kMsPerDay;
  if (ms_of_day < 0) ms_of_day += kMsPerDay, --days;  // floor, for times before 1970
  const CivilDate date = CivilFromDays(days);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", date.year, date.month, date.day,
                     ms_of_day / 3'600'000, ms_of_day / 60'000 % 60, ms_of_day / 1000 % 60,
                     ms_of_day % 1000);
}

ParsedHeaders CloudEventsHeaders(const OutboxRow& row, std::string_view source) noexcept {
  try {
    const OutboxEvent& event = row.event;
    struct Field {
      const char* name;
      const std::string& value;
      const char* header;
    };
    for (const Field& field : {Field{"event_id", event.event_id, "ce_id"},
                               Field{"event_type", event.event_type, "ce_type"}}) {
      if (field.value.empty())
        return Failure(fmt::format("{} is empty ({} is required)", field.name, field.header));
    }
    for (const Field& field : {Field{"event_id", event.event_id, "ce_id"},
                               Field{"event_type", event.event_type, "ce_type"},
                               Field{"aggregate_id", event.aggregate_id, "ce_subject"}}) {
      const std::string problem = StringProblem(field.value);
      if (!problem.empty())
        return Failure(fmt::format("{} is not a CloudEvents string: {}", field.name, problem));
    }
    const std::string time = Rfc3339FromEpochMs(event.created_at_ms);
    if (time.empty())
      return Failure(fmt::format("created_at {} ms is outside the years 0000-9999 of RFC 3339",
                                 event.created_at_ms));
    ParsedHeaders parsed;
    parsed.headers.push_back({"ce_specversion", "1.0"});
    parsed.headers.push_back({"ce_id", event.event_id});
    parsed.headers.push_back({"ce_source", std::string(source)});
    parsed.headers.push_back({"ce_type", event.event_type});
    if (!event.aggregate_id.empty()) parsed.headers.push_back({"ce_subject", event.aggregate_id});
    parsed.headers.push_back({"ce_time", time});
    return parsed;
  } catch (const std::exception& e) {
    return Failure(fmt::format("cannot be built: {}", e.what()));  // out of memory
  }
}

std::string CloudEventsCollision(const std::vector<RecordHeader>& headers) noexcept {
  try {
    for (const RecordHeader& h : headers)
      if (std::find(kCloudEventsHeaderNames.begin(), kCloudEventsHeaderNames.end(), h.name) !=
          kCloudEventsHeaderNames.end())
        return fmt::format("headers column: \"{}\" is a header the relay sets itself "
                           "(--headers cloudevents)",
                           h.name);
    return {};
  } catch (...) {
    return "headers column: cannot be checked against the CloudEvents headers";
  }
}

}  // namespace outbox
