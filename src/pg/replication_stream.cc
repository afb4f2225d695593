#include "outbox/pg/replication_stream.h"

#include <fmt/format.h>
#include <poll.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace outbox::pg {
namespace {

std::string OneLine(const char* message) {
  std::string line = message == nullptr ? "" : message;
  for (char& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return line;
}

[[noreturn]] void ThrowResult(PGconn* conn, const PGresult* result, std::string_view what) {
  const char* state = result == nullptr ? nullptr : PQresultErrorField(result, PG_DIAG_SQLSTATE);
  const char* primary = result == nullptr ? nullptr : PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY);
  const std::string sqlstate = state == nullptr ? "" : state;
  const std::string message = OneLine(primary != nullptr ? primary : PQerrorMessage(conn));
  if (sqlstate.empty()) throw PgError(fmt::format("{}: {}", what, message), sqlstate);
  throw PgError(fmt::format("{}: {} (SQLSTATE {})", what, message, sqlstate), sqlstate);
}

std::uint64_t ReadU64(std::string_view bytes, std::size_t at) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < 8; ++i) value = (value << 8) | static_cast<unsigned char>(bytes[at + i]);
  return value;
}

void PutU64(std::string& out, std::uint64_t value) {
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>((value >> shift) & 0xff));
}

// A quoted identifier for a replication command ("slot" with embedded quotes doubled).
std::string Quote(const std::string& name) {
  std::string quoted = "\"";
  for (const char c : name) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

}  // namespace

StreamMessage ParseCopyData(std::string_view bytes) {
  if (bytes.empty()) throw DecodeError("decode replication message: empty CopyData");
  StreamMessage message;
  switch (bytes.front()) {
    case 'w':
      if (bytes.size() < 25)
        throw DecodeError(fmt::format("decode replication message 'w': truncated: {} bytes, the "
                                      "header needs 25",
                                      bytes.size()));
      message.kind = StreamMessage::Kind::kXLogData;
      message.wal_start = ReadU64(bytes, 1);
      message.wal_end = ReadU64(bytes, 9);
      message.server_time_us = static_cast<std::int64_t>(ReadU64(bytes, 17));
      message.data = bytes.substr(25);
      return message;
    case 'k':
      if (bytes.size() != 18)
        throw DecodeError(fmt::format("decode replication message 'k': {} bytes, a keepalive has 18",
                                      bytes.size()));
      message.kind = StreamMessage::Kind::kKeepalive;
      message.wal_end = ReadU64(bytes, 1);
      message.server_time_us = static_cast<std::int64_t>(ReadU64(bytes, 9));
      message.reply_requested = bytes[17] != 0;
      return message;
    default: {
      const auto tag = static_cast<unsigned char>(bytes.front());
      throw DecodeError(fmt::format("decode replication message: unknown tag 0x{:02x}", tag));
    }
  }
}

std::string EncodeStandbyStatus(Lsn written, Lsn flushed, Lsn applied, std::int64_t now_us,
                                bool reply_requested) {
  std::string out;
  out.reserve(34);
  out.push_back('r');
  PutU64(out, written);
  PutU64(out, flushed);
  PutU64(out, applied);
  PutU64(out, static_cast<std::uint64_t>(now_us));
  out.push_back(reply_requested ? 1 : 0);
  return out;
}

std::int64_t PostgresEpochMicros() {
  // 2000-01-01 00:00:00 UTC is 946684800 s after the Unix epoch.
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration_cast<std::chrono::microseconds>(now).count() -
         946'684'800LL * 1'000'000LL;
}

std::string ReplicationUrl(const std::string& url) {
  return url + (url.find('?') == std::string::npos ? "?" : "&") + "replication=database";
}

ReplicationStream::ReplicationStream(const std::string& url)
    : display_url_(RedactPassword(url)), conn_(PQconnectdb(ReplicationUrl(url).c_str())) {
  if (!conn_) throw PgError(fmt::format("connect for replication to '{}': out of memory", display_url_), "");
  if (PQstatus(conn_.get()) != CONNECTION_OK)
    throw PgError(fmt::format("connect for replication to '{}': {}", display_url_,
                              OneLine(PQerrorMessage(conn_.get()))),
                  "");
  PQsetNoticeProcessor(conn_.get(), [](void*, const char*) {}, nullptr);
}

void ReplicationStream::Start(const std::string& slot, const std::string& publication, Lsn start) {
  // publication_names is a string literal holding a list of identifiers: the quoted name, with
  // any single quote doubled for the literal.
  std::string names = Quote(publication);
  std::string literal;
  for (const char c : names) {
    if (c == '\'') literal += '\'';
    literal += c;
  }
  const std::string command =
      fmt::format("START_REPLICATION SLOT {} LOGICAL {} (proto_version '1', publication_names '{}')",
                  Quote(slot), FormatLsn(start), literal);
  Result result(PQexec(conn_.get(), command.c_str()));
  if (PQresultStatus(result.get()) != PGRES_COPY_BOTH)
    ThrowResult(conn_.get(), result.get(), fmt::format("start streaming slot '{}'", slot));
}

StreamMessage ReplicationStream::Receive(int timeout_ms) {
  buffer_.reset();
  for (int round = 0;; ++round) {
    char* raw = nullptr;
    const int length = PQgetCopyData(conn_.get(), &raw, /*async=*/1);
    if (length > 0) {
      buffer_.reset(raw);
      return ParseCopyData(std::string_view(raw, static_cast<std::size_t>(length)));
    }
    if (length == -1) {
      // The copy ended: the server's error (or end of stream) is in the next result.
      Result result(PQgetResult(conn_.get()));
      if (result.get() != nullptr && PQresultStatus(result.get()) == PGRES_FATAL_ERROR)
        ThrowResult(conn_.get(), result.get(), "stream the slot");
      throw PgError(fmt::format("stream the slot: the server ended the stream ({})",
                                OneLine(PQerrorMessage(conn_.get()))),
                    "");
    }
    if (length == -2) ThrowResult(conn_.get(), nullptr, "stream the slot");
    // 0: nothing complete yet. Wait for the socket once, then look again.
    if (round > 0 && timeout_ms == 0) return {};
    if (round > 0) return {};
    pollfd fd{PQsocket(conn_.get()), POLLIN, 0};
    if (fd.fd < 0) throw PgError("stream the slot: the connection has no socket", "");
    const int ready = poll(&fd, 1, timeout_ms);
    if (ready < 0 && errno != EINTR)
      throw PgError(fmt::format("stream the slot: poll: {}", std::strerror(errno)), "");
    if (ready <= 0) return {};
    if (PQconsumeInput(conn_.get()) == 0) ThrowResult(conn_.get(), nullptr, "stream the slot");
  }
}

void ReplicationStream::SendStatus(Lsn flushed, bool reply_requested) {
  const std::string message =
      EncodeStandbyStatus(flushed, flushed, flushed, PostgresEpochMicros(), reply_requested);
  if (PQputCopyData(conn_.get(), message.data(), static_cast<int>(message.size())) != 1 ||
      PQflush(conn_.get()) != 0)
    ThrowResult(conn_.get(), nullptr, "send a standby status update");
}

}  // namespace outbox::pg
