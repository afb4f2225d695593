// Usage hints: what main prints when CLI11 rejects a command line, and the
// command lines that other errors quote, spelled the way the user runs the lab
// (outbox-lab directly, or the chapter's ./run.sh -Doutbox.db=... OutboxLab).
//
// Nothing here parses a command line: CLI11 does, and these functions read
// what it left over (App::remaining) to name the fix (issue 15, section 4).
// Pure functions of their arguments; thread-safe.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace outbox::cli {

// How the user invoked the lab. run.sh exports OUTBOX_LAB_FRONTEND=<its own
// $0> (say "./run.sh") before it execs the binary; empty means directly.
struct Invocation {
  std::string frontend;  // "" or the path run.sh was called by
  std::string db;        // the --db value in effect
};

// text quoted for a POSIX shell: as is when it holds only [A-Za-z0-9_./=:@%+,-],
// else in single quotes ('it'\''s' for an embedded quote); '' for empty.
std::string ShellQuote(std::string_view text);

// The command line that runs args (e.g. "reset") on invocation.db, as the
// user would type it: "outbox-lab --db /tmp/x.db reset", or behind run.sh
// "./run.sh -Doutbox.db=/tmp/x.db OutboxLab reset". Paths are ShellQuoted.
std::string CommandLine(const Invocation& invocation, std::string_view args);

// The registered name closest to typed: a name that typed is a prefix of, or
// the nearest by edit distance (Levenshtein) when at most
// max(1, typed.size() / 3) edits away (the rule of git's "did you mean"); ""
// when none is that close. Ties go to the earlier name.
std::string ClosestName(std::string_view typed, const std::vector<std::string>& names);

// The one-line message for a command line app rejected with error (after
// app.parse(argc, argv) threw it; argv as given, argv[0] included). Says
// what was wrong and how to fix it when it can tell:
//   an unknown subcommand          "unknown subcommand 'verfy'; did you mean 'verify'? (see --help)"
//   -Doutbox.db PATH (space)       "-Doutbox.db takes its path after '=', with no space: ..."
//   -Doutbox.db=PATH given directly "... is run.sh's spelling; outbox-lab takes --db PATH"
//   a path with spaces, unquoted   "... quote a path with spaces: --db '/tmp/my dir/x.db'"
//   another subcommand's option    "reset has no option --no-kafka (verify has); ..."
//   no subcommand at all           "a subcommand is required: ... (see --help)"
// and CLI11's own message otherwise.
std::string ExplainParseError(const CLI::App& app, const CLI::ParseError& error,
                              const std::vector<std::string>& argv, const Invocation& invocation);

// Gives every subcommand of app a footer listing app's own options (the global
// ones: --db, --brokers, --topic, -X, ...), so each subcommand's --help shows
// every option it accepts. Call after the options and subcommands exist; the
// footers read app when --help prints, so app must outlive them.
void ShowGlobalOptionsInSubcommandHelp(CLI::App& app);

}  // namespace outbox::cli
