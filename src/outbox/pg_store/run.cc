// PgStore: what a run notes beside its rows: the run id, the broker incarnations and the
// partition mapping of each topic.
#include "outbox/pg_store.h"

#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "internal.h"

namespace outbox {

using namespace pg_store;  // this folder's shared helpers (internal.h)

std::string PgStore::RunId() {
  // Read once per batch by the relay: prepared once per connection.
  static const std::string sql = "SELECT run_id FROM outbox_run LIMIT 1";
  const pg::Result run = connection_.QueryPrepared(sql, {}, "read the run id");
  return run.rows() == 0 ? std::string() : run.Text(0, 0);
}

void PgStore::NoteBrokerIncarnation(const std::string& incarnation) {
  connection_.Query(std::string("INSERT INTO outbox_broker(incarnation, noted_at) VALUES ($1, ") +
                        kEpochMsNow + ") ON CONFLICT (incarnation) DO NOTHING",
                    {pg::Param::Text(incarnation)}, "note the broker incarnation");
}

void PgStore::NotePartitionMapping(const PartitionMapping& mapping) {
  // Not part of SchemaCurrent's tables: created on first use (IF NOT EXISTS takes no lock on any
  // outbox table), dropped by a reset, as outbox_partitioning is on SQLite.
  // Two relays starting together may both create it: the loser's unique violation on the
  // catalog (23505) or duplicate table (42P07) means the table is there.
  if (connection_.QueryInt("SELECT (to_regclass('outbox_partitioning') IS NULL)::int", {},
                           "look for the partition mapping") == 1) {
    try {
      connection_.Exec(
          "CREATE TABLE IF NOT EXISTS outbox_partitioning (topic TEXT PRIMARY KEY, "
          "partitioner TEXT NOT NULL, partitions INTEGER NOT NULL, noted_at BIGINT NOT NULL)",
          "create the partition mapping table");
    } catch (const pg::PgError& e) {
      if (e.sqlstate() != "23505" && e.sqlstate() != "42P07") throw;
    }
  }
  connection_.Query(
      std::string("INSERT INTO outbox_partitioning(topic, partitioner, partitions, noted_at) "
                  "VALUES ($1, $2, $3, ") +
          kEpochMsNow +
          ") ON CONFLICT (topic) DO UPDATE SET partitioner = excluded.partitioner, "
          "partitions = excluded.partitions, noted_at = excluded.noted_at",
      {pg::Param::Text(mapping.topic), pg::Param::Text(mapping.partitioner),
       pg::Param::Int(mapping.partitions)},
      "note the partition mapping");
}

std::optional<PartitionMapping> PgStore::ReadPartitionMapping(const std::string& topic) {
  if (connection_.QueryInt("SELECT (to_regclass('outbox_partitioning') IS NOT NULL)::int", {},
                           "look for the partition mapping") == 0)
    return std::nullopt;
  const pg::Result rows = connection_.Query(
      "SELECT partitioner, partitions, noted_at FROM outbox_partitioning WHERE topic = $1",
      {pg::Param::Text(topic)}, "read the partition mapping");
  if (rows.rows() == 0) return std::nullopt;
  return PartitionMapping{topic, rows.Text(0, 0), static_cast<std::int32_t>(rows.Int(0, 1)),
                          rows.Int(0, 2)};
}

std::vector<std::string> PgStore::BrokerIncarnations() {
  const pg::Result rows = connection_.Query(
      "SELECT incarnation FROM outbox_broker ORDER BY noted_at, incarnation", {},
      "read the broker incarnations");
  std::vector<std::string> incarnations;
  for (int i = 0; i < rows.rows(); ++i) incarnations.push_back(rows.Text(i, 0));
  return incarnations;
}

}  // namespace outbox
