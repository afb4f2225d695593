#include "lab/broker/json_bytes.h"

#include <fmt/format.h>

#include <cstdint>

namespace outbox::lab {
namespace {

// Length of the well-formed UTF-8 sequence at the start of bytes, or 0
// (RFC 3629 table of well-formed byte sequences).
std::size_t Utf8SequenceLength(std::string_view bytes) {
  const auto byte = [&](std::size_t i) { return static_cast<std::uint8_t>(bytes[i]); };
  const std::uint8_t lead = byte(0);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  std::uint8_t low = 0x80, high = 0xBF;  // allowed range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;   // no overlongs
    if (lead == 0xED) high = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;   // no overlongs
    if (lead == 0xF4) high = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  if (bytes.size() < length) return 0;
  if (byte(1) < low || byte(1) > high) return 0;
  for (std::size_t i = 2; i < length; ++i)
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  return length;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool IsValidUtf8(std::string_view bytes) {
  while (!bytes.empty()) {
    const std::size_t length = Utf8SequenceLength(bytes);
    if (length == 0) return false;
    bytes.remove_prefix(length);
  }
  return true;
}

std::string EscapeBytes(std::string_view bytes) {
  std::string text;
  text.reserve(bytes.size());
  while (!bytes.empty()) {
    const std::size_t length = Utf8SequenceLength(bytes);
    const auto lead = static_cast<std::uint8_t>(bytes[0]);
    if (length == 0 || lead < 0x20 || lead == 0x7F) {
      text += fmt::format("\\x{:02X}", lead);
      bytes.remove_prefix(1);
      continue;
    }
    if (lead == '\\') text += '\\';
    text.append(bytes.substr(0, length));
    bytes.remove_prefix(length);
  }
  return text;
}

nlohmann::json BytesToJson(std::string_view bytes) {
  if (IsValidUtf8(bytes)) return std::string(bytes);
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (const char c : bytes) hex += fmt::format("{:02x}", static_cast<std::uint8_t>(c));
  return {{"text", EscapeBytes(bytes)}, {"hex", hex}};
}

std::optional<std::string> BytesFromJson(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (!value.is_object()) return std::nullopt;
  const auto hex = value.find("hex");
  if (hex == value.end() || !hex->is_string()) return std::nullopt;
  const std::string& digits = hex->get_ref<const std::string&>();
  if (digits.size() % 2 != 0) return std::nullopt;
  std::string bytes;
  bytes.reserve(digits.size() / 2);
  for (std::size_t i = 0; i < digits.size(); i += 2) {
    const int high = HexValue(digits[i]), low = HexValue(digits[i + 1]);
    if (high < 0 || low < 0) return std::nullopt;
    bytes += static_cast<char>(high * 16 + low);
  }
  return bytes;
}

namespace {

template <class Json>
Json EncodeBytesDeep(const Json& value) {
  if (value.is_string()) {
    const auto& text = value.template get_ref<const std::string&>();
    if (IsValidUtf8(text)) return value;
    return Json(BytesToJson(text));
  }
  if (value.is_array()) {
    Json out = Json::array();
    for (const auto& item : value) out.push_back(EncodeBytesDeep(item));
    return out;
  }
  if (value.is_object()) {
    Json out = Json::object();
    for (auto it = value.begin(); it != value.end(); ++it)
      out[IsValidUtf8(it.key()) ? it.key() : EscapeBytes(it.key())] = EncodeBytesDeep(it.value());
    return out;
  }
  return value;
}

}  // namespace

std::string DumpJson(const nlohmann::json& value) { return EncodeBytesDeep(value).dump(); }

std::string DumpJson(const nlohmann::ordered_json& value) {
  return EncodeBytesDeep(value).dump();
}

}  // namespace outbox::lab
