// PgStore: purge of published rows, with or without archive.
#include "outbox/pg_store.h"

#include <fmt/format.h>

#include <string>

#include "outbox/error.h"
#include "outbox/failpoint.h"

#include "internal.h"

namespace outbox {

using namespace pg_store;  // this folder's shared helpers (internal.h)

namespace {

// One purge batch in one statement: the oldest batch ($2) published rows before the cutoff ($1,
// epoch ms), deleted; with $3 copied to the archive first (the same statement, so the same
// transaction), marked published there, archived_at ($4, epoch ms). Returns the rows deleted and
// archived.
constexpr const char* kPurgeBatchSql = R"sql(
WITH picked AS (
  SELECT id FROM outbox WHERE published AND parked_at IS NULL
    AND COALESCE(published_at, created_at) < $1
  ORDER BY id LIMIT $2),
gone AS (
  DELETE FROM outbox o USING picked WHERE o.id = picked.id AND o.published AND o.parked_at IS NULL
  RETURNING o.id, o.event_id, o.aggregate_id, o.event_type, o.payload, o.created_at,
            o.published_at, o.attempts, o.last_error, o.headers),
kept AS (
  INSERT INTO outbox_archive(id, event_id, aggregate_id, event_type, payload, created_at,
                             published, published_at, attempts, last_error, archived_at, headers)
  SELECT id, event_id, aggregate_id, event_type, payload, created_at, true, published_at,
         attempts, last_error, $4, headers FROM gone WHERE $3::boolean
  RETURNING 1),
noted AS (
  INSERT INTO outbox_purged(id, event_id, aggregate_id, purged_at, event_type)
  SELECT id, event_id, aggregate_id, $4, event_type FROM gone WHERE NOT $3::boolean
  ON CONFLICT (id) DO NOTHING
  RETURNING 1)
SELECT (SELECT COUNT(*) FROM gone), (SELECT COUNT(*) FROM kept), (SELECT COUNT(*) FROM noted)
)sql";

}  // namespace

PurgeReport PgStore::PurgeOlderThan(std::int64_t older_than_ms, std::int64_t batch_size,
                                    bool archive) {
  if (older_than_ms < 0)
    throw ConfigError(fmt::format("purge older than {} ms: must be at least 0", older_than_ms));
  if (batch_size <= 0)
    throw ConfigError(fmt::format("purge batch size {}: must be at least 1", batch_size));
  PurgeReport report;
  std::int64_t committed = 0;  // rows deleted by committed batches
  try {
    // bigint arithmetic on the server: now - older_than cannot overflow for any older_than >= 0.
    const pg::Result times = connection_.Query(
        std::string("SELECT ") + kEpochMsNow + " - $1::bigint, " + kEpochMsNow,
        {pg::Param::Int(older_than_ms)}, "read the purge cutoff");
    const std::int64_t cutoff_ms = times.Int(0, 0);
    const std::int64_t archived_at_ms = times.Int(0, 1);
    for (;;) {
      pg::Transaction txn(connection_);
      const pg::Result batch = connection_.Query(
          kPurgeBatchSql,
          {pg::Param::Int(cutoff_ms), pg::Param::Int(batch_size), Bool(archive),
           pg::Param::Int(archived_at_ms)},
          "purge a batch of published rows");
      const std::int64_t deleted = batch.Int(0, 0);
      if (deleted == 0) break;  // the destructor ends the empty transaction
      report.deleted += deleted;
      report.archived += batch.Int(0, 1);
      HitFailpoint("purge.mid_batch");
      txn.Commit();
      ++report.batches;
      committed = report.deleted;
    }
    return report;
  } catch (const pg::PgError& e) {
    // Say what is durable: the batches before the failing one are committed.
    throw pg::PgError(fmt::format("purge published rows on '{}': failed after {} batches of up "
                                  "to {} rows ({} rows deleted and committed): {}",
                                  connection_.display_url(), report.batches, batch_size,
                                  committed, e.what()),
                      e.sqlstate());
  }
}

}  // namespace outbox
