#include "ops/bearer_tokens.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "outbox/error.h"

namespace outbox::ops {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Equal bytes, in time that depends on the lengths only.
bool SameSecret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  return diff == 0;
}

// Shorter secrets are guessable; 16 bytes is what `openssl rand -hex 8` prints.
constexpr std::size_t kMinTokenBytes = 16;

}  // namespace

std::vector<NamedToken> ParseTokens(std::string_view text, const std::string& source) {
  std::vector<NamedToken> tokens;
  std::size_t line_no = 0;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    std::string_view line = Trim(text.substr(0, end));
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos || Trim(line.substr(0, colon)).empty())
      throw ConfigError(fmt::format("token {} line {}: expected name:token", source, line_no));
    NamedToken t{std::string(Trim(line.substr(0, colon))), std::string(Trim(line.substr(colon + 1)))};
    if (t.token.size() < kMinTokenBytes)
      throw ConfigError(fmt::format("token {} line {}: the token of '{}' is {} bytes; at least {} "
                                    "(e.g. openssl rand -hex 16)",
                                    source, line_no, t.name, t.token.size(), kMinTokenBytes));
    for (const NamedToken& other : tokens)
      if (other.token == t.token)
        throw ConfigError(fmt::format("token {} line {}: '{}' has the same token as '{}'", source,
                                      line_no, t.name, other.name));
    tokens.push_back(std::move(t));
  }
  return tokens;
}

std::vector<NamedToken> LoadTokenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("read token file '{}': cannot open it", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError(fmt::format("read token file '{}': read error", path));
  return ParseTokens(text.str(), "file '" + path + "'");
}

std::optional<std::string> Authorize(const std::vector<NamedToken>& tokens,
                                     std::string_view header) {
  constexpr std::string_view kScheme = "Bearer ";
  if (header.substr(0, kScheme.size()) != kScheme) return std::nullopt;
  const std::string_view given = Trim(header.substr(kScheme.size()));
  std::optional<std::string> name;
  for (const NamedToken& t : tokens)  // every token compared: no early exit on a match
    if (SameSecret(t.token, given)) name = t.name;
  return name;
}

}  // namespace outbox::ops
