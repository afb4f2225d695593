#include "lab/chapter/partition_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "outbox/error.h"
#include "outbox/kafka/handles.h"

namespace outbox::lab {
namespace {

constexpr int kPollMs = 100;

}  // namespace

int RemainingMs(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::max<std::int64_t>(left.count(), 0));
}

void ReadPartitionsToEnd(rd_kafka_t* consumer, std::map<std::int32_t, std::int64_t>& next_offset,
                         const std::map<std::int32_t, std::int64_t>& end_offset, Deadline deadline,
                         int timeout_ms, const std::string& what,
                         const std::function<void(const rd_kafka_message_t&)>& on_message) {
  // Partitions whose end the consumer reported (_PARTITION_EOF, with enable.partition.eof): a
  // transactional topic's commit and abort markers take offsets no message is delivered at, and a
  // read_committed consumer stops at the last stable offset, so counting offsets alone would wait
  // out the deadline there.
  std::set<std::int32_t> at_eof;
  const auto unfinished = [&] {
    return std::any_of(next_offset.begin(), next_offset.end(), [&](const auto& entry) {
      const auto end = end_offset.find(entry.first);
      return end != end_offset.end() && entry.second < end->second && at_eof.count(entry.first) == 0;
    });
  };
  std::int64_t read = 0;
  while (unfinished()) {
    if (RemainingMs(deadline) == 0)
      throw KafkaError(fmt::format("{}: timed out after {} ms with {} records read", what,
                                   timeout_ms, read),
                       RD_KAFKA_RESP_ERR__TIMED_OUT);
    kafka::MessageHandle msg(rd_kafka_consumer_poll(consumer, std::min(kPollMs, RemainingMs(deadline))));
    if (!msg) continue;
    if (msg->err) {
      if (msg->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        auto next = next_offset.find(msg->partition);
        if (next != next_offset.end()) {
          next->second = std::max(next->second, static_cast<std::int64_t>(msg->offset));
          at_eof.insert(msg->partition);
        }
        continue;
      }
      kafka::ThrowKafkaError(what, msg->err);
    }
    at_eof.erase(msg->partition);
    on_message(*msg);
    ++read;
    next_offset[msg->partition] = msg->offset + 1;
  }
}

}  // namespace outbox::lab
