#include "outbox/duration.h"

#include <fmt/format.h>

#include <limits>

#include "outbox/parse_integer.h"

namespace outbox {
namespace {

struct Unit {
  const char* suffix;
  std::int64_t ms;
};
constexpr Unit kUnits[] = {{"d", 86'400'000}, {"h", 3'600'000}, {"m", 60'000}, {"s", 1000}, {"ms", 1}};

}  // namespace

std::optional<std::int64_t> ParseDurationMs(std::string_view text) {
  const auto prefix = ParseIntegerPrefix(text);
  if (!prefix || prefix->value < 0 || (!text.empty() && text.front() == '-')) return std::nullopt;
  for (const Unit& unit : kUnits) {
    if (prefix->rest != unit.suffix) continue;
    if (prefix->value > std::numeric_limits<std::int64_t>::max() / unit.ms) return std::nullopt;
    return prefix->value * unit.ms;
  }
  return std::nullopt;
}

std::string FormatDuration(std::int64_t ms) {
  for (const Unit& unit : kUnits)
    if (ms != 0 && ms % unit.ms == 0) return fmt::format("{}{}", ms / unit.ms, unit.suffix);
  return fmt::format("{}ms", ms);
}

}  // namespace outbox
