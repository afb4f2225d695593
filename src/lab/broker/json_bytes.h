// JSON for untrusted bytes. Outbox rows come from other programs (issue 9): an
// event id, payload or aggregate id may hold bytes that are not UTF-8, and
// nlohmann::json throws type_error.316 when it dumps such a string. Every JSON
// output of the lab (history, check/verify/status/bench --json) encodes such
// fields through BytesToJson, so no row's content can stop a command, and
// BytesFromJson reads them back byte for byte.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace outbox::lab {

// True when bytes is well-formed UTF-8 (RFC 3629: no overlongs, no
// surrogates, nothing above U+10FFFF).
bool IsValidUtf8(std::string_view bytes);

// Text that is always valid UTF-8 and shows every byte: valid UTF-8 except
// control characters passes unchanged; each other byte becomes \xHH, and a
// backslash becomes \\ so the escaping cannot be confused with the data.
// For text outputs (one line a record) and for BytesToJson's "text".
std::string EscapeBytes(std::string_view bytes);

// A JSON value that always dumps: the string itself when bytes is valid
// UTF-8, else {"text": EscapeBytes(bytes), "hex": lowercase hex of bytes}.
nlohmann::json BytesToJson(std::string_view bytes);

// The bytes BytesToJson encoded; std::nullopt for any other JSON value (a
// number, an object without a well-formed "hex").
std::optional<std::string> BytesFromJson(const nlohmann::json& value);

// One line of JSON for value, whatever bytes its strings hold: every string
// value that is not valid UTF-8 is written as BytesToJson writes it, and every
// such object key as EscapeBytes(key) (injective, so keys stay distinct).
// Never throws type_error.316; the outputs of check, verify, status, bench
// and relay --json go through it, so a row's content cannot stop them.
std::string DumpJson(const nlohmann::json& value);
std::string DumpJson(const nlohmann::ordered_json& value);

}  // namespace outbox::lab
