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
  // pg_replication_slots.safe_wal_size, bytes: how much more WAL the server may write before
  // this slot is invalidated (wal_status lost); nullopt when max_slot_wal_keep_size is -1 (no
  // limit) or the slot is already lost.
  std::optional<std::int64_t> safe_wal_size_bytes;
  // The server's max_slot_wal_keep_size, bytes; nullopt when it is -1 (the slot may keep WAL
  // until the disk fills).
  std::optional<std::int64_t> keep_size_bytes;
  // The outbox ids whose inserts are in the slot and not confirmed (peeked with
  // pg_logical_slot_peek_binary_changes); nullopt while the slot is active (a peek would be
  // refused: one reader per slot) or lost.
  std::optional<std::set<std::int64_t>> pending_ids;
  // Unpublished outbox ids the slot never streams: rows committed before the WAL relay created
  // the slot, or while an older outbox-lab's reset had taken the outbox out of the publication
  // (table outbox_wal_unstreamed, written by WalRelay::Open). They wait for the polling relay.
  std::set<std::int64_t> unstreamed_ids;

  // Whether row id counts as published although its flag says not: the slot's pending inserts
  // are known (the slot is inactive and not lost), hold none of it, and the slot streams it.
  bool Confirmed(std::int64_t id) const {
    return pending_ids && pending_ids->count(id) == 0 && unstreamed_ids.count(id) == 0;
  }
};

// The WAL relay's progress on the database of url (a postgresql:// URL; its search_path names the
// outbox's schema): the slot named slot; when slot is empty, the slot the WAL relay last recorded
// for this schema (table outbox_wal_slot: relay --source wal --slot NAME), else
// DefaultWalSlotName of the connection's database and current schema. Returns nullopt when no
// such slot exists (no WAL relay ever ran there). The peek decodes every change since the
// confirmed LSN: its cost grows with the relay's lag. Throws pg::PgError (server errors),
// pg::DecodeError (a malformed pgoutput message).
std::optional<WalProgress> ReadWalProgress(const std::string& url, const std::string& slot = "");

// The lag at which a slot is called lagging when no threshold is given and the server keeps WAL
// without limit (max_slot_wal_keep_size -1): 1 GiB.
inline constexpr std::int64_t kWalLagWarnUnlimitedBytes = 1LL << 30;

// The lag threshold in bytes: threshold_bytes when it is above 0, else half of
// max_slot_wal_keep_size (the server invalidates the slot once it keeps more WAL than that for
// it; PostgreSQL 15 docs, "Replication Slots"), else kWalLagWarnUnlimitedBytes.
std::int64_t WalLagWarnBytes(const WalProgress& wal, std::int64_t threshold_bytes);

// "" when the slot is out of danger, else one sentence saying why it is in danger and what to
// do: its lag (pg_current_wal_lsn() - confirmed_flush_lsn) is at or past
// WalLagWarnBytes(wal, threshold_bytes), or wal_status is extended (the slot keeps more than
// max_wal_size), unreserved (the next checkpoint may remove its WAL) or lost (invalidated).
// Pure; no I/O.
std::string WalSlotLagWarning(const WalProgress& wal, std::int64_t threshold_bytes);

}  // namespace outbox
