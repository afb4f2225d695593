#include "outbox/wal_progress.h"

#include <fmt/format.h>

#include <charconv>
#include <unordered_map>
#include <variant>

#include "outbox/pg/connection.h"
#include "outbox/wal_relay.h"

namespace outbox {

std::optional<WalProgress> ReadWalProgress(const std::string& url, const std::string& slot_name) {
  pg::Connection sql(url);
  std::string slot = slot_name;
  // The WAL relay's bookkeeping tables (wal_relay.cc) exist once a WAL relay ran here, and a
  // reset drops outbox_wal_unstreamed: a missing one (undefined_table) means nothing recorded.
  const auto missing_table = [](const pg::PgError& e) { return e.sqlstate() == "42P01"; };
  if (slot.empty()) {
    try {
      const pg::Result recorded = sql.Query(
          "SELECT slot FROM outbox_wal_slot ORDER BY recorded_at DESC, slot LIMIT 1", {},
          "read the WAL relay's slot name");
      if (recorded.rows() > 0) slot = recorded.Text(0, 0);
    } catch (const pg::PgError& e) {
      if (!missing_table(e)) throw;
    }
  }
  if (slot.empty()) {
    const pg::Result names =
        sql.Query("SELECT current_database(), COALESCE(current_schema(), '')", {}, "read the schema");
    slot = DefaultWalSlotName(names.Text(0, 0), names.Text(0, 1));
  }
  const pg::Result row = sql.Query(
      "SELECT active, COALESCE(active_pid, 0), COALESCE(confirmed_flush_lsn::text, ''), "
      "COALESCE(wal_status, ''), COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), "
      "confirmed_flush_lsn), 0)::bigint, COALESCE(safe_wal_size, -1), "
      "pg_size_bytes(current_setting('max_slot_wal_keep_size')), "
      "COALESCE(to_regclass('outbox')::oid::bigint, 0) "
      "FROM pg_replication_slots WHERE slot_name = $1",
      {pg::Param::Text(slot)}, "read the WAL relay's slot");
  if (row.rows() == 0) return std::nullopt;
  WalProgress progress;
  progress.slot = slot;
  progress.active = row.Text(0, 0) == "t";
  progress.active_pid = static_cast<int>(row.Int(0, 1));
  progress.confirmed = pg::ParseLsn(row.Text(0, 2)).value_or(0);
  progress.wal_status = row.Text(0, 3);
  progress.lag_bytes = row.Int(0, 4);
  if (row.Int(0, 5) >= 0) progress.safe_wal_size_bytes = row.Int(0, 5);
  if (row.Int(0, 6) >= 0) progress.keep_size_bytes = row.Int(0, 6);
  // Only inserts into the outbox there is now are pending: a row of one a reset dropped, whose
  // id the new outbox may give again, is not one of its rows.
  const auto outbox_oid = static_cast<std::uint32_t>(row.Int(0, 7));
  try {
    const pg::Result older = sql.Query(
        "SELECT u.id FROM outbox_wal_unstreamed u JOIN outbox o ON o.id = u.id "
        "WHERE NOT o.published",
        {}, "read the rows the slot does not stream");
    for (int i = 0; i < older.rows(); ++i) progress.unstreamed_ids.insert(older.Int(i, 0));
  } catch (const pg::PgError& e) {
    if (!missing_table(e)) throw;
  }
  if (progress.active || progress.wal_status == "lost") return progress;
  pg::Result changes(nullptr);
  try {
    changes = sql.Query(
        "SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, 'proto_version', "
        "'1', 'publication_names', quote_ident($2))",
        {pg::Param::Text(slot), pg::Param::Text(slot)}, "peek the WAL relay's slot");
  } catch (const pg::PgError& e) {
    if (e.sqlstate() == "55006") {  // a relay started streaming between the two queries
      progress.active = true;
      return progress;
    }
    throw;
  }
  // Each Relation message names the outbox's id column; each Insert into it is a pending row.
  std::unordered_map<std::uint32_t, std::size_t> id_column;
  std::set<std::int64_t> pending;
  for (int i = 0; i < changes.rows(); ++i) {
    const std::string data = changes.Bytes(i, 0);
    const pg::PgoutputMessage message = pg::DecodePgoutput(data);
    if (const auto* relation = std::get_if<pg::PgoutputRelation>(&message)) {
      id_column.erase(relation->oid);
      if (relation->name != "outbox" || relation->oid != outbox_oid) continue;
      for (std::size_t c = 0; c < relation->columns.size(); ++c)
        if (relation->columns[c].name == "id") id_column[relation->oid] = c;
    } else if (const auto* insert = std::get_if<pg::PgoutputInsert>(&message)) {
      const auto found = id_column.find(insert->relation_oid);
      if (found == id_column.end() || found->second >= insert->values.size()) continue;
      const pg::TupleValue& value = insert->values[found->second];
      std::int64_t id = 0;
      const auto [end, error] =
          std::from_chars(value.bytes.data(), value.bytes.data() + value.bytes.size(), id);
      if (value.kind == pg::TupleValue::Kind::kText && error == std::errc() &&
          end == value.bytes.data() + value.bytes.size())
        pending.insert(id);
    }
  }
  progress.pending_ids = std::move(pending);
  return progress;
}

std::int64_t WalLagWarnBytes(const WalProgress& wal, std::int64_t threshold_bytes) {
  if (threshold_bytes > 0) return threshold_bytes;
  if (wal.keep_size_bytes && *wal.keep_size_bytes > 0) return *wal.keep_size_bytes / 2;
  return kWalLagWarnUnlimitedBytes;
}

std::string WalSlotLagWarning(const WalProgress& wal, std::int64_t threshold_bytes) {
  if (wal.wal_status == "lost")
    return fmt::format("WAL slot {} is lost (invalidated past max_slot_wal_keep_size): its "
                       "changes past confirmed LSN {} are gone; resync as docs/wal-relay.md says",
                       wal.slot, pg::FormatLsn(wal.confirmed));
  const std::int64_t threshold = WalLagWarnBytes(wal, threshold_bytes);
  const bool status_bad = wal.wal_status == "extended" || wal.wal_status == "unreserved";
  if (wal.lag_bytes < threshold && !status_bad) return "";
  const std::string keep =
      wal.keep_size_bytes ? fmt::format("{} bytes", *wal.keep_size_bytes) : "unlimited";
  const std::string safe =
      wal.safe_wal_size_bytes ? fmt::format("{} bytes", *wal.safe_wal_size_bytes) : "unlimited";
  const std::string what =
      wal.active ? fmt::format("the WAL relay streaming it (walsender PID {}) is behind",
                               wal.active_pid)
                 : "no WAL relay streams it: start `relay --source wal`, or drop the slot and "
                   "resync as docs/wal-relay.md says";
  return fmt::format("WAL slot {} lags {} bytes (threshold {} bytes, wal_status {}, "
                     "max_slot_wal_keep_size {}, safe_wal_size {}): the server keeps this WAL "
                     "and invalidates the slot past max_slot_wal_keep_size; {}",
                     wal.slot, wal.lag_bytes, threshold,
                     wal.wal_status.empty() ? "unknown" : wal.wal_status, keep, safe, what);
}

}  // namespace outbox
