// ParseInteger: the one parser of base-10 integers from text (command-line
// counts, OUTBOX_FAILPOINTS numbers, --expect values, broker-control replies,
// durations), built on std::from_chars so that "12abc", " 12", "+12", "" and
// out-of-range values are all rejected the same way.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

namespace outbox {

// text as a whole base-10 integer in [min, max]: optional leading '-', then
// digits, nothing else (no spaces, no '+', no suffix). nullopt when text is
// anything else or the value lies outside [min, max] or int64_t. Never throws.
std::optional<std::int64_t> ParseInteger(
    std::string_view text, std::int64_t min = std::numeric_limits<std::int64_t>::min(),
    std::int64_t max = std::numeric_limits<std::int64_t>::max());

// The leading integer of text and the rest, e.g. "500ms" -> {500, "ms"}: the
// digits (with an optional leading '-') that from_chars accepts, then whatever
// follows. nullopt when text does not start with an integer that fits int64_t.
struct IntegerPrefix {
  std::int64_t value = 0;
  std::string_view rest;
};
std::optional<IntegerPrefix> ParseIntegerPrefix(std::string_view text);

}  // namespace outbox
