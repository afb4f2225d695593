// Reads a whole topic, every partition from its low to its high watermark, as
// kafka-console-consumer --from-beginning does in the chapter's final check.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "outbox/event.h"
#include "outbox/kafka/handles.h"

namespace outbox::lab {

struct TopicRecord {
  std::int32_t partition = 0;
  std::int64_t offset = 0;
  std::string key;
  std::string value;
  // The record's event id: header "event_id", else the payload's "eventId",
  // else the key.
  std::string event_id;
  std::vector<RecordHeader> headers = {};  // every record header, in order
};

struct TopicReadOptions {
  std::string brokers;
  std::string topic;
  std::vector<kafka::Property> properties;  // -X, applied last
  // Bound on the whole read (metadata, watermarks, fetches), in ms.
  int timeout_ms = 10000;
};

// Returns every record, ordered by partition then offset. A topic that does
// not exist yields no records. Throws KafkaError when the broker cannot be
// reached or the read does not finish within timeout_ms; ConfigError for a
// bad -X property.
std::vector<TopicRecord> ReadTopic(const TopicReadOptions& options);

}  // namespace outbox::lab
