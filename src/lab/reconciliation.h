// Reconciliation: the chapter's final check (最终对账) of the database against
// the topic, and the --expect comparison that turns it into a test.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lab/topic_reader.h"
#include "outbox/store.h"

namespace outbox::lab {

struct DbSnapshot {
  std::int64_t business_loans = 0;
  OutboxCounts outbox;
  std::vector<std::string> outbox_event_ids;  // in outbox id order
};

struct KafkaReconciliation {
  std::int64_t records = 0;
  std::int64_t distinct_event_ids = 0;
  std::vector<std::pair<std::string, std::int64_t>> duplicates;  // id, count > 1; first-seen order
  std::vector<std::string> missing;     // in the outbox, never in Kafka: lost
  std::vector<std::string> unexpected;  // in Kafka, not in the outbox: phantom
};

// Reads the counts and the outbox's event ids in one read transaction.
// Archived rows (purge --archive) are not counted. Throws DbError.
DbSnapshot TakeDbSnapshot(Store& store);

KafkaReconciliation Reconcile(const std::vector<std::string>& outbox_event_ids,
                              const std::vector<TopicRecord>& records);

// Expected values from "business=5,outbox=5,kafka_records=8". Keys: business,
// outbox, published, unpublished, kafka_records, kafka_distinct,
// kafka_duplicates, kafka_missing, kafka_unexpected. Throws ConfigError for
// an unknown key, a missing '=', or a value that is not a non-negative integer.
std::map<std::string, std::int64_t> ParseExpectations(const std::string& text);

// The same grammar over another command's keys (check --expect): known_keys
// are the keys allowed, in the order the error message lists them.
std::map<std::string, std::int64_t> ParseExpectations(const std::string& text,
                                                      const std::vector<std::string>& known_keys);

// The actual values under the same keys; kafka_* only when kafka is given.
std::map<std::string, std::int64_t> ActualValues(const DbSnapshot& db,
                                                 const std::optional<KafkaReconciliation>& kafka);

// One line per expectation that does not hold: "kafka_records: expected 8, got 5".
// An expected kafka_* key without a Kafka result yields
// "kafka_records: expected 8, but no broker is configured".
std::vector<std::string> CompareExpectations(const std::map<std::string, std::int64_t>& expected,
                                             const std::map<std::string, std::int64_t>& actual);

}  // namespace outbox::lab
