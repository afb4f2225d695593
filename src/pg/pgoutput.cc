#include "outbox/pg/pgoutput.h"

#include <fmt/format.h>

#include <charconv>

namespace outbox::pg {
namespace {

// Reads big-endian integers and zero-terminated strings from an untrusted message, each read
// checked against the end (protocol integers are in network byte order: docs 55.6 "Message Data
// Types").
class Reader {
 public:
  Reader(std::string_view bytes, char tag) : bytes_(bytes), tag_(tag) {}

  [[noreturn]] void Fail(std::string_view why) const {
    throw DecodeError(fmt::format("decode pgoutput '{}' message: {} at byte {} of {}",
                                  Printable(tag_), why, pos_, bytes_.size()));
  }

  std::uint64_t Unsigned(std::size_t width, std::string_view what) {
    if (bytes_.size() - pos_ < width)
      Fail(fmt::format("truncated: {} needs {} bytes, {} left", what, width, bytes_.size() - pos_));
    std::uint64_t value = 0;
    for (std::size_t i = 0; i < width; ++i)
      value = (value << 8) | static_cast<unsigned char>(bytes_[pos_ + i]);
    pos_ += width;
    return value;
  }
  std::uint8_t U8(std::string_view what) { return static_cast<std::uint8_t>(Unsigned(1, what)); }
  std::int16_t I16(std::string_view what) { return static_cast<std::int16_t>(Unsigned(2, what)); }
  std::int32_t I32(std::string_view what) { return static_cast<std::int32_t>(Unsigned(4, what)); }
  std::uint32_t U32(std::string_view what) { return static_cast<std::uint32_t>(Unsigned(4, what)); }
  std::uint64_t U64(std::string_view what) { return Unsigned(8, what); }
  std::int64_t I64(std::string_view what) { return static_cast<std::int64_t>(Unsigned(8, what)); }

  std::string String(std::string_view what) {
    const std::size_t end = bytes_.find('\0', pos_);
    if (end == std::string_view::npos) Fail(fmt::format("{} has no terminating zero byte", what));
    std::string value(bytes_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return value;
  }

  std::string Bytes(std::size_t length, std::string_view what) {
    if (bytes_.size() - pos_ < length)
      Fail(fmt::format("truncated: {} of {} bytes, {} left", what, length, bytes_.size() - pos_));
    std::string value(bytes_.substr(pos_, length));
    pos_ += length;
    return value;
  }

  void End() const {
    if (pos_ != bytes_.size()) Fail(fmt::format("{} trailing bytes", bytes_.size() - pos_));
  }

  static std::string Printable(char c) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) return std::string(1, c);
    return fmt::format("\\x{:02x}", u);
  }

 private:
  std::string_view bytes_;
  char tag_;
  std::size_t pos_ = 1;  // past the tag
};

std::vector<TupleValue> ReadTuple(Reader& reader) {
  const std::int16_t count = reader.I16("the column count");
  if (count < 0) reader.Fail(fmt::format("negative column count {}", count));
  std::vector<TupleValue> values;
  values.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    TupleValue value;
    const char kind = static_cast<char>(reader.U8("a value's kind"));
    switch (kind) {
      case 'n':
        value.kind = TupleValue::Kind::kNull;
        break;
      case 'u':
        value.kind = TupleValue::Kind::kUnchanged;
        break;
      case 't':
      case 'b': {
        value.kind = kind == 't' ? TupleValue::Kind::kText : TupleValue::Kind::kBinary;
        const std::int32_t length = reader.I32("a value's length");
        if (length < 0) reader.Fail(fmt::format("negative value length {}", length));
        value.bytes = reader.Bytes(static_cast<std::size_t>(length), "a value");
        break;
      }
      default:
        reader.Fail(fmt::format("unknown value kind '{}' for column {}", Reader::Printable(kind), i));
    }
    values.push_back(std::move(value));
  }
  return values;
}

}  // namespace

std::string FormatLsn(Lsn lsn) {
  return fmt::format("{:X}/{:X}", static_cast<std::uint32_t>(lsn >> 32),
                     static_cast<std::uint32_t>(lsn & 0xffffffffu));
}

std::optional<Lsn> ParseLsn(std::string_view text) {
  const auto slash = text.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 == text.size()) return std::nullopt;
  std::uint32_t parts[2] = {0, 0};
  const std::string_view halves[2] = {text.substr(0, slash), text.substr(slash + 1)};
  for (int i = 0; i < 2; ++i) {
    if (halves[i].size() > 8) return std::nullopt;
    const auto [end, error] =
        std::from_chars(halves[i].data(), halves[i].data() + halves[i].size(), parts[i], 16);
    if (error != std::errc() || end != halves[i].data() + halves[i].size()) return std::nullopt;
  }
  return (static_cast<Lsn>(parts[0]) << 32) | parts[1];
}

PgoutputMessage DecodePgoutput(std::string_view bytes) {
  if (bytes.empty()) throw DecodeError("decode pgoutput message: empty (no tag byte)");
  Reader reader(bytes, bytes.front());
  switch (bytes.front()) {
    case 'B': {
      PgoutputBegin begin;
      begin.final_lsn = reader.U64("the final LSN");
      begin.commit_time_us = reader.I64("the commit time");
      begin.xid = reader.U32("the xid");
      reader.End();
      return begin;
    }
    case 'C': {
      PgoutputCommit commit;
      commit.flags = reader.U8("the flags");
      commit.commit_lsn = reader.U64("the commit LSN");
      commit.end_lsn = reader.U64("the end LSN");
      commit.commit_time_us = reader.I64("the commit time");
      reader.End();
      return commit;
    }
    case 'R': {
      PgoutputRelation relation;
      relation.oid = reader.U32("the relation oid");
      relation.namespace_name = reader.String("the namespace");
      relation.name = reader.String("the relation name");
      relation.replica_identity = static_cast<char>(reader.U8("the replica identity"));
      const std::int16_t count = reader.I16("the column count");
      if (count < 0) reader.Fail(fmt::format("negative column count {}", count));
      for (int i = 0; i < count; ++i) {
        PgoutputColumn column;
        column.flags = reader.U8("a column's flags");
        column.name = reader.String("a column's name");
        column.type_oid = reader.U32("a column's type oid");
        column.type_modifier = reader.I32("a column's type modifier");
        relation.columns.push_back(std::move(column));
      }
      reader.End();
      return relation;
    }
    case 'I': {
      PgoutputInsert insert;
      insert.relation_oid = reader.U32("the relation oid");
      const char marker = static_cast<char>(reader.U8("the 'N' marker"));
      if (marker != 'N')
        reader.Fail(fmt::format("expected 'N' before the new tuple, got '{}'", Reader::Printable(marker)));
      insert.values = ReadTuple(reader);
      reader.End();
      return insert;
    }
    default:
      return PgoutputOther{bytes.front()};
  }
}

std::string DecodeHexBytea(std::string_view text, std::string_view column) {
  if (!text.starts_with("\\x"))
    throw DecodeError(fmt::format("decode bytea column '{}': expected \\x hex output, got {} bytes "
                                  "without it (is bytea_output escape?)",
                                  column, text.size()));
  const std::string_view hex = text.substr(2);
  if (hex.size() % 2 != 0)
    throw DecodeError(fmt::format("decode bytea column '{}': odd hex digit count {}", column, hex.size()));
  std::string bytes;
  bytes.reserve(hex.size() / 2);
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    unsigned value = 0;
    const auto [end, error] = std::from_chars(hex.data() + i, hex.data() + i + 2, value, 16);
    if (error != std::errc() || end != hex.data() + i + 2)
      throw DecodeError(fmt::format("decode bytea column '{}': not a hex digit pair at byte {}",
                                    column, i + 2));
    bytes.push_back(static_cast<char>(value));
  }
  return bytes;
}

}  // namespace outbox::pg
