#include "lab/partition_mapping.h"

#include <fmt/format.h>

namespace outbox::lab {

std::string PartitionerOf(const std::vector<kafka::Property>& properties) {
  std::string partitioner = kDefaultPartitioner;
  for (const kafka::Property& property : properties)
    if (property.first == "partitioner") partitioner = property.second;
  return partitioner;
}

std::string PartitionMappingChange(const PartitionMapping& recorded,
                                   const PartitionMapping& current) {
  std::string change;
  if (recorded.partitioner != current.partitioner)
    change = fmt::format("partitioner {} -> {}", recorded.partitioner, current.partitioner);
  if (recorded.partitions > 0 && current.partitions > 0 &&
      recorded.partitions != current.partitions)
    change += fmt::format("{}partitions {} -> {}", change.empty() ? "" : ", ", recorded.partitions,
                          current.partitions);
  return change;
}

PartitionMappingCheck CheckPartitionMapping(OutboxStore& store, const PartitionMapping& current,
                                            bool allow_change) {
  PartitionMappingCheck check;
  const std::optional<PartitionMapping> recorded = store.ReadPartitionMapping(current.topic);
  if (!recorded) {
    check.first = true;
    store.NotePartitionMapping(current);
    return check;
  }
  check.recorded = *recorded;
  check.change = PartitionMappingChange(*recorded, current);
  const bool learned_count = recorded->partitions == 0 && current.partitions > 0;
  if ((check.change.empty() && learned_count) || (!check.change.empty() && allow_change))
    store.NotePartitionMapping(current);
  return check;
}

}  // namespace outbox::lab
