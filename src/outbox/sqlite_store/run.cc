// Store: what a run notes beside its rows: the run id, the broker incarnations and the
// partition mapping of each topic.
#include "outbox/store.h"

#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "internal.h"

namespace outbox {

using namespace sqlite_store;  // this folder's shared helpers (internal.h)

std::string Store::RunId() {
  // Asked once per batch by the relay: both statements are kept (Connection::Reuse).
  static const std::string has_table =
      "SELECT COUNT(*) FROM sqlite_master WHERE type='table' AND name='outbox_run'";
  {
    auto count = connection_.Reuse(has_table);
    if (!count->Step() || count->ColumnInt64(0) == 0) return {};
  }
  static const std::string read = "SELECT run_id FROM outbox_run WHERE id = 1";
  auto select = connection_.Reuse(read);
  return select->Step() ? select->ColumnText(0) : std::string();
}

void Store::NoteBrokerIncarnation(const std::string& incarnation) {
  Phrased(std::string("note the broker incarnation"), path(), [&] {
    sqlite::Transaction txn(connection_);
    connection_.Exec(kBrokerTable);
    auto insert = connection_.Prepare(
        "INSERT OR IGNORE INTO outbox_broker(incarnation, noted_at) VALUES(?1, ?2)");
    insert.Bind(1, incarnation).Bind(2, clock_->EpochMs()).Run();
    txn.Commit();
    return 0;
  });
}

std::vector<std::string> Store::BrokerIncarnations() {
  std::vector<std::string> incarnations;
  if (connection_.QueryInt64("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND "
                             "name = 'outbox_broker'") == 0)
    return incarnations;
  auto select = connection_.Prepare("SELECT incarnation FROM outbox_broker ORDER BY rowid");
  while (select.Step()) incarnations.push_back(select.ColumnText(0));
  return incarnations;
}

void Store::NotePartitionMapping(const PartitionMapping& mapping) {
  Phrased(std::string("note the partition mapping"), path(), [&] {
    sqlite::Transaction txn(connection_);
    connection_.Exec(kPartitioningTable);
    auto insert = connection_.Prepare(
        "INSERT OR REPLACE INTO outbox_partitioning(topic, partitioner, partitions, noted_at) "
        "VALUES(?1, ?2, ?3, ?4)");
    insert.Bind(1, mapping.topic)
        .Bind(2, mapping.partitioner)
        .Bind(3, static_cast<std::int64_t>(mapping.partitions))
        .Bind(4, clock_->EpochMs())
        .Run();
    txn.Commit();
    return 0;
  });
}

std::optional<PartitionMapping> Store::ReadPartitionMapping(const std::string& topic) {
  if (connection_.QueryInt64("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND "
                             "name = 'outbox_partitioning'") == 0)
    return std::nullopt;
  auto select = connection_.Prepare(
      "SELECT partitioner, partitions, noted_at FROM outbox_partitioning WHERE topic = ?1");
  select.Bind(1, topic);
  if (!select.Step()) return std::nullopt;
  return PartitionMapping{topic, select.ColumnText(0),
                          static_cast<std::int32_t>(select.ColumnInt64(1)), select.ColumnInt64(2)};
}
}  // namespace outbox
