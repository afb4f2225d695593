// BytesToJson / BytesFromJson / EscapeBytes: bytes from foreign outbox rows
// always reach JSON and text outputs, and come back byte for byte.
#include <catch2/catch.hpp>

#include <string>

#include "lab/broker/json_bytes.h"

using outbox::lab::BytesFromJson;
using outbox::lab::BytesToJson;
using outbox::lab::EscapeBytes;
using outbox::lab::IsValidUtf8;

TEST_CASE("IsValidUtf8 accepts well-formed text and rejects each malformed kind", "[json]") {
  CHECK(IsValidUtf8(""));
  CHECK(IsValidUtf8("evt-1001"));
  CHECK(IsValidUtf8("\xE5\x80\x9F\xE9\x98\x85"));  // 借阅
  CHECK(IsValidUtf8("\xF0\x9F\x93\x9A"));          // U+1F4DA
  CHECK_FALSE(IsValidUtf8("\xC3\x28"));            // bad continuation
  CHECK_FALSE(IsValidUtf8("\xC0\xAF"));            // overlong
  CHECK_FALSE(IsValidUtf8("\xED\xA0\x80"));        // surrogate
  CHECK_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));    // above U+10FFFF
  CHECK_FALSE(IsValidUtf8("\xE5\x80"));            // truncated
  CHECK_FALSE(IsValidUtf8("\xFF"));
}

TEST_CASE("BytesToJson keeps valid text as a plain string", "[json]") {
  const nlohmann::json value = BytesToJson("evt-1001");
  CHECK(value == "evt-1001");
  CHECK(value.dump() == "\"evt-1001\"");
}

TEST_CASE("BytesToJson of bytes that are not UTF-8 dumps and reads back unchanged", "[json]") {
  const std::string bytes("evt-\xC3\x28-\0-\xFF", 10);
  const nlohmann::json value = BytesToJson(bytes);
  REQUIRE(value.is_object());
  CHECK(value["hex"] == "6576742dc3282d002dff");
  CHECK(value["text"] == "evt-\\xC3(-\\x00-\\xFF");
  const std::string line = value.dump();  // would throw type_error.316 on the raw bytes
  CHECK(BytesFromJson(nlohmann::json::parse(line)) == bytes);
}

TEST_CASE("Every byte value survives BytesToJson and BytesFromJson", "[json]") {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const nlohmann::json parsed = nlohmann::json::parse(BytesToJson(all).dump());
  CHECK(BytesFromJson(parsed) == all);
}

TEST_CASE("BytesFromJson rejects values it did not make", "[json]") {
  CHECK_FALSE(BytesFromJson(nlohmann::json(42)).has_value());
  CHECK_FALSE(BytesFromJson(nlohmann::json{{"hex", "abc"}}).has_value());
  CHECK_FALSE(BytesFromJson(nlohmann::json{{"hex", "zz"}}).has_value());
  CHECK_FALSE(BytesFromJson(nlohmann::json::object()).has_value());
}

TEST_CASE("EscapeBytes shows control bytes and backslashes unambiguously", "[json]") {
  CHECK(EscapeBytes("a\nb") == "a\\x0Ab");
  CHECK(EscapeBytes("a\\x41") == "a\\\\x41");
  CHECK(EscapeBytes("\xE5\x80\x9F") == "\xE5\x80\x9F");
  CHECK(IsValidUtf8(EscapeBytes("\xC3\x28\xFF")));
}

TEST_CASE("DumpJson writes strings and keys that are not UTF-8 as valid JSON", "[json]") {
  const std::string bad("evt-\xC3\x28", 6);
  nlohmann::ordered_json out;
  out["lost"] = nlohmann::ordered_json::array({bad, "evt-2"});
  out["duplicated"][bad] = 2;
  out["ok"] = 1;
  CHECK_THROWS(out.dump());  // what check --json did before
  const std::string line = outbox::lab::DumpJson(out);
  const nlohmann::json back = nlohmann::json::parse(line);
  CHECK(BytesFromJson(back["lost"][0]) == bad);
  CHECK(back["lost"][1] == "evt-2");
  CHECK(back["duplicated"]["evt-\\xC3("] == 2);
  CHECK(back["ok"] == 1);
}
