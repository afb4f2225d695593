// Checker: judges a run from what is durable — the database and the whole
// topic — in the style of Jepsen's total-queue checker. Duplicates are
// counted but allowed (at-least-once); anything lost, phantom or half-written
// makes the run invalid.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lab/topic_reader.h"
#include "outbox/store.h"

namespace outbox::lab {

struct CheckResult {
  std::int64_t business_rows = 0;
  std::int64_t outbox_rows = 0;      // committed events: what the relay owes Kafka
  std::int64_t kafka_records = 0;
  std::int64_t ok = 0;               // outbox events present in Kafka
  std::vector<std::string> lost;     // in the outbox, never in Kafka
  std::vector<std::pair<std::string, std::int64_t>> duplicated;  // id, times seen (> 1)
  std::vector<std::string> phantom;  // in Kafka, but no committed outbox row has it
  std::vector<std::string> atomicity;  // "loan L-1 has no outbox row" / "event e has no loan"
  std::vector<std::string> lost_after_mark;  // marked published, yet not in Kafka
  std::vector<std::string> stuck;    // still unpublished (or parked) when checked
  std::vector<std::string> order_violations;  // per aggregate, first sightings out of id order
  bool valid() const {
    return lost.empty() && phantom.empty() && atomicity.empty() && lost_after_mark.empty() &&
           stuck.empty();
  }
};

// Reads the lab's tables and compares them with records (every record of the
// topic). Throws DbError.
CheckResult CheckRun(Store& store, const std::vector<TopicRecord>& records);

}  // namespace outbox::lab
