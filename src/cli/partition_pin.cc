#include "cli/partition_pin.h"

#include <fmt/format.h>

#include "cli/publishing.h"
#include "lab/check/partition_mapping.h"
#include "lab/check/topic_reader.h"

namespace outbox::cli {

void PinPartitionMapping(const GlobalOptions& global, OutboxStore& store, bool allow_change) {
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
  if (check.change.empty()) return;
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
}

}  // namespace outbox::cli
