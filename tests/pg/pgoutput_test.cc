// The pgoutput decoder and the replication protocol's framing, on hand-built byte buffers: what a
// PostgreSQL 15 walsender sends (docs 55.4 and 55.9), and every truncation and some garbage of it.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <variant>

#include "outbox/pg/pgoutput.h"
#include "outbox/pg/replication_stream.h"
#include "outbox/wal_relay.h"

namespace outbox::pg {
namespace {

// Big-endian builders, as the protocol's Int16/Int32/Int64.
void Put(std::string& out, std::uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}
void PutString(std::string& out, const std::string& s) {
  out += s;
  out.push_back('\0');
}

std::string Begin(Lsn final_lsn, std::int64_t time, std::uint32_t xid) {
  std::string m = "B";
  Put(m, final_lsn, 8);
  Put(m, static_cast<std::uint64_t>(time), 8);
  Put(m, xid, 4);
  return m;
}

std::string Commit(Lsn commit_lsn, Lsn end_lsn) {
  std::string m = "C";
  Put(m, 0, 1);
  Put(m, commit_lsn, 8);
  Put(m, end_lsn, 8);
  Put(m, 777, 8);
  return m;
}

std::string Relation() {
  std::string m = "R";
  Put(m, 16400, 4);
  PutString(m, "s1");
  PutString(m, "outbox");
  Put(m, 'd', 1);
  const char* names[] = {"id", "event_id", "payload"};
  const std::uint32_t types[] = {20, 25, 17};
  Put(m, 3, 2);
  for (int i = 0; i < 3; ++i) {
    Put(m, i == 0 ? 1 : 0, 1);
    PutString(m, names[i]);
    Put(m, types[i], 4);
    Put(m, 0xffffffffu, 4);
  }
  return m;
}

// An insert of (id 7, event_id NULL, payload '\x00ff').
std::string Insert() {
  std::string m = "I";
  Put(m, 16400, 4);
  m.push_back('N');
  Put(m, 3, 2);
  m.push_back('t');
  Put(m, 1, 4);
  m += "7";
  m.push_back('n');
  m.push_back('t');
  Put(m, 6, 4);
  m += "\\x00ff";
  return m;
}

}  // namespace

TEST_CASE("pgoutput Begin and Commit messages decode to their LSNs and times", "[pgoutput]") {
  const auto begin = std::get<PgoutputBegin>(DecodePgoutput(Begin(0x16B374D848ull, 12345, 901)));
  CHECK(begin.final_lsn == 0x16B374D848ull);
  CHECK(begin.commit_time_us == 12345);
  CHECK(begin.xid == 901u);
  const auto commit = std::get<PgoutputCommit>(DecodePgoutput(Commit(0x100, 0x1A8)));
  CHECK(commit.commit_lsn == 0x100u);
  CHECK(commit.end_lsn == 0x1A8u);
  CHECK(commit.commit_time_us == 777);
}

TEST_CASE("pgoutput Relation and Insert messages decode columns by name and NULLs as NULL", "[pgoutput]") {
  const auto relation = std::get<PgoutputRelation>(DecodePgoutput(Relation()));
  CHECK(relation.oid == 16400u);
  CHECK(relation.namespace_name == "s1");
  CHECK(relation.name == "outbox");
  REQUIRE(relation.columns.size() == 3);
  CHECK(relation.columns[0].name == "id");
  CHECK(relation.columns[0].flags == 1);
  CHECK(relation.columns[2].name == "payload");
  CHECK(relation.columns[2].type_oid == 17u);
  CHECK(relation.columns[2].type_modifier == -1);

  const auto insert = std::get<PgoutputInsert>(DecodePgoutput(Insert()));
  CHECK(insert.relation_oid == 16400u);
  REQUIRE(insert.values.size() == 3);
  CHECK(insert.values[0].kind == TupleValue::Kind::kText);
  CHECK(insert.values[0].bytes == "7");
  CHECK(insert.values[1].kind == TupleValue::Kind::kNull);
  CHECK(insert.values[2].bytes == "\\x00ff");
  CHECK(DecodeHexBytea(insert.values[2].bytes, "payload") == std::string("\x00\xff", 2));
}

TEST_CASE("Every truncation of a pgoutput message is a DecodeError naming the message", "[pgoutput]") {
  for (const std::string& whole : {Begin(1, 2, 3), Commit(4, 5), Relation(), Insert()}) {
    for (std::size_t length = 1; length < whole.size(); ++length) {
      INFO("message '" << whole.front() << "' cut to " << length << " of " << whole.size() << " bytes");
      try {
        DecodePgoutput(whole.substr(0, length));
        FAIL("a truncated message decoded");
      } catch (const DecodeError& e) {
        CHECK(std::string(e.what()).find(std::string("decode pgoutput '") + whole.front() + "' message") == 0);
      }
    }
  }
}

TEST_CASE("A pgoutput message with trailing bytes or an empty buffer is a DecodeError", "[pgoutput]") {
  CHECK_THROWS_WITH(DecodePgoutput(Commit(4, 5) + "x"),
                    "decode pgoutput 'C' message: 1 trailing bytes at byte 26 of 27");
  CHECK_THROWS_AS(DecodePgoutput(""), DecodeError);
}

TEST_CASE("An unknown tuple value kind or a negative length is a DecodeError and no crash", "[pgoutput]") {
  std::string bad_kind = Insert();
  bad_kind[1 + 4 + 1 + 2 + 1 + 4 + 1] = 'x';  // the second value's kind ('n'), at byte 14
  CHECK_THROWS_WITH(DecodePgoutput(bad_kind),
                    Catch::Matchers::Contains("unknown value kind 'x' for column 1"));
  std::string negative = "I";
  Put(negative, 1, 4);
  negative.push_back('N');
  Put(negative, 1, 2);
  negative.push_back('t');
  Put(negative, 0xffffffffu, 4);
  CHECK_THROWS_WITH(DecodePgoutput(negative), Catch::Matchers::Contains("negative value length -1"));
  std::string huge = "I";
  Put(huge, 1, 4);
  huge.push_back('N');
  Put(huge, 1, 2);
  huge.push_back('t');
  Put(huge, 0x7fffffffu, 4);
  CHECK_THROWS_WITH(DecodePgoutput(huge), Catch::Matchers::Contains("truncated: a value of 2147483647 bytes"));
}

TEST_CASE("Other pgoutput messages are passed over by their tag", "[pgoutput]") {
  CHECK(std::get<PgoutputOther>(DecodePgoutput("U\x01\x02")).tag == 'U');
  CHECK(std::get<PgoutputOther>(DecodePgoutput(std::string(1, '\xfe'))).tag == '\xfe');
}

TEST_CASE("Random bytes behind every tag decode or throw DecodeError and nothing else", "[pgoutput]") {
  std::mt19937 random(26);
  int decoded = 0;
  int refused = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string bytes(1, "BCRIUkw"[i % 7]);
    const int length = static_cast<int>(random() % 48);
    for (int j = 0; j < length; ++j) bytes.push_back(static_cast<char>(random() % 256));
    try {
      DecodePgoutput(bytes);
      ++decoded;
    } catch (const DecodeError&) {
      ++refused;
    }
    try {
      ParseCopyData(bytes);
    } catch (const DecodeError&) {
    }
  }
  CHECK(decoded + refused == 20000);
  CHECK(refused > 10000);  // random bytes rarely form a whole Begin, Commit, Relation or Insert
}

TEST_CASE("XLogData and keepalive frames parse and a standby status update has 34 bytes", "[pgoutput]") {
  std::string w = "w";
  Put(w, 0x10, 8);
  Put(w, 0x20, 8);
  Put(w, 5, 8);
  w += Commit(1, 2);
  const StreamMessage data = ParseCopyData(w);
  CHECK(data.kind == StreamMessage::Kind::kXLogData);
  CHECK(data.wal_start == 0x10u);
  CHECK(data.wal_end == 0x20u);
  CHECK(data.data == Commit(1, 2));
  std::string k = "k";
  Put(k, 0x30, 8);
  Put(k, 9, 8);
  k.push_back(1);
  const StreamMessage keepalive = ParseCopyData(k);
  CHECK(keepalive.kind == StreamMessage::Kind::kKeepalive);
  CHECK(keepalive.wal_end == 0x30u);
  CHECK(keepalive.reply_requested);
  CHECK_THROWS_AS(ParseCopyData(k.substr(0, 17)), DecodeError);
  CHECK_THROWS_AS(ParseCopyData(w.substr(0, 24)), DecodeError);
  CHECK_THROWS_WITH(ParseCopyData("z"), "decode replication message: unknown tag 0x7a");

  const std::string status = EncodeStandbyStatus(0x1A8, 0x1A8, 0x1A8, 42, true);
  REQUIRE(status.size() == 34);
  CHECK(status.front() == 'r');
  std::string flushed;
  Put(flushed, 0x1A8, 8);
  CHECK(status.substr(9, 8) == flushed);
  CHECK(status.back() == 1);
}

TEST_CASE("LSNs print and parse as pg_lsn text", "[pgoutput]") {
  CHECK(FormatLsn(0x16B374D848ull) == "16/B374D848");
  CHECK(FormatLsn(0) == "0/0");
  CHECK(ParseLsn("16/b374d848") == 0x16B374D848ull);
  CHECK_FALSE(ParseLsn("16B374D848").has_value());
  CHECK_FALSE(ParseLsn("/1").has_value());
  CHECK_FALSE(ParseLsn("1/123456789").has_value());
  CHECK_FALSE(ParseLsn("1/-2").has_value());
}

TEST_CASE("A text bytea without its hex form is a DecodeError naming the column", "[pgoutput]") {
  CHECK(DecodeHexBytea("\\x", "payload").empty());
  CHECK_THROWS_WITH(DecodeHexBytea("abc", "payload"), Catch::Matchers::Contains("decode bytea column 'payload'"));
  CHECK_THROWS_WITH(DecodeHexBytea("\\x0", "payload"), Catch::Matchers::Contains("odd hex digit count 1"));
  CHECK_THROWS_WITH(DecodeHexBytea("\\xzz", "payload"), Catch::Matchers::Contains("not a hex digit pair at byte 2"));
}

TEST_CASE("The default slot name is lower case and at most 63 bytes", "[pgoutput]") {
  CHECK(DefaultWalSlotName("outbox_lab", "S_pg-chapter") == "outbox_wal_outbox_lab_s_pg_chapter");
  CHECK(DefaultWalSlotName(std::string(40, 'd'), std::string(40, 's')).size() == 63);
}

}  // namespace outbox::pg
