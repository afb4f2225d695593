#include "cli/duration.h"

#include <fmt/format.h>

#include <charconv>
#include <limits>

#include "outbox/error.h"

namespace outbox::cli {

std::int64_t ParseDurationMs(const std::string& what, const std::string& text) {
  std::int64_t value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  const std::string unit(ptr, end);
  std::int64_t scale = 0;
  if (unit == "ms") scale = 1;
  else if (unit == "s") scale = 1000;
  else if (unit == "m") scale = 60'000;
  else if (unit == "h") scale = 3'600'000;
  else if (unit == "d") scale = 86'400'000;
  if (ec != std::errc() || ptr == begin || value < 0 || scale == 0 ||
      value > std::numeric_limits<std::int64_t>::max() / scale)
    throw ConfigError(fmt::format(
        "{} '{}': expected a duration such as 500ms, 10s, 5m, 12h or 7d", what, text));
  return value * scale;
}

}  // namespace outbox::cli
