// Untrusted bytes (from the database, the topic or a history) as text of an HTML page: made
// valid UTF-8, then escaped. Thread-safety: plain functions over values.
#pragma once

#include <string>
#include <string_view>

namespace outbox::lab {

// bytes with every invalid UTF-8 sequence (overlong, surrogate, truncated,
// above U+10FFFF) replaced by U+FFFD and every C0 control but tab and newline
// replaced by U+FFFD. Source: the Unicode Standard, ch. 3, table 3-7
// (well-formed UTF-8 byte sequences).
std::string SanitizeUtf8(std::string_view bytes);

// SanitizeUtf8, then & < > " ' as character references: safe as element text
// and as a quoted attribute value.
std::string EscapeHtml(std::string_view bytes);

}  // namespace outbox::lab
