#include "outbox/kafka/tail_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <map>
#include <set>

#include "outbox/error.h"

namespace outbox::kafka {
namespace {

constexpr int kPollMs = 100;

// Milliseconds left until deadline, >= 0.
int LeftMs(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::max<std::int64_t>(0, left.count()));
}

// The last value of header name, or empty.
std::string Header(const rd_kafka_message_t* msg, const char* name) {
  rd_kafka_headers_t* headers = nullptr;  // owned by msg
  if (rd_kafka_message_headers(msg, &headers) != RD_KAFKA_RESP_ERR_NO_ERROR) return {};
  const void* value = nullptr;
  std::size_t size = 0;
  if (rd_kafka_header_get_last(headers, name, &value, &size) != RD_KAFKA_RESP_ERR_NO_ERROR ||
      !value)
    return {};
  return std::string(static_cast<const char*>(value), size);
}

}  // namespace

std::optional<std::int64_t> TailCheckSince(const std::vector<std::int64_t>& created_at_ms,
                                           std::int64_t slack_ms) {
  if (created_at_ms.empty()) return std::nullopt;
  const std::int64_t oldest = *std::min_element(created_at_ms.begin(), created_at_ms.end());
  return std::max<std::int64_t>(0, oldest - slack_ms);
}

PartitionRange TailRange(std::int32_t partition, std::int64_t low, std::int64_t high,
                         std::optional<std::int64_t> by_time) {
  PartitionRange range;
  range.partition = partition;
  range.end = high;
  if (!by_time)
    range.begin = low;
  else if (*by_time < 0)
    range.begin = high;  // no record is as recent as the start time
  else
    range.begin = std::clamp(*by_time, low, high);
  range.begin = std::min(range.begin, range.end);
  return range;
}

std::vector<std::int64_t> FindDeliveredIds(const std::vector<TailRecord>& records,
                                           const std::string& run_id,
                                           const PendingTest& is_pending) {
  std::set<std::int64_t> found;
  for (const TailRecord& record : records) {
    if (!run_id.empty() && record.run_id != run_id) continue;
    std::int64_t id = 0;
    const char* first = record.outbox_id.data();
    const char* last = first + record.outbox_id.size();
    const auto [end, ec] = std::from_chars(first, last, id);
    // Any 64-bit id: a foreign writer's row may have id 0 or below, and the relay sent it too.
    if (ec != std::errc() || end != last || record.outbox_id.empty()) continue;
    if (is_pending && !is_pending(id, record.event_id)) continue;
    found.insert(id);
  }
  return {found.begin(), found.end()};
}

TailCheckResult ReadTail(const TailCheckOptions& options) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options.timeout_ms);
  const std::string what = fmt::format("tail check of topic '{}'", options.topic);
  std::vector<Property> properties = {
      {"bootstrap.servers", options.brokers},
      {"group.id", "outbox-relay-tail-check"},  // assign() needs one; nothing is committed
      {"enable.auto.commit", "false"},
      {"enable.partition.eof", "true"},
      {"log_level", "2"},
  };
  for (const Property& p : options.properties)
    if (p.first.rfind("security.", 0) == 0 || p.first.rfind("sasl.", 0) == 0 ||
        p.first.rfind("ssl.", 0) == 0)
      properties.push_back(p);
  properties.push_back({"isolation.level", "read_uncommitted"});
  KafkaHandle consumer = MakeClient(RD_KAFKA_CONSUMER, MakeConf(properties));

  // The topic's partitions; all topics, as asking for this one by name could auto-create it.
  const rd_kafka_metadata_t* raw = nullptr;
  rd_kafka_resp_err_t err =
      rd_kafka_metadata(consumer.get(), 1, nullptr, &raw, std::max(1, LeftMs(deadline)));
  if (err) ThrowKafkaError(what + ": metadata", err);
  MetadataHandle metadata(raw);
  std::vector<std::int32_t> partitions;
  for (int t = 0; t < metadata->topic_cnt; ++t) {
    const rd_kafka_metadata_topic_t& topic = metadata->topics[t];
    if (topic.topic != options.topic || topic.err != RD_KAFKA_RESP_ERR_NO_ERROR) continue;
    for (int p = 0; p < topic.partition_cnt; ++p) partitions.push_back(topic.partitions[p].id);
  }
  TailCheckResult result;
  if (partitions.empty()) return result;  // no topic yet: nothing was delivered
  std::sort(partitions.begin(), partitions.end());

  std::map<std::int32_t, std::int64_t> by_time;
  if (options.since_ms) {
    TopicPartitionListHandle query(
        rd_kafka_topic_partition_list_new(static_cast<int>(partitions.size())));
    for (std::int32_t p : partitions)
      rd_kafka_topic_partition_list_add(query.get(), options.topic.c_str(), p)->offset =
          *options.since_ms;
    err = rd_kafka_offsets_for_times(consumer.get(), query.get(), std::max(1, LeftMs(deadline)));
    if (err) ThrowKafkaError(what + ": offsets for times", err);
    for (int i = 0; i < query->cnt; ++i) {
      const rd_kafka_topic_partition_t& tp = query->elems[i];
      if (tp.err) ThrowKafkaError(fmt::format("{}: offset for time of partition {}", what,
                                              tp.partition),
                                  tp.err);
      by_time[tp.partition] = tp.offset;
    }
  }
  TopicPartitionListHandle assignment(
      rd_kafka_topic_partition_list_new(static_cast<int>(partitions.size())));
  std::map<std::int32_t, std::int64_t> ends;  // partitions still to read, by their end
  for (std::int32_t p : partitions) {
    std::int64_t low = 0, high = 0;
    err = rd_kafka_query_watermark_offsets(consumer.get(), options.topic.c_str(), p, &low, &high,
                                           std::max(1, LeftMs(deadline)));
    if (err) ThrowKafkaError(fmt::format("{}: watermarks of partition {}", what, p), err);
    const auto answer = by_time.find(p);
    const PartitionRange range =
        TailRange(p, low, high,
                  options.since_ms && answer != by_time.end()
                      ? std::optional<std::int64_t>(answer->second)
                      : std::nullopt);
    result.ranges.push_back(range);
    if (range.begin >= range.end) continue;
    rd_kafka_topic_partition_list_add(assignment.get(), options.topic.c_str(), p)->offset =
        range.begin;
    ends[p] = range.end;
  }
  std::vector<TailRecord> records;
  if (!ends.empty()) {
    err = rd_kafka_assign(consumer.get(), assignment.get());
    if (err) ThrowKafkaError(what + ": assign", err);
  }
  while (!ends.empty()) {
    if (LeftMs(deadline) == 0)
      throw KafkaError(fmt::format("{}: timed out after {} ms with {} partitions still to read",
                                   what, options.timeout_ms, ends.size()),
                       RD_KAFKA_RESP_ERR__TIMED_OUT);
    MessageHandle msg(rd_kafka_consumer_poll(consumer.get(), std::min(kPollMs, LeftMs(deadline))));
    if (!msg) continue;
    const std::int32_t p = msg->partition;
    if (msg->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      ends.erase(p);
      continue;
    }
    if (msg->err) ThrowKafkaError(what, msg->err);
    const auto end = ends.find(p);
    if (end == ends.end() || msg->offset >= end->second) continue;  // past the check's end
    ++result.records_read;
    records.push_back({p, msg->offset, Header(msg.get(), "outbox_id"), Header(msg.get(), "run_id"),
                       Header(msg.get(), "event_id")});
    if (msg->offset + 1 >= end->second) ends.erase(end);
  }
  rd_kafka_consumer_close(consumer.get());
  result.found = FindDeliveredIds(records, options.run_id, options.is_pending);
  return result;
}

}  // namespace outbox::kafka
