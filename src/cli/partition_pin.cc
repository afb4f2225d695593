#include "cli/partition_pin.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "cli/publishing.h"
#include "lab/broker/json_bytes.h"
#include "lab/check/partition_mapping.h"
#include "lab/check/topic_reader.h"

namespace outbox::cli {
namespace {

// Each try of the start's count read: 2 s, doubled after each try the broker did not answer, up
// to 30 s: a slow broker (or a slow TLS or SASL handshake) gets a try long enough for it.
constexpr int kFirstTryMs = 2000;
constexpr int kLongestTryMs = 30000;

// One relay line: text, or with json one JSON object {"report": "partition_mapping", ...}.
void Say(bool json, const nlohmann::ordered_json& fields, const std::string& text) {
  if (json) {
    nlohmann::ordered_json line = {{"report", "partition_mapping"}};
    line.update(fields);
    fmt::print("{}\n", lab::DumpJson(line));
  } else {
    fmt::print("[relay] {}\n", text);
  }
  std::fflush(stdout);
}

}  // namespace

bool PinPartitionMapping(const GlobalOptions& global, OutboxStore& store, bool allow_change,
                         const std::function<bool()>& stop_requested, bool json) {
  const std::vector<kafka::Property> properties = ProducerProperties(global);
  PartitionMapping current;
  current.topic = global.topic;
  current.partitioner = lab::PartitionerOf(properties);
  const auto read_count = [&](int timeout_ms, bool* answered) {
    return lab::ReadPartitionCount(global.RequireBrokers(), global.ParsedProperties(),
                                   global.topic, timeout_ms, answered);
  };
  bool answered = false;
  current.partitions = read_count(kFirstTryMs, &answered);
  if (!answered) {
    const std::optional<PartitionMapping> recorded = store.ReadPartitionMapping(global.topic);
    if (recorded && recorded->partitions > 0) {
      Say(json,
          {{"event", "waiting"},
           {"topic", global.topic},
           {"recorded_partitions", recorded->partitions}},
          fmt::format("waiting for the broker to give the partition count of topic '{}' ({} "
                      "recorded): it is compared before the first send",
                      global.topic, recorded->partitions));
      int try_ms = kFirstTryMs;
      while (!answered) {
        if (stop_requested())
          throw CommandError(ExitCode::kBrokerUnavailable,
                             fmt::format("relay stopped while the broker at {} did not give the "
                                         "partition count of topic '{}' (tries of up to {} s); "
                                         "nothing was sent",
                                         global.brokers, global.topic, try_ms / 1000));
        try_ms = std::min(try_ms * 2, kLongestTryMs);
        const auto started = std::chrono::steady_clock::now();
        current.partitions = read_count(try_ms, &answered);
        // A refusal can come back at once: no faster than a try a second.
        if (!answered) std::this_thread::sleep_until(started + std::chrono::seconds(1));
      }
    }
  }
  const lab::PartitionMappingCheck check =
      lab::CheckPartitionMapping(store, current, allow_change);
  if (!check.note_error.empty())
    Say(json, {{"event", "not_recorded"}, {"topic", current.topic}, {"error", check.note_error}},
        fmt::format("partition mapping of topic '{}' not recorded ({}); compared again at the "
                    "next start",
                    current.topic, check.note_error));
  const bool count_unknown = current.partitions == 0;
  if (check.change.empty()) return count_unknown;
  if (!allow_change)
    throw CommandError(
        ExitCode::kPartitionMappingChanged,
        fmt::format("topic '{}' was published with partitioner={} partitions={} and this relay "
                    "would use partitioner={} partitions={} ({}): an aggregate's later events "
                    "would land on another partition and lose their order; keep -X "
                    "partitioner={}, or pass --allow-partitioner-change to record the new mapping",
                    current.topic, check.recorded.partitioner, check.recorded.partitions,
                    current.partitioner, current.partitions, check.change,
                    check.recorded.partitioner));
  Say(json, {{"event", "changed_allowed"}, {"topic", current.topic}, {"change", check.change}},
      fmt::format("partition mapping changed on topic '{}' ({}), allowed by "
                  "--allow-partitioner-change: events of one aggregate from before and after may "
                  "be read out of order; `check` counts them as order hazards",
                  current.topic, check.change));
  return count_unknown;
}

bool NotePartitionCount(const GlobalOptions& global, OutboxStore& store, rd_kafka_t* producer,
                        bool json) {
  PartitionMapping current;
  current.topic = global.topic;
  current.partitioner = lab::PartitionerOf(ProducerProperties(global));
  current.partitions = lab::ReadPartitionCount(producer, global.topic, kFirstTryMs);
  if (current.partitions == 0) return false;
  // With no count recorded, CheckPartitionMapping records this one (learned_count).
  const lab::PartitionMappingCheck check = lab::CheckPartitionMapping(store, current, false);
  if (!check.note_error.empty()) return false;
  // The topic did not exist at the start and this relay's send created it with another count.
  if (!check.change.empty())
    Say(json,
        {{"event", "changed_after_start"}, {"topic", current.topic}, {"change", check.change}},
        fmt::format("warning: partition count changed on topic '{}' ({}) since it was "
                    "recorded: the topic was created again after this relay started, and events "
                    "of one aggregate from before and after may be read out of order; the next "
                    "start stops with exit 21 unless --allow-partitioner-change",
                    current.topic, check.change));
  return true;
}

}  // namespace outbox::cli
