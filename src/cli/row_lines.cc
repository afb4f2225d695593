#include "cli/row_lines.h"

#include <fmt/format.h>

namespace outbox::cli {

void AddRowLineOptions(CLI::App& sub, RowLineOptions& options) {
  CLI::Option* quiet = sub.add_flag("--quiet", options.quiet, "Print no line per loan");
  sub.add_flag("--verbose", options.verbose,
               fmt::format("Print a line per loan for any N (by default only up to N={})",
                           kRowLinesUpTo))
      ->excludes(quiet);
}

bool PrintsRowLines(const RowLineOptions& options, std::int64_t count) {
  if (options.verbose) return true;
  if (options.quiet) return false;
  return count <= kRowLinesUpTo;
}

}  // namespace outbox::cli
