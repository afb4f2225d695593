#include "outbox/parse_integer.h"

#include <charconv>
#include <system_error>

namespace outbox {

std::optional<IntegerPrefix> ParseIntegerPrefix(std::string_view text) {
  std::int64_t value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr == begin) return std::nullopt;
  return IntegerPrefix{value, text.substr(static_cast<std::size_t>(ptr - begin))};
}

std::optional<std::int64_t> ParseInteger(std::string_view text, std::int64_t min, std::int64_t max) {
  const auto prefix = ParseIntegerPrefix(text);
  if (!prefix || !prefix->rest.empty() || prefix->value < min || prefix->value > max)
    return std::nullopt;
  return prefix->value;
}

}  // namespace outbox
