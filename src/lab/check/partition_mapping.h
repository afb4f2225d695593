// The key->partition mapping a relay publishes with, pinned in the store: per-key order in Kafka
// holds only while every record of a key goes to one partition, so a relay that starts with
// another partitioner (librdkafka's `partitioner` property) or on a topic with another partition
// count would send an aggregate's later events to another partition, where a consumer may read
// them before the earlier ones. The relay records the mapping at start and refuses another one
// unless told (relay --allow-partitioner-change). Pure functions and one store call; thread-safe
// as the store given.
#pragma once

#include <string>
#include <vector>

#include "outbox/kafka/handles.h"
#include "outbox/outbox_store.h"
#include "outbox/store.h"

namespace outbox::lab {

// librdkafka's default `partitioner` (CONFIGURATION.md): crc32 of the key, a random partition for
// an empty or null key.
inline constexpr const char* kDefaultPartitioner = "consistent_random";

// The `partitioner` of properties (the last one given wins, as in librdkafka's conf), else
// kDefaultPartitioner.
std::string PartitionerOf(const std::vector<kafka::Property>& properties);

// Why current maps keys differently from recorded, in one phrase
// ("partitioner consistent_random -> murmur2_random", "partitions 8 -> 12"), or "" when it maps
// them the same. A partition count of 0 (not known) on either side is not compared.
std::string PartitionMappingChange(const PartitionMapping& recorded,
                                   const PartitionMapping& current);

struct PartitionMappingCheck {
  bool first = false;    // nothing was recorded for the topic: current is recorded now
  std::string change;    // PartitionMappingChange, "" when the same
  PartitionMapping recorded;  // what the store held (when !first)
  // The store's error when recording current failed (say an I/O error); empty when it was
  // recorded or nothing needed recording.
  std::string note_error;
};

// Compares current with what store recorded for current.topic. Records current when nothing was
// recorded, when the mapping is the same but the partition count was not known before, or when
// it changed and allow_change is true; leaves the record alone when it changed and allow_change
// is false (the caller refuses to start). A failed write is returned in note_error, not thrown.
// Throws the store's errors on the read.
PartitionMappingCheck CheckPartitionMapping(OutboxStore& store, const PartitionMapping& current,
                                            bool allow_change);

}  // namespace outbox::lab
