#include "lab/check/topic_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <stdexcept>
#include <memory>
#include <string_view>
#include <thread>
#include <nlohmann/json.hpp>

#include "lab/broker/embedded_broker.h"
#include "lab/chapter/partition_reader.h"
#include "outbox/error.h"

namespace outbox::lab {
namespace {

void FreeKafkaMemory(void* p) { rd_kafka_mem_free(nullptr, p); }

std::string HeaderOf(const rd_kafka_message_t* msg, const char* name) {
  rd_kafka_headers_t* headers = nullptr;
  const void* data = nullptr;
  size_t size = 0;
  if (rd_kafka_message_headers(msg, &headers) != RD_KAFKA_RESP_ERR_NO_ERROR ||
      rd_kafka_header_get_last(headers, name, &data, &size) != RD_KAFKA_RESP_ERR_NO_ERROR || !data)
    return {};
  return std::string(static_cast<const char*>(data), size);
}

std::string EventIdOf(const rd_kafka_message_t* msg, const std::string& key,
                      const std::string& value) {
  rd_kafka_headers_t* headers = nullptr;
  if (rd_kafka_message_headers(msg, &headers) == RD_KAFKA_RESP_ERR_NO_ERROR) {
    const void* data = nullptr;
    size_t size = 0;
    if (rd_kafka_header_get_last(headers, "event_id", &data, &size) == RD_KAFKA_RESP_ERR_NO_ERROR &&
        data)
      return std::string(static_cast<const char*>(data), size);
  }
  const auto payload = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (payload.is_object() && payload.contains("eventId") && payload["eventId"].is_string())
    return payload["eventId"].get<std::string>();
  return key;
}

std::vector<RecordHeader> HeadersOf(const rd_kafka_message_t* msg) {
  std::vector<RecordHeader> out;
  rd_kafka_headers_t* headers = nullptr;
  if (rd_kafka_message_headers(msg, &headers) != RD_KAFKA_RESP_ERR_NO_ERROR) return out;
  const char* name = nullptr;
  const void* data = nullptr;
  size_t size = 0;
  for (size_t i = 0; rd_kafka_header_get_all(headers, i, &name, &data, &size) ==
                     RD_KAFKA_RESP_ERR_NO_ERROR;
       ++i)
    out.push_back({name, data ? std::string(static_cast<const char*>(data), size) : std::string()});
  return out;
}

}  // namespace

std::int64_t TopicLog::Dropped() const {
  std::int64_t dropped = 0;
  for (const PartitionExtent& p : partitions) dropped += p.log_start + p.compacted;
  return dropped;
}

std::string BrokerIncarnationOf(rd_kafka_t* client, const rd_kafka_metadata_t& metadata,
                                int timeout_ms) {
  const std::string_view prefix = kIncarnationTopicPrefix;
  for (int t = 0; t < metadata.topic_cnt; ++t) {
    const std::string_view name = metadata.topics[t].topic ? metadata.topics[t].topic : "";
    if (name.substr(0, prefix.size()) == prefix)
      return "embedded:" + std::string(name.substr(prefix.size()));
  }
  std::unique_ptr<char, void (*)(void*)> cluster_id(rd_kafka_clusterid(client, timeout_ms),
                                                    FreeKafkaMemory);
  return cluster_id ? "cluster:" + std::string(cluster_id.get()) : std::string();
}

std::string ReadBrokerIncarnation(const std::string& brokers,
                                  const std::vector<kafka::Property>& properties, int timeout_ms) {
  std::vector<kafka::Property> all = {{"bootstrap.servers", brokers}, {"log_level", "2"}};
  all.insert(all.end(), properties.begin(), properties.end());
  kafka::KafkaHandle client = kafka::MakeClient(RD_KAFKA_PRODUCER, kafka::MakeConf(all));
  return ReadBrokerIncarnation(client.get(), timeout_ms);
}

std::string ReadBrokerIncarnation(rd_kafka_t* client, int timeout_ms) {
  const rd_kafka_metadata_t* raw_metadata = nullptr;
  const rd_kafka_resp_err_t err = rd_kafka_metadata(client, 1, nullptr, &raw_metadata, timeout_ms);
  kafka::MetadataHandle metadata(raw_metadata);
  if (err || !metadata) return {};
  return BrokerIncarnationOf(client, *metadata, std::min(timeout_ms, 1000));
}

std::int32_t ReadPartitionCount(const std::string& brokers,
                                const std::vector<kafka::Property>& properties,
                                const std::string& topic, int timeout_ms, bool* answered) {
  std::vector<kafka::Property> all = {{"bootstrap.servers", brokers}, {"log_level", "2"}};
  all.insert(all.end(), properties.begin(), properties.end());
  kafka::KafkaHandle client = kafka::MakeClient(RD_KAFKA_PRODUCER, kafka::MakeConf(all));
  return ReadPartitionCount(client.get(), topic, timeout_ms, answered);
}

std::int32_t ReadPartitionCount(rd_kafka_t* client, const std::string& topic, int timeout_ms,
                                bool* answered) {
  const rd_kafka_metadata_t* raw_metadata = nullptr;
  // All topics: asking for one topic by name would let the broker auto-create it.
  const rd_kafka_resp_err_t err =
      rd_kafka_metadata(client, 1, nullptr, &raw_metadata, timeout_ms);
  kafka::MetadataHandle metadata(raw_metadata);
  if (answered) *answered = !err && metadata;
  if (err || !metadata) return 0;
  for (int t = 0; t < metadata->topic_cnt; ++t)
    if (metadata->topics[t].topic == topic && metadata->topics[t].err == RD_KAFKA_RESP_ERR_NO_ERROR)
      return metadata->topics[t].partition_cnt;
  return 0;
}

std::vector<TopicRecord> ReadTopic(const TopicReadOptions& options) {
  return ReadTopicLog(options).records;
}

namespace {

// True when properties leave the reader at read_committed (librdkafka's default isolation.level):
// it then stops at each partition's last stable offset.
bool ReadsCommitted(const std::vector<kafka::Property>& properties) {
  bool committed = true;
  for (const auto& [name, value] : properties)
    if (name == "isolation.level") committed = value != "read_uncommitted";
  return committed;
}

// True when topic's cleanup.policy includes compact (DescribeConfigs, at most timeout_ms); false
// when it does not, or when the broker does not say in time (the mock cluster has no
// DescribeConfigs handler: the caller does not ask it).
bool CompactedTopic(rd_kafka_t* client, const std::string& topic, int timeout_ms) {
  using ConfigResourceHandle =
      std::unique_ptr<rd_kafka_ConfigResource_t, decltype(&rd_kafka_ConfigResource_destroy)>;
  ConfigResourceHandle resource(rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic.c_str()),
                                &rd_kafka_ConfigResource_destroy);
  char errstr[256] = {};
  kafka::AdminOptionsHandle admin(
      rd_kafka_AdminOptions_new(client, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS));
  rd_kafka_AdminOptions_set_request_timeout(admin.get(), timeout_ms, errstr, sizeof errstr);
  kafka::QueueHandle queue(rd_kafka_queue_new(client));
  rd_kafka_ConfigResource_t* resources[] = {resource.get()};
  rd_kafka_DescribeConfigs(client, resources, 1, admin.get(), queue.get());
  kafka::EventHandle event(rd_kafka_queue_poll(queue.get(), timeout_ms + 500));
  if (!event || rd_kafka_event_error(event.get())) return false;
  const rd_kafka_DescribeConfigs_result_t* result = rd_kafka_event_DescribeConfigs_result(event.get());
  if (!result) return false;
  std::size_t count = 0;
  const rd_kafka_ConfigResource_t** described =
      rd_kafka_DescribeConfigs_result_resources(result, &count);
  for (std::size_t i = 0; i < count; ++i) {
    if (rd_kafka_ConfigResource_error(described[i])) continue;
    std::size_t entries = 0;
    const rd_kafka_ConfigEntry_t** configs = rd_kafka_ConfigResource_configs(described[i], &entries);
    for (std::size_t e = 0; e < entries; ++e) {
      const char* name = rd_kafka_ConfigEntry_name(configs[e]);
      const char* value = rd_kafka_ConfigEntry_value(configs[e]);
      if (name && value && std::string_view(name) == "cleanup.policy" &&
          std::string_view(value).find("compact") != std::string_view::npos)
        return true;
    }
  }
  return false;
}

// Each partition's high watermark for a read_uncommitted reader, which a read_committed one
// sees only up to the last stable offset: an open transaction holds back every record after its
// first one (a producer killed mid-transaction, until transaction.timeout.ms aborts it).
std::map<std::int32_t, std::int64_t> UncommittedEnds(const TopicReadOptions& options,
                                                     const std::vector<std::int32_t>& partitions,
                                                     Deadline deadline, const std::string& what) {
  std::vector<kafka::Property> properties = {{"bootstrap.servers", options.brokers},
                                             {"group.id", "outbox-lab-reader"},
                                             {"log_level", "2"}};
  properties.insert(properties.end(), options.properties.begin(), options.properties.end());
  properties.push_back({"isolation.level", "read_uncommitted"});
  kafka::KafkaHandle consumer = kafka::MakeClient(RD_KAFKA_CONSUMER, kafka::MakeConf(properties));
  std::map<std::int32_t, std::int64_t> ends;
  for (std::int32_t p : partitions) {
    int64_t low = 0, high = 0;
    const rd_kafka_resp_err_t err = rd_kafka_query_watermark_offsets(
        consumer.get(), options.topic.c_str(), p, &low, &high, RemainingMs(deadline));
    if (err) kafka::ThrowKafkaError(fmt::format("{}: high watermark of partition {}", what, p), err);
    ends[p] = high;
  }
  return ends;
}

}  // namespace

TopicLog ReadTopicLog(const TopicReadOptions& options) {
  const Deadline deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options.timeout_ms);
  const std::string what = fmt::format("read topic '{}' from '{}'", options.topic, options.brokers);
  std::vector<kafka::Property> properties = {
      {"bootstrap.servers", options.brokers},
      {"group.id", "outbox-lab-reader"},  // assign() needs one; nothing is committed
      {"enable.auto.commit", "false"},
      // The end of a transactional topic: its last offset may be a commit marker (see
      // ReadPartitionsToEnd).
      {"enable.partition.eof", "true"},
      // Retention may drop records between the watermark query and the first fetch: the read
      // goes on from the new log start (librdkafka's default, latest, would jump to the end and
      // read nothing), and the log start is read again afterwards (below).
      {"auto.offset.reset", "earliest"},
      {"log_level", "2"},  // failures reach the user as KafkaError; -X log_level=7 for more
  };
  properties.insert(properties.end(), options.properties.begin(), options.properties.end());
  kafka::KafkaHandle consumer = kafka::MakeClient(RD_KAFKA_CONSUMER, kafka::MakeConf(properties));

  const rd_kafka_metadata_t* raw_metadata = nullptr;
  rd_kafka_resp_err_t err =
      rd_kafka_metadata(consumer.get(), 1, nullptr, &raw_metadata, RemainingMs(deadline));
  kafka::MetadataHandle metadata(raw_metadata);
  if (err) kafka::ThrowKafkaError(what + ": broker unreachable", err);

  TopicLog log;
  log.broker_incarnation = BrokerIncarnationOf(consumer.get(), *metadata, 1000);
  log.topic = options.topic;
  log.brokers = options.brokers;
  std::vector<std::int32_t> partitions;
  for (int t = 0; t < metadata->topic_cnt; ++t) {
    const auto& topic = metadata->topics[t];
    if (options.topic != topic.topic) continue;
    if (topic.err != RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) log.topic_exists = true;
    if (topic.err) continue;
    for (int p = 0; p < topic.partition_cnt; ++p) partitions.push_back(topic.partitions[p].id);
  }
  std::sort(partitions.begin(), partitions.end());

  // Read up to the high watermark as it is now; records produced later are not waited for. At
  // read_committed, up to the end a read_uncommitted reader sees now: while an open transaction
  // holds the last stable offset below it, the records past it (this run's among them) cannot be
  // read, and a read that stopped there would call them lost. So the read waits, within the
  // deadline, for that end to become stable, and fails (KafkaError) when it does not.
  std::map<std::int32_t, std::int64_t> uncommitted_end;
  if (options.wait_for_open_transactions && ReadsCommitted(options.properties) &&
      !partitions.empty())
    uncommitted_end = UncommittedEnds(options, partitions, deadline, what);
  std::map<std::int32_t, std::int64_t> next_offset, end_offset;
  kafka::TopicPartitionListHandle assignment(
      rd_kafka_topic_partition_list_new(static_cast<int>(partitions.size())));
  for (std::int32_t p : partitions) {
    int64_t low = 0, high = 0;
    for (;;) {
      err = rd_kafka_query_watermark_offsets(consumer.get(), options.topic.c_str(), p, &low,
                                             &high, RemainingMs(deadline));
      if (err) kafka::ThrowKafkaError(fmt::format("{}: watermarks of partition {}", what, p), err);
      const auto uncommitted = uncommitted_end.find(p);
      if (uncommitted == uncommitted_end.end() || high >= uncommitted->second) break;
      if (RemainingMs(deadline) <= 0)
        throw KafkaError(
            fmt::format("{}: partition {}: an open transaction holds offsets {}..{} back from "
                        "read_committed readers (last stable offset {}), and it did not end "
                        "within {} ms; check again once it ends (transaction.timeout.ms aborts "
                        "a dead producer's), or pass --isolation read_uncommitted",
                        what, p, high, uncommitted->second - 1, high, options.timeout_ms),
            RD_KAFKA_RESP_ERR__TIMED_OUT);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the broker's own clock
    }
    log.partitions.push_back({p, low, high, options.topic});
    if (high <= low) continue;
    next_offset[p] = low;
    end_offset[p] = high;
    rd_kafka_topic_partition_list_add(assignment.get(), options.topic.c_str(), p)->offset = low;
  }

  std::vector<TopicRecord>& records = log.records;
  if (next_offset.empty()) return log;
  err = rd_kafka_assign(consumer.get(), assignment.get());
  if (err) kafka::ThrowKafkaError(what + ": assign partitions", err);

  ReadPartitionsToEnd(
      consumer.get(), next_offset, end_offset, deadline, options.timeout_ms, what,
      [&](const rd_kafka_message_t& msg) {
        if (msg.offset >= end_offset[msg.partition]) return;  // produced after the start
        TopicRecord record;
        record.topic = options.topic;
        record.partition = msg.partition;
        record.offset = msg.offset;
        if (msg.key) record.key.assign(static_cast<const char*>(msg.key), msg.key_len);
        if (msg.payload) record.value.assign(static_cast<const char*>(msg.payload), msg.len);
        record.event_id = EventIdOf(&msg, record.key, record.value);
        record.run_id = HeaderOf(&msg, "run_id");
        record.headers = HeadersOf(&msg);
        records.push_back(std::move(record));
      });
  std::stable_sort(records.begin(), records.end(), [](const TopicRecord& a, const TopicRecord& b) {
    return a.partition != b.partition ? a.partition < b.partition : a.offset < b.offset;
  });
  // The log start as it is after the read: records retention dropped while it ran were not read
  // either, and count as dropped (a log start from before the read would call them lost).
  for (PartitionExtent& p : log.partitions) {
    int64_t low = 0, high = 0;
    if (rd_kafka_query_watermark_offsets(consumer.get(), options.topic.c_str(), p.partition, &low,
                                         &high, std::max(1, RemainingMs(deadline))) ==
            RD_KAFKA_RESP_ERR_NO_ERROR &&
        low > p.log_start)
      p.log_start = std::min<std::int64_t>(low, p.end);
  }
  // A compacted topic's holes are records the broker dropped too (PartitionExtent::compacted).
  // The embedded broker never compacts, and never answers DescribeConfigs: not asked.
  if (log.broker_incarnation.rfind("embedded:", 0) != 0 &&
      CompactedTopic(consumer.get(), options.topic,
                     std::max(1, std::min(2000, RemainingMs(deadline))))) {
    std::map<std::int32_t, std::int64_t> read;
    for (const TopicRecord& record : records) ++read[record.partition];
    for (PartitionExtent& p : log.partitions)
      p.compacted = std::max<std::int64_t>(0, p.end - p.log_start - read[p.partition]);
  }
  return log;
}

std::vector<std::string> TopicsOfRun(OutboxStore& store, const std::string& topic,
                                     const std::string& topic_template) {
  if (topic_template.empty()) return {topic};
  const TopicTemplate parsed = TopicTemplate::Parse(topic_template);
  std::set<std::string> topics;
  for (const std::string& event_type : store.EventTypes()) {
    OutboxEvent event;
    event.event_type = event_type;
    RoutedTopic routed = parsed.Render(event);
    if (routed.ok()) topics.insert(std::move(routed.topic));
  }
  if (topics.empty()) return {topic};
  return {topics.begin(), topics.end()};
}

TopicLog ReadTopicLogs(const TopicReadOptions& options, const std::vector<std::string>& topics) {
  if (topics.empty()) throw std::invalid_argument("ReadTopicLogs: no topic to read");
  TopicLog merged;
  for (const std::string& topic : topics) {
    TopicReadOptions one = options;
    one.topic = topic;
    TopicLog log = ReadTopicLog(one);
    if (merged.topic.empty()) {
      merged.broker_incarnation = log.broker_incarnation;
      merged.brokers = log.brokers;
    } else {
      merged.topic += ',';
    }
    merged.topic += topic;
    merged.topic_exists = merged.topic_exists || log.topic_exists;
    for (TopicRecord& record : log.records) merged.records.push_back(std::move(record));
    for (PartitionExtent& p : log.partitions) merged.partitions.push_back(std::move(p));
  }
  return merged;
}

void RequireTopicIfPublished(const TopicLog& log, std::int64_t published_rows,
                             std::int64_t run_records) {
  if (published_rows <= 0) return;
  if (!log.topic_exists)
    throw KafkaError(fmt::format(
        "topic '{}' does not exist on {}; check --topic ({} outbox rows are marked published)",
        log.topic, log.brokers, published_rows),
        RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART);
  // A broker that creates topics on first use (the embedded one, real Kafka by default) makes a
  // mistyped --topic exist the moment any client asks for it: empty, every end at 0.
  const bool never_written = std::all_of(log.partitions.begin(), log.partitions.end(),
                                         [](const PartitionExtent& p) { return p.end == 0; });
  if (never_written)
    throw KafkaError(fmt::format(
        "topic '{}' on {} has never held a record (every partition ends at offset 0), yet {} "
        "outbox rows are marked published; check --topic (if it is the right topic, all of them "
        "are lost)",
        log.topic, log.brokers, published_rows),
        RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART);
  // Records there, none of them this run's: the same mistake on a topic other runs use (a
  // class's shared topic, a real cluster's). Records dropped by retention are judged apart (16).
  if (run_records == 0 && !log.records.empty() && log.Dropped() == 0)
    throw KafkaError(fmt::format(
        "none of the {} records on topic '{}' on {} is this run's, yet {} outbox rows are "
        "marked published; check --topic and --brokers (if both are right, all of them are lost)",
        log.records.size(), log.topic, log.brokers, published_rows),
        RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART);
}

}  // namespace outbox::lab
