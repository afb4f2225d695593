// The bearer tokens that may call relay --http's mutating endpoints (POST /parked/unpark), each
// with a name the relay logs with every change it makes for it. Any thread after loading.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace outbox::ops {

struct NamedToken {
  std::string name;   // who holds it: logged, never the secret
  std::string token;  // the secret a client sends as "Authorization: Bearer <token>"
};

// Tokens from text, one "name:token" a line; blank lines and lines starting with # are skipped;
// surrounding spaces and a trailing \r are dropped. Throws ConfigError naming where (source, e.g.
// the file's path, and line number) for a line without ':' or with an empty name, a token shorter
// than 16 bytes, or a token given twice.
std::vector<NamedToken> ParseTokens(std::string_view text, const std::string& source);

// Reads path (ParseTokens). Throws ConfigError when it cannot be read.
std::vector<NamedToken> LoadTokenFile(const std::string& path);

// The name of the token that header (the Authorization header's value) carries, or nullopt when
// it carries none ("Bearer " missing) or one not in tokens. Compares in time independent of
// where the secrets differ.
std::optional<std::string> Authorize(const std::vector<NamedToken>& tokens,
                                     std::string_view header);

}  // namespace outbox::ops
