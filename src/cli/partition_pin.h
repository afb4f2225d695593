// relay --key aggregate-id's check of the key->partition mapping at start
// (lab/check/partition_mapping.h).
#pragma once

#include "cli/command.h"
#include "outbox/outbox_store.h"

namespace outbox::cli {

// Records on store the partitioner of the producer properties (-X partitioner, default
// consistent_random) and the partition count of --topic (read from --brokers, at most 2 s; not
// compared when the broker does not answer or the topic does not exist yet), or compares them
// with what a relay recorded before. Throws CommandError kPartitionMappingChanged naming both
// mappings when they differ and allow_change is false; prints one `[relay] partition mapping
// changed` line when allow_change let it through, and a `not recorded` line when the store
// could not write the record (the relay goes on; its loop meets the store's errors itself).
// Throws the store's read errors, ConfigError (-X).
void PinPartitionMapping(const GlobalOptions& global, OutboxStore& store, bool allow_change);

}  // namespace outbox::cli
