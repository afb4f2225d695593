// Duration options: one typed style for every option that takes a length of
// time ("500ms", "10s", "5m", "12h", "7d"; outbox/duration.h). The option
// holds the value in ms; a bad value is a usage error (exit 2), reported
// while the command line is parsed.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace outbox::cli {

// Adds option name (e.g. "--delivery-timeout", or "--delivery-timeout,--send-timeout"
// for an alias) bound to ms, accepting a duration in [min_ms, max_ms] and
// showing the current value of ms as its default. legacy_ms_name (e.g.
// "--delivery-timeout-ms"), when not empty, is an option listed under
// "Deprecated" in --help that takes a plain integer of ms in the same range
// into the same variable, so older scripts keep working.
CLI::Option* AddDurationOption(CLI::App& app, const std::string& name, std::int64_t& ms,
                               const std::string& description, std::int64_t min_ms,
                               std::int64_t max_ms, const std::string& legacy_ms_name = "");

// --read-timeout DURATION (default 10s, at most 1h): the bound on reading a
// topic (verify, check, consume); the deprecated --timeout-ms N still works.
CLI::Option* AddReadTimeoutOption(CLI::App& sub, std::int64_t& ms);

}  // namespace outbox::cli
