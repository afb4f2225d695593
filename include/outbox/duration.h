// Durations as text: "500ms", "10s", "5m", "12h", "7d". The one spelling of a
// length of time on the command line (cli/duration.h binds it to options).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace outbox {

// The duration in ms: a non-negative integer (ParseIntegerPrefix) followed by
// exactly one of ms, s, m, h, d. nullopt for anything else ("", "10", "1.5s",
// "-1s", "10 s", "10sec") and when the value overflows int64_t ms. Never throws.
std::optional<std::int64_t> ParseDurationMs(std::string_view text);

// ms in the largest unit that divides it exactly: "1h" for 3600000, "1500ms"
// for 1500, "0ms" for 0. ParseDurationMs(FormatDuration(ms)) == ms for ms >= 0.
std::string FormatDuration(std::int64_t ms);

}  // namespace outbox
