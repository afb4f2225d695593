// The restart tail check of relay --tail-check: at-least-once without Kafka transactions, minus
// the duplicates of a relay that died between the broker's ack and its mark.
//
// A relay killed after the ack and before the mark (the chapter's publish-hold window, failpoint
// relay.after_ack_before_mark) leaves rows unpublished whose records are already on the topic.
// Before the next leader sends anything, the tail check reads every partition of the topic from
// a starting offset up to the high watermark it saw at the start of the read, collects the
// headers outbox_id and run_id of each record, and returns the ids of this run that are already
// there; the relay marks them (RelayOptions::committed_ids) and sends only the rest.
//
// Where reading starts. The store records no offset at mark time, so the start is derived from
// time: a record of an unpublished row was produced after that row was written, so its
// timestamp (CreateTime, set by the producer at produce; or LogAppendTime) is not older than the
// row's created_at. The check asks each partition for the first offset whose timestamp is at or
// after (oldest unpublished created_at - kTailCheckClockSlackMs) (ListOffsets by timestamp,
// rd_kafka_offsets_for_times). The slack covers the clocks of the writer (or database server)
// and of the relay's host drifting apart, up to that much. librdkafka 2.0.2's mock cluster (the
// lab's embedded broker) answers -1 to every ListOffsets by timestamp (rdkafka_mock_handlers.c:
// "FIXME: by timestamp"), so there the caller asks to read from the low watermark instead.
//
// What it cannot close. Records written after the check read its end (a relay paused past its
// lease and resumed after the new leader's check: a zombie) are not seen, and are duplicated.
// Fencing closes that: --exactly-once (the producer epoch) or a consumer that reads
// read_committed of a transactional relay. docs/exactly-once.md, "The restart tail check".
//
// Pure functions and one read (ReadTail), which makes and destroys its consumer inside the call.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/kafka/handles.h"

namespace outbox::kafka {

// How far before the oldest unpublished row's created_at the check starts reading, ms: the clock
// difference between the row's writer and the producer's host it tolerates.
inline constexpr std::int64_t kTailCheckClockSlackMs = 60000;

// Where the check starts reading, epoch ms: the oldest of created_at_ms (the unpublished rows'
// created_at, epoch ms) minus slack_ms. nullopt when created_at_ms is empty: nothing is
// unpublished, so nothing needs checking.
std::optional<std::int64_t> TailCheckSince(const std::vector<std::int64_t>& created_at_ms,
                                           std::int64_t slack_ms = kTailCheckClockSlackMs);

// The offsets of one partition that the check reads: [begin, end).
struct PartitionRange {
  std::int32_t partition = 0;
  std::int64_t begin = 0;
  std::int64_t end = 0;  // the high watermark when the check started: the records after it are
                         // the window the check leaves open
  bool operator==(const PartitionRange&) const = default;
};

// The range of one partition from its watermarks (low, high) and ListOffsets' answer by_time for
// the check's start time: the first offset with a timestamp at or after it, or -1 when no
// record is that recent (nothing to read: begin = high). nullopt: no answer by time is asked
// (the embedded broker) and the check reads every retained record from low. An answer outside
// [low, high] is clamped into it.
PartitionRange TailRange(std::int32_t partition, std::int64_t low, std::int64_t high,
                         std::optional<std::int64_t> by_time);

// One record as the check reads it: its place and the relay's headers (empty: absent).
struct TailRecord {
  std::int32_t partition = 0;
  std::int64_t offset = 0;
  std::string outbox_id;  // header "outbox_id", decimal
  std::string run_id;     // header "run_id"
  std::string event_id;   // header "event_id"
};

// Whether outbox row id is still unpublished and carries event_id (an id alone is not enough:
// a foreign writer may delete a published row and insert another event under the same explicit
// id, which a record of the first one must not mark).
using PendingTest = std::function<bool(std::int64_t id, std::string_view event_id)>;

// The outbox ids, ascending and distinct, that records carry for run run_id (every run when
// run_id is empty) and for which is_pending(id, the record's event_id) holds (every id when
// is_pending is null). A record without an outbox_id header, or with one that is not a decimal
// 64-bit integer, carries none (another producer's record); 0 and negative ids count (a foreign
// writer's rows, outbox/id_range.h).
std::vector<std::int64_t> FindDeliveredIds(const std::vector<TailRecord>& records,
                                           const std::string& run_id,
                                           const PendingTest& is_pending = nullptr);

struct TailCheckOptions {
  std::string brokers;   // bootstrap.servers
  std::string topic;     // the outbox topic
  // Security settings to pass on (-X security.*, sasl.*, ssl.*); the others are the producer's.
  std::vector<Property> properties;
  // Epoch ms to read from (TailCheckSince), by ListOffsets by timestamp; nullopt: from each
  // partition's low watermark (every retained record).
  std::optional<std::int64_t> since_ms;
  std::string run_id;    // only this run's ids (FindDeliveredIds)
  PendingTest is_pending;  // only the rows it accepts (null: any id)
  int timeout_ms = 10000;           // for the whole check
};

struct TailCheckResult {
  std::vector<PartitionRange> ranges;  // by partition
  std::int64_t records_read = 0;
  std::vector<std::int64_t> found;     // FindDeliveredIds over the records read
};

// Reads options.topic's partitions over their TailRange with isolation.level=read_uncommitted
// (a plain producer's records are visible as soon as they are acked) and returns what it found.
// A topic that does not exist yet has nothing on it: an empty result. Throws KafkaError when
// the metadata, watermarks, offsets or records cannot be read within options.timeout_ms;
// ConfigError for a bad property.
TailCheckResult ReadTail(const TailCheckOptions& options);

}  // namespace outbox::kafka
