#include "cli/usage_hints.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>

namespace outbox::cli {
namespace {

constexpr std::string_view kRunShDbPrefix = "-Doutbox.db";

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

bool IsOptionToken(std::string_view token) { return token.size() > 1 && token[0] == '-'; }

// "--no-kafka" of "--no-kafka=1".
std::string OptionName(std::string_view token) {
  return std::string(token.substr(0, std::min(token.find('='), token.size())));
}

std::size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// "outbox-lab" or "./run.sh OutboxLab": the program part of a command line.
std::string Program(const Invocation& invocation) {
  if (invocation.frontend.empty()) return "outbox-lab";
  return fmt::format("{} OutboxLab", ShellQuote(invocation.frontend));
}

// How to pass a database path: "--db PATH" or, behind run.sh, "-Doutbox.db=PATH".
std::string DbArgument(const Invocation& invocation, std::string_view path) {
  if (invocation.frontend.empty()) return fmt::format("--db {}", ShellQuote(path));
  return fmt::format("{}={}", kRunShDbPrefix, ShellQuote(path));
}

std::vector<const CLI::App*> Subcommands(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App*) { return true; });
}

// The chosen subcommand, or null when CLI11 stopped before one.
const CLI::App* Chosen(const CLI::App& app) {
  const CLI::App* chosen = nullptr;
  for (const CLI::App* sub : Subcommands(app))
    if (sub->parsed()) chosen = sub;
  return chosen;
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += i + 1 == items.size() ? " and " : ", ";
    out += items[i];
  }
  return out;
}

// The option of app or of chosen that token (an option name) names, if any.
const CLI::Option* KnownOption(const CLI::App& app, const CLI::App* chosen, const std::string& name) {
  if (chosen)
    if (const CLI::Option* option = chosen->get_option_no_throw(name)) return option;
  return app.get_option_no_throw(name);
}

std::vector<std::string> OptionNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
    for (const std::string& name : option->get_snames()) names.push_back("-" + name);
  }
  return names;
}

std::string UnknownOption(const CLI::App& app, const CLI::App* chosen, const std::string& token,
                          const Invocation& invocation) {
  const std::string name = OptionName(token);
  std::vector<std::string> owners;
  for (const CLI::App* sub : Subcommands(app))
    if (sub->get_option_no_throw(name)) owners.push_back(sub->get_name());
  const std::string program = Program(invocation);
  const bool chosen_owns =
      chosen && std::find(owners.begin(), owners.end(), chosen->get_name()) != owners.end();
  if (!owners.empty() && chosen && !chosen_owns)
    return fmt::format("{} has no option {}; {} {} it (see `{} {} --help`)", chosen->get_name(),
                       name, Join(owners), owners.size() == 1 ? "has" : "have", program,
                       chosen->get_name());
  // Before its subcommand (the app's own options may go anywhere, a subcommand's only after it).
  if (!owners.empty()) {
    const std::string example = chosen_owns ? chosen->get_name() : owners.front();
    return fmt::format("{} is an option of {}: write it after the subcommand, as in `{} {} {}`",
                       name, chosen_owns ? example : Join(owners), program, example, token);
  }
  std::vector<std::string> names = OptionNames(app);
  if (chosen) {
    const std::vector<std::string> own = OptionNames(*chosen);
    names.insert(names.begin(), own.begin(), own.end());
  }
  const std::string help = chosen ? fmt::format("{} {} --help", program, chosen->get_name())
                                  : fmt::format("{} --help", program);
  const std::string closest = ClosestName(name, names);
  if (!closest.empty())
    return fmt::format("unknown option {}; did you mean {}? (see `{}`)", name, closest, help);
  return fmt::format("unknown option {} (see `{}`)", name, help);
}

}  // namespace

std::string ShellQuote(std::string_view text) {
  if (text.empty()) return "''";
  const bool plain = std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("_./=:@%+,-").find(c) != std::string_view::npos;
  });
  if (plain) return std::string(text);
  std::string out = "'";
  for (char c : text) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

std::string CommandLine(const Invocation& invocation, std::string_view args) {
  if (invocation.frontend.empty())
    return fmt::format("outbox-lab {} {}", DbArgument(invocation, invocation.db), args);
  return fmt::format("{} {} OutboxLab {}", ShellQuote(invocation.frontend),
                     DbArgument(invocation, invocation.db), args);
}

std::string ClosestName(std::string_view typed, const std::vector<std::string>& names) {
  if (typed.empty()) return {};
  for (const std::string& name : names)
    if (StartsWith(name, typed)) return name;
  const std::size_t allowed = std::max<std::size_t>(1, typed.size() / 3);
  std::string best;
  std::size_t best_distance = allowed + 1;
  for (const std::string& name : names) {
    const std::size_t distance = EditDistance(typed, name);
    if (distance < best_distance) {
      best = name;
      best_distance = distance;
    }
  }
  return best;
}

std::string ExplainParseError(const CLI::App& app, const CLI::ParseError& error,
                              const std::vector<std::string>& argv, const Invocation& invocation) {
  const CLI::App* chosen = Chosen(app);
  const std::string program = Program(invocation);

  // The chapter's -Doutbox.db reached the binary: with a space before its path (run.sh passes
  // that on untouched), or given to outbox-lab directly.
  for (std::size_t i = 1; i < argv.size(); ++i) {
    const std::string& token = argv[i];
    if (token == kRunShDbPrefix) {
      const std::string path = i + 1 < argv.size() ? argv[i + 1] : "PATH";
      if (!invocation.frontend.empty())
        return fmt::format("{} takes its path after '=', with no space: {}={}", kRunShDbPrefix,
                           kRunShDbPrefix, ShellQuote(path));
      return fmt::format("{} is run.sh's spelling (the chapter's); outbox-lab takes --db {}",
                         kRunShDbPrefix, ShellQuote(path));
    }
    if (StartsWith(token, std::string(kRunShDbPrefix) + "="))
      return fmt::format("{} is run.sh's spelling (the chapter's); outbox-lab takes --db {}",
                         token, ShellQuote(token.substr(kRunShDbPrefix.size() + 1)));
  }

  // What CLI11 could not place, in command-line order.
  const std::vector<std::string> stray = app.remaining(true);
  std::size_t first = argv.size();
  for (std::size_t i = 1; i < argv.size() && first == argv.size(); ++i)
    if (std::find(stray.begin(), stray.end(), argv[i]) != stray.end()) first = i;

  if (first < argv.size()) {
    const std::string& token = argv[first];
    // A value with spaces, unquoted: the shell split it, and its tail follows the option's value
    // (--db /tmp/my dir/x.db reset, or --db=/tmp/my dir/x.db reset). Only when a subcommand
    // came after it: without one, the word is more likely a mistyped subcommand.
    const bool after_equals = first >= 2 && IsOptionToken(argv[first - 1]) &&
                              argv[first - 1].find('=') != std::string::npos;
    const bool after_value = first >= 3 && IsOptionToken(argv[first - 2]);
    if (chosen && !IsOptionToken(token) && (after_equals || after_value)) {
      const std::string& option_token = after_equals ? argv[first - 1] : argv[first - 2];
      const std::string name = OptionName(option_token);
      const CLI::Option* option = KnownOption(app, chosen, name);
      if (option && option->get_type_size_max() > 0) {
        std::string value =
            after_equals ? option_token.substr(name.size() + 1) : argv[first - 1];
        // Up to run.sh's OutboxLab, which follows the path when run.sh took a piece for the
        // subcommand and so left the word in.
        for (std::size_t i = first; i < argv.size() && !IsOptionToken(argv[i]) &&
                                    argv[i] != "OutboxLab" &&
                                    std::find(stray.begin(), stray.end(), argv[i]) != stray.end();
             ++i)
          value += " " + argv[i];
        const std::string fixed = option->check_name("--db")
                                      ? DbArgument(invocation, value)
                                      : fmt::format("{} {}", name, ShellQuote(value));
        return fmt::format("'{}' follows the value of {}: a value with spaces must be quoted, as "
                           "in {}",
                           token, name, fixed);
      }
    }
    if (IsOptionToken(token)) return UnknownOption(app, chosen, token, invocation);
    if (token == "OutboxLab")
      return "OutboxLab is run.sh's word (the chapter's Java class); drop it when calling "
             "outbox-lab directly";
    if (!chosen) {
      std::vector<std::string> names;
      for (const CLI::App* sub : Subcommands(app)) names.push_back(sub->get_name());
      const std::string closest = ClosestName(token, names);
      if (!closest.empty())
        return fmt::format("unknown subcommand '{}'; did you mean '{}'? (see --help)", token,
                           closest);
      return fmt::format("unknown subcommand '{}' (see --help for the list)", token);
    }
    return fmt::format("{} takes no argument '{}' (see `{} {} --help`)", chosen->get_name(), token,
                       program, chosen->get_name());
  }
  if (!chosen && error.get_name() == "RequiredError")
    return "a subcommand is required (see --help for the list)";
  // A missing argument (write-hold without N): name the command and show one that works.
  if (chosen && error.get_name() == "RequiredError")
    for (const CLI::Option* option : chosen->get_options())
      if (option->get_required() && option->count() == 0 && option->get_positional()) {
        const std::string name = option->get_name();
        const std::string example = name == "N" ? "5" : name;
        return fmt::format("{} needs {} ({}), e.g. `{}`", chosen->get_name(), name,
                           option->get_description(),
                           CommandLine(invocation, chosen->get_name() + " " + example));
      }
  if (error.get_name() == "ArgumentMismatch") {
    // An option that takes one value given twice, perhaps under its two names (relay's
    // --send-timeout is --delivery-timeout): CLI11 says only "At Most 1 required but received 2".
    std::map<const CLI::Option*, std::vector<std::string>> spellings;
    for (std::size_t i = 1; i < argv.size(); ++i) {
      if (!IsOptionToken(argv[i]) || !StartsWith(argv[i], "--")) continue;
      const std::string name = OptionName(argv[i]);
      if (const CLI::Option* option = KnownOption(app, chosen, name))
        if (option->get_multi_option_policy() == CLI::MultiOptionPolicy::Throw)
          spellings[option].push_back(name);
    }
    for (const auto& [option, names] : spellings) {
      if (names.size() < 2) continue;
      for (const std::string& name : names)
        if (name != names.front())
          return fmt::format("{} and {} are the same option; give one", names.front(), name);
      return fmt::format("{} is given {} times; give it once", names.front(), names.size());
    }
  }
  return error.what();
}

void ShowGlobalOptionsInSubcommandHelp(CLI::App& app) {
  const CLI::App& parent = app;
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    sub->footer([&parent]() -> std::string {
      const CLI::Option* help = parent.get_help_ptr();
      const std::vector<const CLI::Option*> options =
          parent.get_options([help](const CLI::Option* option) { return option != help; });
      const auto formatter = std::dynamic_pointer_cast<CLI::Formatter>(parent.get_formatter());
      if (!formatter) return {};
      return formatter->make_group("Global options (before or after the subcommand)", false,
                                   options);
    });
}

}  // namespace outbox::cli
