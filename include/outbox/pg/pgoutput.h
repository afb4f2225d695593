// A decoder for the messages of PostgreSQL's built-in logical decoding output plugin, pgoutput,
// protocol version 1, as they arrive inside XLogData messages of a logical replication stream
// (PostgreSQL 15 docs, 55.9 "Logical Streaming Replication Protocol Message Formats",
// https://www.postgresql.org/docs/15/protocol-logicalrep-message-formats.html), and the log
// sequence numbers (LSN) that position them. Pure functions over bytes: no connection, no state,
// thread-safe.
//
// Every byte is untrusted: a message that ends early, a length that runs past the end, a string
// without its terminating zero, an unknown tuple value kind are each a DecodeError naming the
// message, the byte offset and what was expected. Nothing is read past the buffer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "outbox/error.h"

namespace outbox::pg {

// A pgoutput or replication-protocol message that cannot be decoded. The message reads
// "decode pgoutput 'I' message: <why> at byte N of M".
class DecodeError : public Error {
 public:
  using Error::Error;
};

// A WAL position: a byte offset into the server's write-ahead log (pg_lsn). 0 is invalid/none.
using Lsn = std::uint64_t;

// "16/B374D848": the high and low 32 bits in upper-case hex, as pg_lsn prints it.
std::string FormatLsn(Lsn lsn);

// Parses pg_lsn's text ("16/B374D848", hex digits either case). nullopt on anything else.
std::optional<Lsn> ParseLsn(std::string_view text);

// 'B': a transaction begins. Its changes follow, then its Commit.
struct PgoutputBegin {
  Lsn final_lsn = 0;               // the LSN of the transaction's commit record
  std::int64_t commit_time_us = 0; // microseconds since 2000-01-01 (PostgreSQL's epoch)
  std::uint32_t xid = 0;
};

// 'C': the transaction committed. end_lsn is what a client confirms once it has applied the
// transaction (the standby status update's flush position).
struct PgoutputCommit {
  std::uint8_t flags = 0;  // unused, 0
  Lsn commit_lsn = 0;      // the commit record's LSN
  Lsn end_lsn = 0;         // the end of the commit record: where the next transaction starts
  std::int64_t commit_time_us = 0;
};

struct PgoutputColumn {
  std::uint8_t flags = 0;  // 1: part of the key
  std::string name;
  std::uint32_t type_oid = 0;
  std::int32_t type_modifier = -1;
};

// 'R': the shape of a table, sent before the first change of that table in a session (and again
// after a DDL change). Inserts name their table by oid and carry values in these columns' order.
struct PgoutputRelation {
  std::uint32_t oid = 0;
  std::string namespace_name;  // the schema; empty for pg_catalog
  std::string name;
  char replica_identity = 'd';
  std::vector<PgoutputColumn> columns;
};

// One column of a row as pgoutput sends it. kText values are the type's text output (a bytea
// arrives as "\x" followed by hex digits); kUnchanged is a TOASTed value that did not change
// (updates only); kBinary only with the binary option, which this lab never asks for.
struct TupleValue {
  enum class Kind { kNull, kUnchanged, kText, kBinary };
  Kind kind = Kind::kNull;
  std::string bytes;  // empty unless kText or kBinary
};

// 'I': a row was inserted into the relation with relation_oid.
struct PgoutputInsert {
  std::uint32_t relation_oid = 0;
  std::vector<TupleValue> values;  // one per column of the Relation message
};

// Any other message (Update 'U', Delete 'D', Truncate 'T', Origin 'O', Type 'Y', Message 'M'):
// decoded no further; the relay has nothing to send for them.
struct PgoutputOther {
  char tag = 0;
};

using PgoutputMessage =
    std::variant<PgoutputBegin, PgoutputCommit, PgoutputRelation, PgoutputInsert, PgoutputOther>;

// Decodes one pgoutput message (the data of one XLogData message). bytes: the whole message,
// its first byte the tag. Returns the message. Throws DecodeError when bytes is empty, or a
// Begin, Commit, Relation or Insert message is truncated, carries trailing bytes, a string
// without its terminating zero, a negative column count or value length, or an unknown tuple
// value kind. Throws nothing else.
PgoutputMessage DecodePgoutput(std::string_view bytes);

// The value of a text-format bytea ("\x" then pairs of hex digits, PostgreSQL's default
// bytea_output = hex, https://www.postgresql.org/docs/15/datatype-binary.html) as bytes.
// Throws DecodeError (naming column) for anything else: a missing "\x", an odd digit count, a
// byte that is not a hex digit.
std::string DecodeHexBytea(std::string_view text, std::string_view column);

}  // namespace outbox::pg
