#include "lab/report/html_text.h"

#include <algorithm>

namespace outbox::lab {

std::string SanitizeUtf8(std::string_view bytes) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  out.reserve(bytes.size());
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(bytes[i]); };
  std::size_t i = 0;
  while (i < bytes.size()) {
    const unsigned char b = byte(i);
    if (b < 0x80) {
      if (b < 0x20 && b != '\t' && b != '\n')
        out += kReplacement;
      else if (b == 0x7F)
        out += kReplacement;
      else
        out += static_cast<char>(b);
      ++i;
      continue;
    }
    // Table 3-7: the allowed range of the second byte depends on the first.
    std::size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;
    if (b >= 0xC2 && b <= 0xDF)
      length = 2;
    else if (b == 0xE0)
      length = 3, low = 0xA0;
    else if (b >= 0xE1 && b <= 0xEC)
      length = 3;
    else if (b == 0xED)
      length = 3, high = 0x9F;  // no surrogates
    else if (b >= 0xEE && b <= 0xEF)
      length = 3;
    else if (b == 0xF0)
      length = 4, low = 0x90;
    else if (b >= 0xF1 && b <= 0xF3)
      length = 4;
    else if (b == 0xF4)
      length = 4, high = 0x8F;  // nothing above U+10FFFF
    std::size_t good = 0;       // bytes of a valid sequence
    if (length > 0 && i + 1 < bytes.size() && byte(i + 1) >= low && byte(i + 1) <= high) {
      good = 2;
      while (good < length && i + good < bytes.size() && byte(i + good) >= 0x80 &&
             byte(i + good) <= 0xBF)
        ++good;
    }
    if (length > 0 && good == length) {
      out.append(bytes.substr(i, length));
      i += length;
    } else {
      // A maximal invalid prefix becomes one U+FFFD (Unicode's "substitution of maximal subparts").
      out += kReplacement;
      i += std::max<std::size_t>(good == 0 ? 1 : good, 1);
    }
  }
  return out;
}

std::string EscapeHtml(std::string_view bytes) {
  const std::string clean = SanitizeUtf8(bytes);
  std::string out;
  out.reserve(clean.size());
  for (const char c : clean) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace outbox::lab
