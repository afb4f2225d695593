// ReadTopic against the embedded broker: every record of every partition,
// the event id's three sources, a missing topic, an unreachable broker.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "lab/broker/embedded_broker.h"
#include "lab/chapter/loans.h"
#include "lab/check/topic_reader.h"
#include "outbox/per_row_relay.h"
#include "outbox/error.h"
#include "outbox/kafka/handles.h"
#include "outbox/kafka/kafka_publisher.h"
#include "test_support.h"

namespace {

using outbox::lab::EmbeddedBroker;
using outbox::lab::ReadTopic;
using outbox::lab::TopicReadOptions;
using outbox::testing::CaptureThrow;

constexpr const char* kTopic = "loan-events";

TopicReadOptions ReadOptions(const EmbeddedBroker& broker, const std::string& topic = kTopic) {
  TopicReadOptions options;
  options.brokers = broker.BootstrapServers();
  options.topic = topic;
  return options;
}

// Produces one record with librdkafka directly (no outbox headers unless
// given), to the given partition, and waits for its ack.
void ProduceRaw(const EmbeddedBroker& broker, std::int32_t partition, const std::string& key,
                const std::string& value, const std::string& event_id_header = {}) {
  auto producer = outbox::kafka::MakeClient(
      RD_KAFKA_PRODUCER, outbox::kafka::MakeConf({{"bootstrap.servers", broker.BootstrapServers()}}));
  rd_kafka_headers_t* headers = rd_kafka_headers_new(1);
  if (!event_id_header.empty())
    rd_kafka_header_add(headers, "event_id", -1, event_id_header.data(),
                        static_cast<ssize_t>(event_id_header.size()));
  const rd_kafka_resp_err_t err = rd_kafka_producev(
      producer.get(), RD_KAFKA_V_TOPIC(kTopic), RD_KAFKA_V_PARTITION(partition),
      RD_KAFKA_V_KEY(key.data(), key.size()),
      RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(headers), RD_KAFKA_V_END);
  if (err) rd_kafka_headers_destroy(headers);  // owned by the message only on success
  REQUIRE(err == RD_KAFKA_RESP_ERR_NO_ERROR);
  REQUIRE(rd_kafka_flush(producer.get(), 10000) == RD_KAFKA_RESP_ERR_NO_ERROR);
  REQUIRE(rd_kafka_outq_len(producer.get()) == 0);
}

}  // namespace

TEST_CASE("ReadTopic returns every published record with key and value and offset and event id",
          "[kafka]") {
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);
  outbox::kafka::KafkaPublisherOptions publisher_options;
  publisher_options.brokers = broker.BootstrapServers();
  publisher_options.topic = kTopic;
  outbox::kafka::KafkaPublisher publisher(publisher_options);
  std::vector<outbox::OutboundMessage> messages;
  for (int i = 1; i <= 3; ++i) {
    outbox::OutboxRow row;
    row.id = i;
    row.event = outbox::lab::LoanCreatedEvent(outbox::lab::ChapterLoan(i, outbox::testing::MakeEvent(i).created_at_ms), i);
    messages.push_back(outbox::MessageForRow(row));
  }
  for (const auto& result : publisher.Publish(messages)) REQUIRE(result.ok);

  const auto records = ReadTopic(ReadOptions(broker));

  REQUIRE(records.size() == 3);
  for (std::size_t i = 0; i < records.size(); ++i) {
    INFO("record " << i);
    CHECK(records[i].partition == 0);
    CHECK(records[i].offset == static_cast<std::int64_t>(i));
    CHECK(records[i].key == messages[i].key);
    CHECK(records[i].value == messages[i].payload);
    CHECK(records[i].event_id == messages[i].event_id);
  }
  CHECK(records[0].event_id == "evt-1001");
  CHECK(records[0].value == R"({"eventId":"evt-1001","loanId":"L-1001","bookId":"B-101"})");

  // Reading does not consume: a second read sees the same records.
  REQUIRE(ReadTopic(ReadOptions(broker)).size() == 3);
}

TEST_CASE("ReadTopic takes the event id from the header or else the payload's eventId or else "
          "the key",
          "[kafka]") {
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);
  ProduceRaw(broker, 0, "key-a", R"({"eventId":"evt-payload"})", "evt-header");
  ProduceRaw(broker, 0, "key-b", R"({"eventId":"evt-payload"})");
  ProduceRaw(broker, 0, "key-c", "not json");
  ProduceRaw(broker, 0, "key-d", R"({"eventId":42})");

  const auto records = ReadTopic(ReadOptions(broker));

  REQUIRE(records.size() == 4);
  CHECK(records[0].event_id == "evt-header");
  CHECK(records[1].event_id == "evt-payload");
  CHECK(records[2].event_id == "key-c");
  CHECK(records[3].event_id == "key-d");
}

TEST_CASE("ReadTopic reads every partition ordered by partition then offset", "[kafka]") {
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 3);
  ProduceRaw(broker, 2, "k1", "v1");
  ProduceRaw(broker, 0, "k2", "v2");
  ProduceRaw(broker, 2, "k3", "v3");
  // partition 1 stays empty

  const auto records = ReadTopic(ReadOptions(broker));

  REQUIRE(records.size() == 3);
  CHECK(records[0].partition == 0);
  CHECK(records[0].offset == 0);
  CHECK(records[0].key == "k2");
  CHECK(records[1].partition == 2);
  CHECK(records[1].offset == 0);
  CHECK(records[1].key == "k1");
  CHECK(records[2].partition == 2);
  CHECK(records[2].offset == 1);
  CHECK(records[2].key == "k3");
}

TEST_CASE("ReadTopic of a topic that does not exist or is empty returns no records", "[kafka]") {
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);

  CHECK(ReadTopic(ReadOptions(broker, "no-such-topic")).empty());
  CHECK(ReadTopic(ReadOptions(broker)).empty());
}

TEST_CASE("ReadTopicLog tells a topic that does not exist from an empty one", "[kafka]") {
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);

  const outbox::lab::TopicLog absent = outbox::lab::ReadTopicLog(ReadOptions(broker, "no-such-topic"));
  CHECK_FALSE(absent.topic_exists);
  CHECK_NOTHROW(outbox::lab::RequireTopicIfPublished(absent, 0, 0));
  const auto error = CaptureThrow<outbox::KafkaError>(
      [&] { outbox::lab::RequireTopicIfPublished(absent, 3, 0); });
  REQUIRE(error);
  CHECK(std::string(error->what()) ==
        "topic 'no-such-topic' does not exist on " + broker.BootstrapServers() +
            "; check --topic (3 outbox rows are marked published)");

  // A topic that exists but never held a record (a broker that creates topics on first use
  // made a mistyped name exist): the same mistake, in other words.
  const outbox::lab::TopicLog empty = outbox::lab::ReadTopicLog(ReadOptions(broker));
  CHECK(empty.topic_exists);
  CHECK_NOTHROW(outbox::lab::RequireTopicIfPublished(empty, 0, 0));
  const auto never_written = CaptureThrow<outbox::KafkaError>(
      [&] { outbox::lab::RequireTopicIfPublished(empty, 3, 0); });
  REQUIRE(never_written);
  CHECK(std::string(never_written->what()) ==
        "topic '" + std::string(kTopic) + "' on " + broker.BootstrapServers() +
            " has never held a record (every partition ends at offset 0), yet 3 outbox rows are "
            "marked published; check --topic (if it is the right topic, all of them are lost)");
  // Once a record of this run went there, missing events are judged as lost, not as a wrong
  // topic.
  outbox::lab::TopicLog written = empty;
  written.partitions.front().end = 1;
  written.records.resize(1);
  CHECK_NOTHROW(outbox::lab::RequireTopicIfPublished(written, 3, 1));
  // Records of other runs only (a class's shared topic under a mistyped --topic): the mistake
  // again, unless retention dropped records, where the verdict is "cannot judge".
  const auto others_only = CaptureThrow<outbox::KafkaError>(
      [&] { outbox::lab::RequireTopicIfPublished(written, 3, 0); });
  REQUIRE(others_only);
  CHECK(std::string(others_only->what()) ==
        "none of the 1 records on topic '" + std::string(kTopic) + "' on " +
            broker.BootstrapServers() +
            " is this run's, yet 3 outbox rows are marked published; check --topic and --brokers "
            "(if both are right, all of them are lost)");
  written.partitions.front().log_start = 1;
  CHECK_NOTHROW(outbox::lab::RequireTopicIfPublished(written, 3, 0));
}

TEST_CASE("ReadTopic of an unreachable broker throws KafkaError", "[kafka]") {
  TopicReadOptions options;
  options.brokers = "127.0.0.1:1";
  options.topic = kTopic;
  options.timeout_ms = 2000;

  const auto error = CaptureThrow<outbox::KafkaError>([&] { ReadTopic(options); });

  REQUIRE(error.has_value());
  REQUIRE(error->code() != RD_KAFKA_RESP_ERR_NO_ERROR);
  REQUIRE_THAT(error->what(), Catch::Contains("127.0.0.1:1"));
}

TEST_CASE("ReadTopic rejects an unknown property with ConfigError", "[kafka]") {
  TopicReadOptions options;
  options.brokers = "127.0.0.1:1";
  options.topic = kTopic;
  options.properties = {{"no.such.property", "1"}};

  const auto error = CaptureThrow<outbox::ConfigError>([&] { ReadTopic(options); });

  REQUIRE(error.has_value());
  REQUIRE_THAT(error->what(), Catch::Contains("no.such.property"));
}

TEST_CASE("ReadTopicLog gives each record the run id its publisher sent as a header", "[kafka]") {
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);
  outbox::kafka::KafkaPublisherOptions publisher_options;
  publisher_options.brokers = broker.BootstrapServers();
  publisher_options.topic = kTopic;
  publisher_options.run_id = "1764545856000-3f9a0c1b";
  outbox::kafka::KafkaPublisher publisher(publisher_options);
  outbox::OutboxRow row;
  row.id = 1;
  row.event = outbox::testing::MakeEvent(1);
  for (const auto& result : publisher.Publish({outbox::MessageForRow(row)})) REQUIRE(result.ok);
  ProduceRaw(broker, 0, "evt-x", "{}", "evt-x");  // another client: no run id

  const outbox::lab::TopicLog log = outbox::lab::ReadTopicLog(ReadOptions(broker));

  REQUIRE(log.records.size() == 2);
  CHECK(log.records[0].run_id == "1764545856000-3f9a0c1b");
  CHECK(log.records[1].run_id.empty());
  REQUIRE(log.partitions.size() == 1);
  CHECK(log.partitions[0].log_start == 0);
  CHECK(log.partitions[0].end == 2);
  CHECK(log.Dropped() == 0);
}

TEST_CASE("ReadTopicLog reports the log start above 0 once the embedded broker dropped records",
          "[kafka]") {
  // librdkafka 2.0.2's mock keeps at most 5 MiB per partition (rdkafka_mock.c,
  // rd_kafka_mock_partition_init): 6 messages of 1 MiB leave a log that no
  // longer starts at offset 0.
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);
  auto producer = outbox::kafka::MakeClient(
      RD_KAFKA_PRODUCER, outbox::kafka::MakeConf({{"bootstrap.servers", broker.BootstrapServers()},
                                                  {"message.max.bytes", "2000000"}}));
  const std::string value(1 << 20, 'x');
  for (int i = 0; i < 6; ++i) {
    const std::string key = "evt-" + std::to_string(i);
    REQUIRE(rd_kafka_producev(producer.get(), RD_KAFKA_V_TOPIC(kTopic), RD_KAFKA_V_PARTITION(0),
                              RD_KAFKA_V_KEY(key.data(), key.size()),
                              RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR_NO_ERROR);
    REQUIRE(rd_kafka_flush(producer.get(), 10000) == RD_KAFKA_RESP_ERR_NO_ERROR);
  }

  TopicReadOptions options = ReadOptions(broker);
  options.properties = {{"fetch.max.bytes", "8000000"}, {"receive.message.max.bytes", "9000000"}};
  const outbox::lab::TopicLog log = outbox::lab::ReadTopicLog(options);

  REQUIRE(log.partitions.size() == 1);
  CHECK(log.partitions[0].end == 6);
  CHECK(log.partitions[0].log_start > 0);
  CHECK(log.Dropped() == log.partitions[0].log_start);
  CHECK(static_cast<std::int64_t>(log.records.size()) == 6 - log.partitions[0].log_start);
  REQUIRE_FALSE(log.records.empty());
  CHECK(log.records.front().offset == log.partitions[0].log_start);
}
