#include "cli/partition_pin.h"

#include <fmt/format.h>

#include "cli/publishing.h"
#include "lab/check/partition_mapping.h"
#include "lab/check/topic_reader.h"

namespace outbox::cli {

bool PinPartitionMapping(const GlobalOptions& global, OutboxStore& store, bool allow_change) {
  const std::vector<kafka::Property> properties = ProducerProperties(global);
  PartitionMapping current;
  current.topic = global.topic;
  current.partitioner = lab::PartitionerOf(properties);
  current.partitions =
      lab::ReadPartitionCount(global.RequireBrokers(), global.ParsedProperties(), global.topic, 2000);
  const lab::PartitionMappingCheck check =
      lab::CheckPartitionMapping(store, current, allow_change);
  if (!check.note_error.empty())
    fmt::print("[relay] partition mapping of topic '{}' not recorded ({}); compared again at the "
               "next start\n",
               current.topic, check.note_error);
  const bool count_unknown = current.partitions == 0;
  if (check.change.empty()) return count_unknown;
  if (!allow_change)
    throw CommandError(
        ExitCode::kPartitionMappingChanged,
        fmt::format("topic '{}' was published with partitioner={} partitions={} and this relay "
                    "would use partitioner={} partitions={} ({}): an aggregate's later events "
                    "would land on another partition and lose their order; keep -X "
                    "partitioner={}, or pass --allow-partitioner-change to record the new mapping",
                    current.topic, check.recorded.partitioner, check.recorded.partitions,
                    current.partitioner, current.partitions, check.change,
                    check.recorded.partitioner));
  fmt::print("[relay] partition mapping changed on topic '{}' ({}), allowed by "
             "--allow-partitioner-change: events of one aggregate from before and after may be "
             "read out of order; `check` counts them as order hazards\n",
             current.topic, check.change);
  return count_unknown;
}

bool NotePartitionCount(const GlobalOptions& global, OutboxStore& store, rd_kafka_t* producer) {
  PartitionMapping current;
  current.topic = global.topic;
  current.partitioner = lab::PartitionerOf(ProducerProperties(global));
  current.partitions = lab::ReadPartitionCount(producer, global.topic, 2000);
  if (current.partitions == 0) return false;
  // With no count recorded, CheckPartitionMapping records this one (learned_count).
  const lab::PartitionMappingCheck check = lab::CheckPartitionMapping(store, current, false);
  if (!check.note_error.empty()) return false;
  return true;
}

}  // namespace outbox::cli
