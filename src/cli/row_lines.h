// Per-row output of the writing commands (write, write-hold): one line per
// loan for a small N, as the chapter shows for its 5 loans, and only the
// final line for a large one unless asked (issue 15: `write 100000` must not
// print 100,000 lines).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>

namespace outbox::cli {

// Up to this many loans, a command prints one line per loan by default: a
// screenful, and more than the chapter's 5.
inline constexpr std::int64_t kRowLinesUpTo = 20;

struct RowLineOptions {
  bool quiet = false;    // --quiet: never a line per row
  bool verbose = false;  // --verbose: a line per row for any N
};

// Adds --quiet and --verbose (mutually exclusive) to sub.
void AddRowLineOptions(CLI::App& sub, RowLineOptions& options);

// Whether a command writing count rows prints a line per row: --verbose
// yes, --quiet no, otherwise count <= kRowLinesUpTo.
bool PrintsRowLines(const RowLineOptions& options, std::int64_t count);

}  // namespace outbox::cli
