#include "cli/outage_text.h"

#include <fmt/format.h>

#include <ctime>

namespace outbox::cli {

std::string UtcTime(std::int64_t epoch_ms) {
  const auto seconds = static_cast<std::time_t>(epoch_ms / 1000);
  std::tm tm = {};
  gmtime_r(&seconds, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

std::string OutageText(const BrokerOutage& outage, std::int64_t rows_waiting) {
  std::string text =
      fmt::format("broker outage since {}: {}", UtcTime(outage.since_ms), outage.cause);
  if (rows_waiting >= 0) text += fmt::format(", {} rows waiting", rows_waiting);
  return text;
}

nlohmann::ordered_json OutageJson(const BrokerOutage& outage, std::int64_t rows_waiting) {
  nlohmann::ordered_json out = {{"since_ms", outage.since_ms},
                                {"since", UtcTime(outage.since_ms)},
                                {"cause", outage.cause},
                                {"owner", outage.owner},
                                {"noted_at_ms", outage.noted_at_ms},
                                {"retry_at_ms", outage.retry_at_ms}};
  if (rows_waiting >= 0)
    out["rows_waiting"] = rows_waiting;
  else
    out["rows_waiting"] = nullptr;
  return out;
}

}  // namespace outbox::cli
