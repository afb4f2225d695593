// relay --key aggregate-id's check of the key->partition mapping at start
// (lab/check/partition_mapping.h).
#pragma once

#include <librdkafka/rdkafka.h>

#include <functional>

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
// Throws the store's read errors, ConfigError (-X). When a count is recorded and the broker
// does not answer, it asks again until it does (tries of 4 s, 8 s, ... up to 30 s, for a slow
// broker), with one `waiting` line: sending before the count is compared would put an
// aggregate's events on a changed topic unchecked. stop_requested is asked between tries; a
// stop then throws CommandError kBrokerUnavailable. json: its lines as JSON objects
// {"report": "partition_mapping", "event": ...} (relay --json).
// Returns true when the partition count is still unknown (the topic does not exist yet, or the
// broker did not answer and none is recorded): the relay then notes it after its first mark
// (NotePartitionCount), when its own send has created the topic.
bool PinPartitionMapping(const GlobalOptions& global, OutboxStore& store, bool allow_change,
                         const std::function<bool()>& stop_requested, bool json);

// Notes on store --topic's partition count as the relay's producer sees it now, when the store
// has none recorded yet (a count recorded by an earlier start is kept, and a count that differs
// from it gets one `[relay] warning: partition count changed` line: the relay has sent already,
// and its next start stops with exit 21). Returns true when the count is known now (noted or not
// needed), false when the broker did not give it within 2 s.
// A count noted only at the next start would be the count after a change made meanwhile: the
// change would then go unseen. Throws the store's errors.
bool NotePartitionCount(const GlobalOptions& global, OutboxStore& store, rd_kafka_t* producer,
                        bool json);

}  // namespace outbox::cli
