// The Kafka partition-reading loop shared by the topic reader (verify, check)
// and the idempotent consumer: poll an assigned consumer until every
// partition has been read up to the end offset taken at the start, within a
// deadline. Records produced after the start are not waited for. A partition
// also ends where the consumer reports its end (_PARTITION_EOF, when
// enable.partition.eof is set): a transaction's commit or abort marker takes
// an offset no message is delivered at, and under isolation.level
// read_committed the end is the last stable offset (an open transaction's
// records are not delivered); next_offset[p] then moves to that end.
#pragma once

#include <librdkafka/rdkafka.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace outbox::lab {

using Deadline = std::chrono::steady_clock::time_point;

// Milliseconds left until deadline, >= 0, for librdkafka timeouts.
int RemainingMs(Deadline deadline);

// Polls consumer (already assigned) until next_offset[p] >= end_offset[p] for
// every partition p of next_offset, calling on_message for every record it
// polls (a record at or past the end offset included: the caller decides) and
// then moving next_offset[partition] past it. what names the read in errors
// ("read topic 't' from 'b'"). Throws KafkaError
// "<what>: timed out after <timeout_ms> ms with <n> records read" at the
// deadline, or for any consumer error other than _PARTITION_EOF; whatever
// on_message throws.
void ReadPartitionsToEnd(rd_kafka_t* consumer, std::map<std::int32_t, std::int64_t>& next_offset,
                         const std::map<std::int32_t, std::int64_t>& end_offset, Deadline deadline,
                         int timeout_ms, const std::string& what,
                         const std::function<void(const rd_kafka_message_t&)>& on_message);

}  // namespace outbox::lab
