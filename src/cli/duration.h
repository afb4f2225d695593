// Durations on the command line: "500ms", "10s", "5m", "12h", "7d".
#pragma once

#include <cstdint>
#include <string>

namespace outbox::cli {

// Returns the duration in ms. Throws ConfigError for anything but a
// non-negative integer followed by ms, s, m, h or d (what names the option).
std::int64_t ParseDurationMs(const std::string& what, const std::string& text);

}  // namespace outbox::cli
