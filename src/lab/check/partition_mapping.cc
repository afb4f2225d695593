#include "lab/check/partition_mapping.h"

#include <fmt/format.h>

#include "outbox/error.h"

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

namespace {

// A failed write of the record is reported, not thrown: the relay's own loop retries or gives up
// on the store's errors, and the comparison runs again at the next start.
void Note(OutboxStore& store, const PartitionMapping& mapping, PartitionMappingCheck& check) {
  try {
    store.NotePartitionMapping(mapping);
  } catch (const Error& e) {
    check.note_error = e.what();
  }
}

}  // namespace

PartitionMappingCheck CheckPartitionMapping(OutboxStore& store, const PartitionMapping& current,
                                            bool allow_change) {
  PartitionMappingCheck check;
  const std::optional<PartitionMapping> recorded = store.ReadPartitionMapping(current.topic);
  if (!recorded) {
    check.first = true;
    Note(store, current, check);
    return check;
  }
  check.recorded = *recorded;
  check.change = PartitionMappingChange(*recorded, current);
  const bool learned_count = recorded->partitions == 0 && current.partitions > 0;
  if ((check.change.empty() && learned_count) || (!check.change.empty() && allow_change))
    Note(store, current, check);
  return check;
}

}  // namespace outbox::lab
