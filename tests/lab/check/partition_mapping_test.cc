// The key->partition mapping pinned in the store (lab/check/partition_mapping.h) on both backends, and
// the outbox contract's refusal of an empty aggregate id.
#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "lab/check/partition_mapping.h"
#include "outbox/error.h"
#include "outbox/pg/connection.h"
#include "outbox/pg_store.h"
#include "outbox/store.h"
#include "pg_test_support.h"
#include "relay_test_support.h"
#include "test_support.h"

using namespace outbox;

namespace {

PartitionMapping Mapping(const std::string& partitioner, std::int32_t partitions,
                         const std::string& topic = "orders") {
  return PartitionMapping{topic, partitioner, partitions, 0};
}

// The same steps on either store: first start records, the same mapping passes, another one is
// refused (and not recorded) unless allowed, a reset forgets it.
void CheckPinning(OutboxStore& store) {
  const auto first = lab::CheckPartitionMapping(store, Mapping("consistent_random", 8), false);
  CHECK(first.first);
  CHECK(first.change.empty());
  const auto same = lab::CheckPartitionMapping(store, Mapping("consistent_random", 8), false);
  CHECK_FALSE(same.first);
  CHECK(same.change.empty());

  const auto refused = lab::CheckPartitionMapping(store, Mapping("murmur2_random", 8), false);
  CHECK(refused.change == "partitioner consistent_random -> murmur2_random");
  CHECK(refused.recorded.partitioner == "consistent_random");
  CHECK(refused.recorded.partitions == 8);
  CHECK(store.ReadPartitionMapping("orders")->partitioner == "consistent_random");

  const auto grown = lab::CheckPartitionMapping(store, Mapping("consistent_random", 12), false);
  CHECK(grown.change == "partitions 8 -> 12");
  // Another topic has a mapping of its own.
  CHECK(lab::CheckPartitionMapping(store, Mapping("murmur2_random", 1, "audit"), false).first);

  const auto allowed = lab::CheckPartitionMapping(store, Mapping("murmur2_random", 8), true);
  CHECK(allowed.change == "partitioner consistent_random -> murmur2_random");
  CHECK(store.ReadPartitionMapping("orders")->partitioner == "murmur2_random");
  CHECK(lab::CheckPartitionMapping(store, Mapping("murmur2_random", 8), false).change.empty());
}

}  // namespace

TEST_CASE("PartitionMappingChange compares the partitioner and known partition counts only", "[partitioning]") {
  CHECK(lab::PartitionMappingChange(Mapping("consistent_random", 8), Mapping("consistent_random", 8)) == "");
  CHECK(lab::PartitionMappingChange(Mapping("consistent_random", 0), Mapping("consistent_random", 8)) == "");
  CHECK(lab::PartitionMappingChange(Mapping("consistent_random", 8), Mapping("consistent_random", 0)) == "");
  CHECK(lab::PartitionMappingChange(Mapping("consistent_random", 8), Mapping("murmur2_random", 4)) ==
        "partitioner consistent_random -> murmur2_random, partitions 8 -> 4");
}

TEST_CASE("PartitionerOf takes the last partitioner property and defaults to consistent_random", "[partitioning]") {
  CHECK(lab::PartitionerOf({{"compression.type", "none"}}) == "consistent_random");
  CHECK(lab::PartitionerOf({{"partitioner", "murmur2"}, {"partitioner", "fnv1a_random"}}) ==
        "fnv1a_random");
}

TEST_CASE("An SQLite store records the partition mapping and a reset forgets it", "[partitioning]") {
  testing::TempDir dir;
  Store store(dir.File("outbox.db"), testing::FastStoreOptions(), OpenMode::kCreate);
  store.ResetSchema();
  CHECK_FALSE(store.ReadPartitionMapping("orders").has_value());
  CheckPinning(store);
  // Learning the count of a topic that did not exist at the first start is no change.
  CHECK(lab::CheckPartitionMapping(store, Mapping("murmur2_random", 0, "late"), false).first);
  CHECK(lab::CheckPartitionMapping(store, Mapping("murmur2_random", 3, "late"), false).change.empty());
  CHECK(store.ReadPartitionMapping("late")->partitions == 3);
  store.ResetSchema();
  CHECK_FALSE(store.ReadPartitionMapping("orders").has_value());
}

TEST_CASE("A PostgreSQL store records the partition mapping and a reset forgets it", "[postgres]") {
  testing::PgSchema schema("pm");
  PgStore store(schema.url());
  store.ResetSchema();
  CHECK_FALSE(store.ReadPartitionMapping("orders").has_value());
  CheckPinning(store);
  store.ResetSchema();
  CHECK_FALSE(store.ReadPartitionMapping("orders").has_value());
}

TEST_CASE("An SQLite outbox refuses an empty aggregate id from the library and from outside SQL", "[partitioning]") {
  testing::TempDir dir;
  Store store(dir.File("outbox.db"), testing::FastStoreOptions(), OpenMode::kCreate);
  store.ResetSchema();
  {
    auto txn = store.BeginWrite();
    CHECK_THROWS_WITH(store.Enqueue(txn, OutboxEvent{"evt-1", "", "LoanCreated", "{}", testing::kNowMs}),
                      Catch::Contains("aggregate_id is empty"));
  }
  auto txn = store.BeginWrite();
  try {
    txn.connection().Exec(
        "INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at) "
        "VALUES ('evt-2', '', 'LoanCreated', '{}', 1764547200000)");
    FAIL("an outside INSERT with an empty aggregate_id was accepted");
  } catch (const DbError& e) {
    CHECK(std::string(e.what()).find("outbox.aggregate_id must not be empty") != std::string::npos);
  }
}

TEST_CASE("A PostgreSQL outbox refuses an empty aggregate id from the library and from outside SQL", "[postgres]") {
  testing::PgSchema schema("pm");
  PgStore store(schema.url());
  store.ResetSchema();
  {
    auto txn = store.BeginWrite();
    CHECK_THROWS_WITH(store.Enqueue(txn, OutboxEvent{"evt-1", "", "LoanCreated", "{}", 0}),
                      Catch::Contains("aggregate_id is empty"));
  }
  pg::Connection outside(schema.url());
  try {
    outside.Exec("INSERT INTO outbox(event_id, aggregate_id, event_type, payload) "
                 "VALUES ('evt-2', '', 'LoanCreated', '\\x7b7d')",
                 "insert from outside");
    FAIL("an outside INSERT with an empty aggregate_id was accepted");
  } catch (const pg::PgError& e) {
    CHECK(e.sqlstate() == "23514");  // check_violation
    CHECK(std::string(e.what()).find("outbox_aggregate_id_not_empty") != std::string::npos);
  }
  CHECK(store.Count().total == 0);
}

TEST_CASE("A partition mapping that cannot be written is reported and not thrown", "[partitioning]") {
  testing::TempDir dir;
  {
    Store store(dir.File("outbox.db"), testing::FastStoreOptions(), OpenMode::kCreate);
    store.ResetSchema();
  }
  Store read_only(dir.File("outbox.db"), testing::FastStoreOptions(), OpenMode::kReadOnly);
  const auto check = lab::CheckPartitionMapping(read_only, Mapping("consistent_random", 8), false);
  CHECK(check.first);
  CHECK(check.note_error.find("SQLITE_READONLY") != std::string::npos);
  CHECK_FALSE(read_only.ReadPartitionMapping("orders").has_value());
}
