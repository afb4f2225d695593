// The restart tail check (relay --tail-check): where it starts and ends reading, which ids it
// finds, and one read of the embedded broker's partitions from their low watermarks (the mock
// cluster cannot look offsets up by time: docs/exactly-once.md).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lab/broker/embedded_broker.h"
#include "outbox/kafka/kafka_publisher.h"
#include "outbox/kafka/tail_check.h"
#include "outbox/per_row_relay.h"
#include "test_support.h"

namespace {

using outbox::kafka::FindDeliveredIds;
using outbox::kafka::PartitionRange;
using outbox::kafka::TailCheckSince;
using outbox::kafka::TailRange;
using outbox::kafka::TailRecord;

std::vector<outbox::OutboundMessage> MakeMessages(int from, int to, const std::string& run_id) {
  std::vector<outbox::OutboundMessage> messages;
  for (int i = from; i <= to; ++i) {
    outbox::OutboxRow row;
    row.id = i;
    row.event = outbox::testing::MakeEvent(i);
    outbox::OutboundMessage m = outbox::MessageForRow(row);
    m.run_id = run_id;
    messages.push_back(m);
  }
  return messages;
}

}  // namespace

TEST_CASE("The tail check starts at the oldest unpublished created_at less the clock slack",
          "[kafka]") {
  CHECK(TailCheckSince({1'700'000'090'000, 1'700'000'030'000, 1'700'000'050'000}, 60'000) ==
        1'699'999'970'000);
  CHECK(TailCheckSince({1'700'000'000'000}) ==
        1'700'000'000'000 - outbox::kafka::kTailCheckClockSlackMs);
  CHECK(TailCheckSince({20'000}, 60'000) == 0);  // never before the epoch
  CHECK_FALSE(TailCheckSince({}, 60'000).has_value());  // nothing unpublished: nothing to check
}

TEST_CASE("A partition is read from the offset of the start time up to its high watermark",
          "[kafka]") {
  CHECK(TailRange(0, 10, 50, 42) == PartitionRange{0, 42, 50});
  // No record as recent as the start time: nothing to read.
  CHECK(TailRange(1, 10, 50, -1) == PartitionRange{1, 50, 50});
  // No answer by time (the embedded broker): every retained record.
  CHECK(TailRange(2, 10, 50, std::nullopt) == PartitionRange{2, 10, 50});
  // An answer below the retained records, or past the end seen, is clamped.
  CHECK(TailRange(3, 10, 50, 3) == PartitionRange{3, 10, 50});
  CHECK(TailRange(4, 10, 50, 70) == PartitionRange{4, 50, 50});
  CHECK(TailRange(5, 0, 0, 0) == PartitionRange{5, 0, 0});  // an empty partition
}

TEST_CASE("The tail check finds only this run's pending ids in the outbox_id headers", "[kafka]") {
  const std::vector<TailRecord> records = {
      {0, 0, "3", "run-a", ""},  {1, 0, "1", "run-a", ""},
      {1, 1, "2", "run-b", ""},                              // another run's 2
      {0, 1, "3", "run-a", ""},                              // 3 twice: once
      {2, 0, "", "run-a", ""},   {2, 1, "x7", "run-a", ""},
      {2, 2, "5 ", "run-a", ""}, {2, 3, "+6", "run-a", ""},  // not an outbox id
      {2, 4, "-4", "run-a", ""}, {3, 0, "0", "run-a", ""},   // a foreign writer's ids count
      {3, 1, "9", "run-a", ""}};
  CHECK(FindDeliveredIds(records, "run-a") == std::vector<std::int64_t>{-4, 0, 1, 3, 9});
  const auto among = [](std::vector<std::int64_t> ids) {
    return [ids](std::int64_t id, std::string_view) {
      return std::find(ids.begin(), ids.end(), id) != ids.end();
    };
  };
  CHECK(FindDeliveredIds(records, "run-a", among({-4, 1, 2, 9, 10})) ==
        std::vector<std::int64_t>{-4, 1, 9});
  CHECK(FindDeliveredIds(records, "") == std::vector<std::int64_t>{-4, 0, 1, 2, 3, 9});
  CHECK(FindDeliveredIds({}, "run-a").empty());
}

TEST_CASE("The tail check marks a row only when its record names the row's event id", "[kafka]") {
  // Outbox id 5 was published as "a", then deleted; a foreign writer inserted "b" under id 5.
  const std::vector<TailRecord> records = {{0, 0, "5", "run-a", "a"}, {0, 1, "6", "run-a", "c"}};
  const auto pending = [](std::int64_t id, std::string_view event_id) {
    return (id == 5 && event_id == "b") || (id == 6 && event_id == "c");
  };
  CHECK(FindDeliveredIds(records, "run-a", pending) == std::vector<std::int64_t>{6});
}

TEST_CASE("The tail check reads every partition of the embedded broker and finds the ids sent",
          "[kafka]") {
  outbox::lab::EmbeddedBroker broker;
  broker.CreateTopic("loan-events", 3);
  outbox::kafka::KafkaPublisherOptions publisher_options;
  publisher_options.brokers = broker.BootstrapServers();
  publisher_options.topic = "loan-events";
  publisher_options.delivery_timeout_ms = 5000;
  {
    outbox::kafka::KafkaPublisher publisher(publisher_options);
    for (const auto& r : publisher.Publish(MakeMessages(1, 5, "run-a"))) REQUIRE(r.ok);
    for (const auto& r : publisher.Publish(MakeMessages(6, 7, "run-b"))) REQUIRE(r.ok);
  }
  outbox::kafka::TailCheckOptions options;
  options.brokers = broker.BootstrapServers();
  options.topic = "loan-events";
  options.run_id = "run-a";
  options.is_pending = [](std::int64_t id, std::string_view event_id) {
    // Rows 2, 4, 5, 6 and 8 unpublished with the events MakeEvent gave them; row 5's replaced.
    for (const std::int64_t pending : {2, 4, 6, 8})
      if (id == pending)
        return event_id == outbox::testing::MakeEvent(static_cast<int>(id)).event_id;
    return id == 5 && event_id == "another event";
  };
  const outbox::kafka::TailCheckResult result = outbox::kafka::ReadTail(options);
  CHECK(result.found == std::vector<std::int64_t>{2, 4});
  CHECK(result.records_read == 7);
  REQUIRE(result.ranges.size() == 3);
  std::int64_t records_in_ranges = 0;
  for (std::size_t p = 0; p < result.ranges.size(); ++p) {
    CHECK(result.ranges[p].partition == static_cast<std::int32_t>(p));
    CHECK(result.ranges[p].begin == 0);
    records_in_ranges += result.ranges[p].end - result.ranges[p].begin;
  }
  CHECK(records_in_ranges == 7);

  options.topic = "no-such-topic";  // nothing delivered there yet
  const outbox::kafka::TailCheckResult none = outbox::kafka::ReadTail(options);
  CHECK(none.found.empty());
  CHECK(none.ranges.empty());
}
