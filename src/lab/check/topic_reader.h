// Reads a whole topic, every partition from its low to its high watermark, as
// kafka-console-consumer --from-beginning does in the chapter's final check.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "outbox/event.h"
#include "outbox/kafka/handles.h"
#include "outbox/outbox_store.h"
#include "outbox/topic_template.h"

namespace outbox::lab {

struct TopicRecord {
  std::int32_t partition = 0;
  std::int64_t offset = 0;
  std::string key;
  std::string value;
  // The record's event id: header "event_id", else the payload's "eventId",
  // else the key.
  std::string event_id;
  // Header "run_id" (Store::RunId() of the database it came from), or empty
  // when the record has none (produced by another client, or before run ids).
  std::string run_id;
  std::vector<RecordHeader> headers = {};  // every record header, in order
  std::string topic = {};                  // the topic it was read from
};

// One partition as the read found it.
struct PartitionExtent {
  std::int32_t partition = 0;
  // The low watermark: the first offset the broker still holds. Above 0 the
  // broker dropped the records below it (retention: a real Kafka's
  // retention.ms/bytes, or the embedded broker's 5 MiB per partition).
  std::int64_t log_start = 0;
  std::int64_t end = 0;  // the high watermark when the read began
  std::string topic = {};  // the topic the partition belongs to
  // On a topic whose cleanup.policy includes compact: the offsets between log_start and end that
  // held no record for the read (compaction removed them; transaction markers and aborted
  // records count too). A compacted topic keeps only the last record of a key, and its log start
  // does not move, so these are dropped records as much as those below log_start. 0 otherwise.
  std::int64_t compacted = 0;
};

struct TopicLog {
  std::vector<TopicRecord> records;         // ordered by partition then offset
  std::vector<PartitionExtent> partitions;  // every partition of the topic, by id
  // False when the broker's metadata does not list the topic (Kafka's
  // UNKNOWN_TOPIC_OR_PART): the read found nothing because there is nothing.
  bool topic_exists = false;
  // The broker's incarnation when the read began (BrokerIncarnationOf): empty
  // when the broker names none.
  std::string broker_incarnation;
  std::string topic;    // the topic read, and the bootstrap servers it was read from,
  std::string brokers;  // for messages about the read

  // Offsets the broker no longer holds, over all partitions (the sum of log_start and compacted).
  std::int64_t Dropped() const;
};

struct TopicReadOptions {
  std::string brokers;
  std::string topic;
  std::vector<kafka::Property> properties;  // -X, applied last
  // Bound on the whole read (metadata, watermarks, fetches), in ms.
  int timeout_ms = 10000;
  // For a judge (check, verify, report) at read_committed: read up to the end a read_uncommitted
  // reader sees, waiting within timeout_ms while an open transaction holds the last stable offset
  // below it, and throw KafkaError naming the offsets held back when it does not end in time
  // (records past it would otherwise look lost). False (consume, as Kafka's console consumer): stop
  // at the last stable offset.
  bool wait_for_open_transactions = false;
};

// Returns every record, ordered by partition then offset. A topic that does
// not exist yields no records. Throws KafkaError when the broker cannot be
// reached or the read does not finish within timeout_ms; ConfigError for a
// bad -X property.
std::vector<TopicRecord> ReadTopic(const TopicReadOptions& options);

// The same read, with each partition's log start (low watermark) and end, so
// that a checker can tell "not in Kafka" from "maybe dropped by retention".
// Throws as ReadTopic.
TopicLog ReadTopicLog(const TopicReadOptions& options);

// Which broker incarnation a client talks to: "embedded:<id>" for the lab's
// embedded broker (its marker topic, see kIncarnationTopicPrefix in
// lab/broker/embedded_broker.h; a new id at every start, since its records live in
// memory and die with it), else "cluster:<id>" for a real Kafka cluster (its
// cluster id, which outlives broker restarts, as its records do), else empty.
// metadata: of all topics, from client. Waits at most timeout_ms (ms) for the
// cluster id. Never throws.
std::string BrokerIncarnationOf(rd_kafka_t* client, const rd_kafka_metadata_t& metadata,
                                int timeout_ms);

// Connects to brokers and returns BrokerIncarnationOf, or empty when the
// broker cannot be reached within timeout_ms (ms). Throws ConfigError for a
// bad -X property only.
std::string ReadBrokerIncarnation(const std::string& brokers,
                                  const std::vector<kafka::Property>& properties, int timeout_ms);

// The same through a client the caller already has (a relay's producer): no second client to
// create and destroy. Empty when the broker does not answer within timeout_ms (ms). Never throws.
std::string ReadBrokerIncarnation(rd_kafka_t* client, int timeout_ms);

// The partition count of topic on brokers, or 0 when the broker cannot be reached within
// timeout_ms (ms) or the topic does not exist (yet); *answered (when given) says which: false
// when the broker did not answer. Throws ConfigError for a bad -X property only.
std::int32_t ReadPartitionCount(const std::string& brokers,
                                const std::vector<kafka::Property>& properties,
                                const std::string& topic, int timeout_ms,
                                bool* answered = nullptr);
// The same through a client the caller owns (the relay's producer: no second client).
std::int32_t ReadPartitionCount(rd_kafka_t* client, const std::string& topic, int timeout_ms,
                                bool* answered = nullptr);

// The topics a run of the relay used: {topic} without a template (topic_template empty), else
// every topic the template gives the store's event types (OutboxStore::EventTypes), sorted and
// distinct; an event type that makes an illegal topic names none (its rows were parked, never
// sent). An outbox with no rows gives {topic}, which is then read as an empty topic would be.
// Throws ConfigError for a template TopicTemplate::Parse refuses, DbError from the store.
std::vector<std::string> TopicsOfRun(OutboxStore& store, const std::string& topic,
                                     const std::string& topic_template);

// ReadTopicLog over each of topics (options.topic is ignored), merged into one log: records
// topic by topic in the order given (each topic's in partition then offset order; TopicRecord
// and PartitionExtent name their topic), partitions of every topic, topic_exists when any of
// them exists, topic the names joined with ','. Each topic's read gets options.timeout_ms.
// Throws as ReadTopicLog; std::invalid_argument for an empty list.
TopicLog ReadTopicLogs(const TopicReadOptions& options, const std::vector<std::string>& topics);

// A topic that does not exist is simply empty while nothing was published to
// it; once published_rows (outbox rows marked published, >= 0) is above 0, it
// means a mistyped --topic or another broker, and judging the log would call
// every published event lost. Throws KafkaError "topic 'T' does not exist on
// B; check --topic (N outbox rows are marked published)" then, and "topic 'T' on B has never
// held a record ..." when the topic exists but every partition ends at offset 0 (a broker that
// creates topics on first use made the mistyped name exist), and "none of the N records on
// topic 'T' ... is this run's" when the topic holds records but run_records (those carrying this
// run's run_id header) is 0 and the broker dropped none (a topic shared with other runs, or a
// real Kafka cluster, under a mistyped --topic); returns otherwise.
void RequireTopicIfPublished(const TopicLog& log, std::int64_t published_rows,
                             std::int64_t run_records);

}  // namespace outbox::lab
