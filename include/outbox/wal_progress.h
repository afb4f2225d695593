// WalProgress: how far the WAL relay (outbox/wal_relay.h) has come, read from the server: its
// slot's state and, when no relay streams the slot, the outbox inserts still pending in it. The
// WAL relay marks no row, so this is what verify, check and status count instead of the
// published flag: an outbox row is published when its flag says so or when the slot no longer
// holds its insert (confirmed past it). Functions, no state; each opens its own connection.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "outbox/pg/pgoutput.h"

namespace outbox {

struct WalProgress {
  std::string slot;
  bool active = false;      // a walsender streams it (a WAL relay runs)
  int active_pid = 0;       // that walsender's PID
  pg::Lsn confirmed = 0;    // confirmed_flush_lsn: the WAL relay's mark
  // pg_current_wal_lsn() - confirmed_flush_lsn, bytes: the WAL the slot keeps the server from
  // recycling past what is confirmed
  std::int64_t lag_bytes = 0;
  std::string wal_status;   // reserved, extended, unreserved or lost (pg_replication_slots)
  // The outbox ids whose inserts are in the slot and not confirmed (peeked with
  // pg_logical_slot_peek_binary_changes); nullopt while the slot is active (a peek would be
  // refused: one reader per slot) or lost.
  std::optional<std::set<std::int64_t>> pending_ids;
};

// The WAL relay's progress on the database of url (a postgresql:// URL; its search_path names the
// outbox's schema): the slot named slot, or DefaultWalSlotName of the connection's database and
// current schema when slot is empty. Returns nullopt when no such slot exists (no WAL relay ever
// ran there). The peek decodes every change since the confirmed LSN: its cost grows with the
// relay's lag. Throws pg::PgError (server errors), pg::DecodeError (a malformed pgoutput message).
std::optional<WalProgress> ReadWalProgress(const std::string& url, const std::string& slot = "");

}  // namespace outbox
