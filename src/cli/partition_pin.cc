#include "cli/partition_pin.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>

#include "cli/publishing.h"
#include "lab/check/partition_mapping.h"
#include "lab/check/topic_reader.h"

namespace outbox::cli {

bool PinPartitionMapping(const GlobalOptions& global, OutboxStore& store, bool allow_change,
                         const std::function<bool()>& stop_requested) {
  const std::vector<kafka::Property> properties = ProducerProperties(global);
  PartitionMapping current;
  current.topic = global.topic;
  current.partitioner = lab::PartitionerOf(properties);
  const auto read_count = [&](bool* answered) {
    return lab::ReadPartitionCount(global.RequireBrokers(), global.ParsedProperties(),
                                   global.topic, 2000, answered);
  };
  bool answered = false;
  current.partitions = read_count(&answered);
  if (!answered) {
    const std::optional<PartitionMapping> recorded = store.ReadPartitionMapping(global.topic);
    if (recorded && recorded->partitions > 0) {
      fmt::print("[relay] waiting for the broker to give the partition count of topic '{}' "
                 "({} recorded): it is compared before the first send\n",
                 global.topic, recorded->partitions);
      std::fflush(stdout);
      while (!answered) {
        if (stop_requested())
          throw CommandError(ExitCode::kBrokerUnavailable,
                             fmt::format("relay stopped while the broker at {} did not answer; "
                                         "nothing was sent",
                                         global.brokers));
        const auto started = std::chrono::steady_clock::now();
        current.partitions = read_count(&answered);
        // A refusal can come back at once: no faster than a try a second.
        if (!answered) std::this_thread::sleep_until(started + std::chrono::seconds(1));
      }
    }
  }
  const lab::PartitionMappingCheck check =
      lab::CheckPartitionMapping(store, current, allow_change);
  if (!check.note_error.empty())
    fmt::print("[relay] partition mapping of topic '{}' not recorded ({}); compared again at the "
               "next start\n",
               current.topic, check.note_error);
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
  fmt::print("[relay] partition mapping changed on topic '{}' ({}), allowed by "
             "--allow-partitioner-change: events of one aggregate from before and after may be "
             "read out of order; `check` counts them as order hazards\n",
             current.topic, check.change);
  return count_unknown;
}

bool NotePartitionCount(const GlobalOptions& global, OutboxStore& store, rd_kafka_t* producer) {
  PartitionMapping current;
  current.topic = global.topic;
  current.partitioner = lab::PartitionerOf(ProducerProperties(global));
  current.partitions = lab::ReadPartitionCount(producer, global.topic, 2000);
  if (current.partitions == 0) return false;
  // With no count recorded, CheckPartitionMapping records this one (learned_count).
  const lab::PartitionMappingCheck check = lab::CheckPartitionMapping(store, current, false);
  if (!check.note_error.empty()) return false;
  // The topic did not exist at the start and this relay's send created it with another count.
  if (!check.change.empty())
    fmt::print("[relay] warning: partition count changed on topic '{}' ({}) since it was "
               "recorded: the topic was created again after this relay started, and events of "
               "one aggregate from before and after may be read out of order; the next start "
               "stops with exit 21 unless --allow-partitioner-change\n",
               current.topic, check.change);
  return true;
}

}  // namespace outbox::cli
