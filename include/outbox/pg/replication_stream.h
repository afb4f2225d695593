// ReplicationStream: one logical replication connection to a PostgreSQL server, streaming a
// slot's changes as pgoutput messages (PostgreSQL 15 docs, 55.4 "Streaming Replication Protocol",
// https://www.postgresql.org/docs/15/protocol-replication.html, and 55.5 "Logical Streaming
// Replication Protocol", https://www.postgresql.org/docs/15/protocol-logical-replication.html).
//
// The connection is opened with replication=database; START_REPLICATION switches it to CopyBoth
// mode, in which the server sends CopyData messages that are XLogData ('w': WAL data, here one
// pgoutput message each) or primary keepalives ('k'), and the client sends standby status updates
// ('r') that tell the server how far it has written, flushed and applied. For a logical slot the
// flush position becomes the slot's confirmed_flush_lsn: after a reconnect the server sends only
// transactions that commit past it, and it may recycle the WAL before it.
//
// Owns its PGconn and the last CopyData buffer (freed with PQfreemem). Not thread-safe. Every
// server message is untrusted: a malformed one is a DecodeError, never a crash.
#pragma once

#include <libpq-fe.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "outbox/pg/connection.h"
#include "outbox/pg/pgoutput.h"

namespace outbox::pg {

// One CopyData message of the stream, parsed (docs 55.4, "XLogData" and "Primary keepalive
// message").
struct StreamMessage {
  enum class Kind {
    kNone,       // nothing arrived within the timeout
    kXLogData,   // 'w': data is one pgoutput message
    kKeepalive,  // 'k'
  };
  Kind kind = Kind::kNone;
  Lsn wal_start = 0;   // 'w': the LSN the data starts at
  Lsn wal_end = 0;     // the server's current end of WAL (for a logical walsender: how far it
                       // has decoded)
  std::int64_t server_time_us = 0;  // microseconds since 2000-01-01
  bool reply_requested = false;     // 'k': the server asks for a status update now, else it
                                    // may end the connection after wal_sender_timeout
  std::string_view data;            // 'w': valid until the next Receive
};

// Parses one CopyData payload ('w' or 'k'). data of a 'w' points into bytes. Throws DecodeError
// for an empty or truncated message, trailing bytes on a keepalive, or an unknown tag.
StreamMessage ParseCopyData(std::string_view bytes);

// The 34 bytes of a standby status update ('r'): written, flushed and applied positions, the
// client's clock (microseconds since 2000-01-01) and whether the server should reply at once with
// a keepalive (docs 55.4, "Standby status update").
std::string EncodeStandbyStatus(Lsn written, Lsn flushed, Lsn applied, std::int64_t now_us,
                                bool reply_requested);

// The microseconds since 2000-01-01 00:00 UTC now: the protocol's clock.
std::int64_t PostgresEpochMicros();

// url with "replication=database" added as a URL parameter (url must be a postgresql:// URL;
// its options, e.g. the search_path, are kept).
std::string ReplicationUrl(const std::string& url);

class ReplicationStream {
 public:
  // Connects to url (a postgresql:// URL) as a logical replication client. Throws PgError
  // "connect for replication to '<url>': <libpq message>" when the server refuses, e.g. when
  // max_wal_senders is 0 or the role lacks REPLICATION.
  explicit ReplicationStream(const std::string& url);

  // START_REPLICATION SLOT slot LOGICAL start (proto_version '1', publication_names
  // 'publication'). start 0: resume at the slot's confirmed_flush_lsn. Names are sent as quoted
  // identifiers. Throws PgError with the server's message and SQLSTATE: "55006" when another
  // process streams the slot ("replication slot \"s\" is active for PID n"), "42704" when the
  // slot does not exist.
  void Start(const std::string& slot, const std::string& publication, Lsn start = 0);

  // Waits at most timeout_ms (0: only what has already arrived) for the next XLogData or
  // keepalive. Returns kNone on timeout. Throws PgError when the stream ends (the server's
  // error, e.g. the walsender was terminated: SQLSTATE 57P01) or the connection breaks, and
  // DecodeError for a malformed message.
  StreamMessage Receive(int timeout_ms);

  // Sends a standby status update: everything up to flushed is done (becomes the slot's
  // confirmed_flush_lsn). written and applied are sent equal to flushed. Throws PgError when
  // the connection is gone.
  void SendStatus(Lsn flushed, bool reply_requested);

  const std::string& display_url() const noexcept { return display_url_; }
  // The server process (walsender) serving this stream (PQbackendPID).
  int backend_pid() const noexcept { return PQbackendPID(conn_.get()); }

 private:
  struct FreeMem {
    void operator()(char* p) const noexcept { PQfreemem(p); }
  };
  std::string display_url_;
  std::unique_ptr<PGconn, ConnDeleter> conn_;
  std::unique_ptr<char, FreeMem> buffer_;  // the last CopyData: StreamMessage::data points here
};

}  // namespace outbox::pg
