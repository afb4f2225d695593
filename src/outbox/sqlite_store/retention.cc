// Store: what the file keeps: purge of published rows (with or without archive) and the WAL's
// checkpoint and size.
#include "outbox/store.h"

#include <fmt/format.h>

#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "outbox/error.h"
#include "outbox/failpoint.h"

#include "internal.h"

namespace outbox {

using namespace sqlite_store;  // this folder's shared helpers (internal.h)

PurgeReport Store::PurgePublished(std::int64_t cutoff_ms, std::int64_t batch_size, bool archive) {
  if (batch_size <= 0)
    throw ConfigError(fmt::format("purge batch size {}: must be at least 1", batch_size));
  PurgeReport report;
  std::int64_t committed = 0;  // rows deleted by committed batches
  try {
    const std::int64_t now_ms = clock_->EpochMs();
    auto pick = connection_.Prepare(
        "SELECT id FROM outbox WHERE published = 1 AND parked_at IS NULL "
        "AND COALESCE(published_at, created_at) < ?1 ORDER BY id LIMIT ?2");
    auto copy = connection_.Prepare(
        "INSERT OR REPLACE INTO outbox_archive(id, event_id, aggregate_id, event_type, payload, "
        "created_at, published_at, attempts, archived_at, headers) SELECT id, event_id, "
        "aggregate_id, event_type, payload, created_at, published_at, attempts, ?2, headers "
        "FROM outbox WHERE id = ?1");
    std::optional<sqlite::Statement> note;
    if (!archive) {
      connection_.Exec(kPurgedTable);
      if (!HasColumn("outbox_purged", "event_type"))
        connection_.Exec("ALTER TABLE outbox_purged ADD COLUMN event_type TEXT");
      note.emplace(connection_.Prepare(
          "INSERT OR IGNORE INTO outbox_purged(id, event_id, aggregate_id, purged_at, event_type) "
          "SELECT id, event_id, aggregate_id, ?2, event_type FROM outbox WHERE id = ?1 "
          "AND published = 1 AND parked_at IS NULL"));
    }
    // Only the relay's own mark (1), never a parked row: a foreign writer's published = 2 or
    // 'false' is no proof of a send (status counts such rows), and a row both marked and parked
    // is a contradiction an operator must see (relay.md, "purge").
    auto remove = connection_.Prepare(
        "DELETE FROM outbox WHERE id = ?1 AND published = 1 AND parked_at IS NULL");
    for (;;) {
      sqlite::Transaction txn(connection_);
      pick.Reset();
      pick.Bind(1, cutoff_ms).Bind(2, batch_size);
      std::vector<std::int64_t> ids;
      while (pick.Step()) ids.push_back(pick.ColumnInt64(0));
      pick.Reset();
      if (ids.empty()) break;
      for (std::int64_t id : ids) {
        if (archive) {
          copy.Reset();
          copy.Bind(1, id).Bind(2, now_ms).Run();
          ++report.archived;
        } else {
          note->Reset();
          note->Bind(1, id).Bind(2, now_ms).Run();
        }
        remove.Reset();
        remove.Bind(1, id).Run();
        report.deleted += connection_.Changes();
      }
      HitFailpoint("purge.mid_batch");
      txn.Commit();
      ++report.batches;
      committed = report.deleted;
    }
    connection_.Exec("PRAGMA wal_checkpoint(TRUNCATE)");
    return report;
  } catch (const DbError& e) {
    // Say what is durable: the batches before the failing one are committed.
    throw PhrasedDbError(
        fmt::format("purge published rows in '{}': failed after {} batches of up to {} rows "
                    "({} rows deleted and committed): {} ({})",
                    path(), report.batches, batch_size, committed, e.reason(),
                    sqlite::ResultCodeName(e.code())),
        e.code(), e.reason());
  }
}

PurgeReport Store::PurgeOlderThan(std::int64_t older_than_ms, std::int64_t batch_size,
                                  bool archive) {
  if (older_than_ms < 0)
    throw ConfigError(fmt::format("purge older than {} ms: must be at least 0", older_than_ms));
  return PurgePublished(clock_->EpochMs() - older_than_ms, batch_size, archive);
}

CheckpointReport Store::CheckpointPassive() {
  int wal_frames = -1, checkpointed = -1;
  const int rc = sqlite3_wal_checkpoint_v2(connection_.get(), nullptr, SQLITE_CHECKPOINT_PASSIVE,
                                           &wal_frames, &checkpointed);
  if (rc == SQLITE_BUSY) return {true, -1, -1};
  if (rc != SQLITE_OK)
    sqlite::ThrowDbError(connection_.get(), rc, fmt::format("checkpoint '{}' (passive)", path()));
  return {false, wal_frames, checkpointed};
}

std::int64_t Store::WalSizeBytes() const {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path() + "-wal", ec);
  if (ec == std::errc::no_such_file_or_directory) return 0;
  if (ec) ThrowSystemError(fmt::format("size of '{}-wal'", path()), ec.value());
  return static_cast<std::int64_t>(size);
}
}  // namespace outbox
