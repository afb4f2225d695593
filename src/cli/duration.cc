#include "cli/duration.h"

#include <fmt/format.h>

#include "outbox/duration.h"

namespace outbox::cli {

CLI::Option* AddDurationOption(CLI::App& app, const std::string& name, std::int64_t& ms,
                               const std::string& description, std::int64_t min_ms,
                               std::int64_t max_ms, const std::string& legacy_ms_name) {
  // A transform: "10s" becomes "10000" before CLI11 converts it into ms.
  const CLI::Validator to_ms(
      [min_ms, max_ms](std::string& text) -> std::string {
        const auto value = ParseDurationMs(text);
        // Digits and a unit that overflow 64-bit ms are a duration, only too long.
        const std::size_t digits = text.find_first_not_of("0123456789");
        const std::string unit = digits == std::string::npos ? "" : text.substr(digits);
        const bool duration_shaped = digits > 0 && (unit == "ms" || unit == "s" || unit == "m" ||
                                                    unit == "h" || unit == "d");
        if (!value && !duration_shaped)
          return fmt::format("expected a duration such as 500ms, 10s, 5m, 12h or 7d, got '{}'",
                             text);
        if (!value || *value < min_ms || *value > max_ms)
          return fmt::format("must be between {} and {}, got '{}'", FormatDuration(min_ms),
                             FormatDuration(max_ms), text);
        text = std::to_string(*value);
        return {};
      },
      "DURATION", "Duration");
  CLI::Option* option =
      app.add_option(name, ms, description)
                             ->transform(to_ms)
                             ->type_name("DURATION")
                             ->default_str(FormatDuration(ms));
  // Both spellings at once are a usage error (exit 2), as any option given twice: the later
  // one would win silently.
  if (!legacy_ms_name.empty())
    app.add_option(legacy_ms_name, ms, fmt::format("Same as {}, in plain ms (deprecated)", name))
        ->check(CLI::Range(min_ms, max_ms))
        ->excludes(option)
        ->group("Deprecated");
  return option;
}

CLI::Option* AddReadTimeoutOption(CLI::App& sub, std::int64_t& ms) {
  return AddDurationOption(sub, "--read-timeout", ms,
                           "Bound on reading the topic up to its end", 1, 3'600'000,
                           "--timeout-ms");
}

}  // namespace outbox::cli
