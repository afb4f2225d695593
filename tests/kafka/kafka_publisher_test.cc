// KafkaPublisher against librdkafka's in-process mock cluster: acks, injected
// produce errors, a broker that is down, bad configuration.
#include <catch2/catch.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "lab/broker/embedded_broker.h"  // rdkafka.h, then rdkafka_mock.h
#include "lab/check/topic_reader.h"
#include "outbox/per_row_relay.h"
#include "outbox/error.h"
#include "outbox/kafka/handles.h"
#include "outbox/kafka/kafka_publisher.h"
#include "outbox/sqlite/connection.h"
#include "outbox/store.h"
#include "test_support.h"

namespace {

using outbox::DeliveryResult;
using outbox::OutboundMessage;
using outbox::kafka::KafkaPublisher;
using outbox::kafka::KafkaPublisherOptions;
using outbox::lab::EmbeddedBroker;
using outbox::testing::CaptureThrow;
using outbox::testing::MakeEvent;
using outbox::testing::TempDir;

constexpr const char* kTopic = "loan-events";
constexpr std::int16_t kProduceApiKey = 0;  // RD_KAFKAP_Produce

OutboundMessage MakeMessage(int i) {
  outbox::OutboxRow row;
  row.id = i;
  row.event = MakeEvent(i);
  return outbox::MessageForRow(row);
}

std::vector<OutboundMessage> MakeMessages(int from, int to) {
  std::vector<OutboundMessage> messages;
  for (int i = from; i <= to; ++i) messages.push_back(MakeMessage(i));
  return messages;
}

KafkaPublisherOptions OptionsFor(const EmbeddedBroker& broker) {
  KafkaPublisherOptions options;
  options.brokers = broker.BootstrapServers();
  options.topic = kTopic;
  return options;
}

std::vector<outbox::lab::TopicRecord> ReadAll(const EmbeddedBroker& broker) {
  outbox::lab::TopicReadOptions options;
  options.brokers = broker.BootstrapServers();
  options.topic = kTopic;
  return outbox::lab::ReadTopic(options);
}

}  // namespace

TEST_CASE("KafkaPublisher acknowledges every message on partition 0 with consecutive offsets",
          "[kafka]") {
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);
  KafkaPublisher publisher(OptionsFor(broker));

  const auto results = publisher.Publish(MakeMessages(1, 3));

  REQUIRE(results.size() == 3);
  for (std::size_t i = 0; i < results.size(); ++i) {
    INFO("message " << i);
    CHECK(results[i].ok);
    CHECK(results[i].error.empty());
    CHECK(results[i].outbox_id == static_cast<std::int64_t>(i) + 1);
    CHECK(results[i].partition == 0);
    CHECK(results[i].offset == static_cast<std::int64_t>(i));
  }

  const auto next = publisher.Publish(MakeMessages(4, 4));
  REQUIRE(next.size() == 1);
  REQUIRE(next[0].ok);
  REQUIRE(next[0].offset == 3);
  REQUIRE(publisher.Publish({}).empty());
}

TEST_CASE("KafkaPublisher sends the key and payload and event headers of each message", "[kafka]") {
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);
  KafkaPublisher publisher(OptionsFor(broker));
  const auto messages = MakeMessages(1, 2);
  REQUIRE(publisher.Publish(messages).size() == 2);

  const auto records = ReadAll(broker);

  REQUIRE(records.size() == 2);
  for (std::size_t i = 0; i < records.size(); ++i) {
    CHECK(records[i].key == messages[i].key);
    CHECK(records[i].value == messages[i].payload);
    CHECK(records[i].event_id == messages[i].event_id);
  }
}

TEST_CASE("KafkaPublisher reports a non-retriable produce error as a failed delivery", "[kafka]") {
  const auto [injected, name] = GENERATE(table<rd_kafka_resp_err_t, std::string>(
      {{RD_KAFKA_RESP_ERR_INVALID_MSG, "INVALID_MSG"},
       {RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, "TOPIC_AUTHORIZATION_FAILED"}}));
  INFO("injected " << name);
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);
  KafkaPublisher publisher(OptionsFor(broker));
  rd_kafka_mock_push_request_errors(broker.cluster(), kProduceApiKey, 1, injected);

  const auto results = publisher.Publish(MakeMessages(1, 1));

  REQUIRE(results.size() == 1);
  REQUIRE_FALSE(results[0].ok);
  REQUIRE(results[0].outbox_id == 1);
  REQUIRE_THAT(results[0].error, Catch::Contains("(" + name + ")"));
  CHECK_FALSE(results[0].outage);  // the message's own fault: the relay counts an attempt

  // The rejected record was never appended.
  REQUIRE(ReadAll(broker).empty());
}

TEST_CASE("KafkaPublisher fails a retriable produce error when retries are disabled", "[kafka]") {
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);
  auto options = OptionsFor(broker);
  options.properties = {{"retries", "0"}};
  KafkaPublisher publisher(options);
  rd_kafka_mock_push_request_errors(broker.cluster(), kProduceApiKey, 1,
                                    RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS);

  const auto results = publisher.Publish(MakeMessages(1, 1));

  REQUIRE(results.size() == 1);
  REQUIRE_FALSE(results[0].ok);
  REQUIRE_THAT(results[0].error, Catch::Contains("(NOT_ENOUGH_REPLICAS)"));
  CHECK(results[0].outage);  // the cluster's state, not the message's
}

TEST_CASE("KafkaPublisher retries a retriable produce error and then succeeds", "[kafka]") {
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);
  auto options = OptionsFor(broker);
  options.properties = {{"retry.backoff.ms", "10"}};
  KafkaPublisher publisher(options);
  rd_kafka_mock_push_request_errors(broker.cluster(), kProduceApiKey, 2,
                                    RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
                                    RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS);

  const auto results = publisher.Publish(MakeMessages(1, 1));

  REQUIRE(results.size() == 1);
  REQUIRE(results[0].ok);
  REQUIRE(results[0].offset == 0);
  REQUIRE(ReadAll(broker).size() == 1);
}

TEST_CASE("KafkaPublisher reports every message as an outage naming all brokers down while the "
          "broker is down",
          "[kafka]") {
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);
  rd_kafka_mock_broker_set_down(broker.cluster(), 1);
  auto options = OptionsFor(broker);
  options.delivery_timeout_ms = 1500;
  KafkaPublisher publisher(options);

  const auto results = publisher.Publish(MakeMessages(1, 2));

  REQUIRE(results.size() == 2);
  for (std::size_t i = 0; i < results.size(); ++i) {
    INFO("message " << i);
    CHECK_FALSE(results[i].ok);
    CHECK(results[i].outbox_id == static_cast<std::int64_t>(i) + 1);
    CHECK(results[i].outage);
    CHECK_FALSE(results[i].producer_fatal);
    CHECK(results[i].error ==
          "all brokers down (_ALL_BROKERS_DOWN); the message: Local: Message timed out "
          "(_MSG_TIMED_OUT)");
  }
}

TEST_CASE("KafkaPublisher reports request timeouts that outlast the delivery timeout as an "
          "outage",
          "[kafka]") {
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);
  auto options = OptionsFor(broker);
  options.delivery_timeout_ms = 1000;
  options.properties = {{"retry.backoff.ms", "50"}};
  KafkaPublisher publisher(options);
  // More REQUEST_TIMED_OUT replies than the delivery timeout has room for retries.
  std::vector<rd_kafka_resp_err_t> errors(100, RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT);
  rd_kafka_mock_push_request_errors_array(broker.cluster(), kProduceApiKey, errors.size(),
                                          errors.data());

  const auto results = publisher.Publish(MakeMessages(1, 2));

  REQUIRE(results.size() == 2);
  for (const DeliveryResult& result : results) {
    INFO("message " << result.outbox_id);
    CHECK_FALSE(result.ok);
    CHECK(result.outage);
    CHECK(result.error == "Local: Message timed out (_MSG_TIMED_OUT)");
  }
  rd_kafka_mock_clear_request_errors(broker.cluster(), kProduceApiKey);
  const auto later = publisher.Publish(MakeMessages(3, 3));
  REQUIRE(later.size() == 1);
  CHECK(later[0].ok);
}

TEST_CASE("KafkaPublisher reports a message refused locally as failed and still sends the others",
          "[kafka]") {
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);
  auto options = OptionsFor(broker);
  options.properties = {{"message.max.bytes", "1000"}};
  KafkaPublisher publisher(options);
  auto messages = MakeMessages(1, 3);
  messages[1].payload = std::string(5000, 'x');

  const auto results = publisher.Publish(messages);

  REQUIRE(results.size() == 3);
  CHECK(results[0].ok);
  CHECK(results[0].offset == 0);
  CHECK_FALSE(results[1].ok);
  CHECK(results[1].outbox_id == 2);
  CHECK_THAT(results[1].error, Catch::Contains("MSG_SIZE_TOO_LARGE"));
  CHECK(results[2].ok);
  CHECK(results[2].offset == 1);
}

TEST_CASE("KafkaPublisher rejects bad configuration with ConfigError", "[kafka]") {
  KafkaPublisherOptions options;
  options.brokers = "127.0.0.1:1";
  options.topic = kTopic;

  SECTION("an unknown property") {
    options.properties = {{"no.such.property", "1"}};
    const auto error = CaptureThrow<outbox::ConfigError>([&] { KafkaPublisher p(options); });
    REQUIRE(error.has_value());
    REQUIRE_THAT(error->what(), Catch::Contains("no.such.property"));
  }
  SECTION("an invalid value") {
    options.properties = {{"acks", "sometimes"}};
    const auto error = CaptureThrow<outbox::ConfigError>([&] { KafkaPublisher p(options); });
    REQUIRE(error.has_value());
    REQUIRE_THAT(error->what(), Catch::Contains("acks=sometimes"));
  }
  SECTION("acks=0 under either name: no acknowledgement to mark a row on") {
    for (const char* name : {"acks", "request.required.acks"}) {
      options.properties = {{name, "0"}};
      const auto error = CaptureThrow<outbox::ConfigError>([&] { KafkaPublisher p(options); });
      REQUIRE(error.has_value());
      REQUIRE_THAT(error->what(), Catch::Contains(std::string(name) + "=0") &&
                                      Catch::Contains("acknowledge nothing"));
    }
    options.properties = {{"acks", "1"}};  // the partition leader's ack: accepted
    KafkaPublisher accepted(options);
  }
  SECTION("a delivery timeout that is not positive") {
    options.delivery_timeout_ms = 0;
    const auto error = CaptureThrow<outbox::ConfigError>([&] { KafkaPublisher p(options); });
    REQUIRE(error.has_value());
    REQUIRE_THAT(error->what(), Catch::Contains("delivery timeout 0 ms"));
  }
}

TEST_CASE("ParseProperty splits at the first '=' and rejects text without a name or '='",
          "[kafka]") {
  using outbox::kafka::ParseProperty;
  CHECK(ParseProperty("acks=all") == outbox::kafka::Property{"acks", "all"});
  CHECK(ParseProperty("sasl.jaas=a=b") == outbox::kafka::Property{"sasl.jaas", "a=b"});
  CHECK(ParseProperty("client.id=") == outbox::kafka::Property{"client.id", ""});

  const std::string bad = GENERATE(as<std::string>{}, "", "acks", "=all");
  INFO("text: '" << bad << "'");
  REQUIRE(CaptureThrow<outbox::ConfigError>([&] { ParseProperty(bad); }).has_value());
}

TEST_CASE("Relay with KafkaPublisher leaves rows unpublished from the one the broker rejects",
          "[relay][kafka]") {
  TempDir dir;
  outbox::Store store(dir.File("lab.db"), outbox::StoreOptions{}, outbox::OpenMode::kCreate);
  store.ResetSchema();
  for (int i = 1; i <= 3; ++i) {
    auto txn = store.BeginWrite();
    store.Enqueue(txn, MakeEvent(i));
    txn.Commit();
  }
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);
  KafkaPublisher publisher(OptionsFor(broker));
  // The first produce succeeds, the second is rejected.
  rd_kafka_mock_push_request_errors(broker.cluster(), kProduceApiKey, 2,
                                    RD_KAFKA_RESP_ERR_NO_ERROR, RD_KAFKA_RESP_ERR_INVALID_MSG);
  outbox::PerRowRelayOptions options;
  options.limit = 10;
  std::vector<outbox::PerRowRelayStep> steps;

  const auto report = outbox::RunPerRowRelay(
      store, publisher, options, [&](const outbox::PerRowRelayStep& s) { steps.push_back(s); });

  REQUIRE(report.sent == 1);
  REQUIRE(report.marked == 1);
  REQUIRE(report.failed == 1);
  REQUIRE(steps.size() == 2);
  CHECK(steps[1].row.id == 2);
  CHECK_THAT(steps[1].delivery.error, Catch::Contains("INVALID_MSG"));
  const auto unpublished = store.FetchUnpublished(0, 10);
  REQUIRE(unpublished.size() == 2);
  CHECK(unpublished[0].id == 2);
  CHECK(unpublished[1].id == 3);

  // Once the broker accepts again, the next run sends rows 2 and 3.
  const auto second = outbox::RunPerRowRelay(store, publisher, options, nullptr);
  REQUIRE(second.sent == 2);
  REQUIRE(second.marked == 2);
  REQUIRE(store.Count().unpublished == 0);
  const auto records = ReadAll(broker);
  REQUIRE(records.size() == 3);
  CHECK(records[0].event_id == MakeEvent(1).event_id);
  CHECK(records[1].event_id == MakeEvent(2).event_id);
  CHECK(records[2].event_id == MakeEvent(3).event_id);
}

namespace {

// Bytes the publisher sent to the broker ("tx_bytes" of librdkafka's statistics) after
// publishing messages 1..count with one compression.type, read from a statistics document made
// after the acks (the hook keeps the latest; two more documents are awaited).
std::int64_t TxBytesAfterPublishing(const EmbeddedBroker& broker, const std::string& codec,
                                    int count) {
  std::int64_t tx_bytes = -1;
  int documents = 0;
  KafkaPublisherOptions options = OptionsFor(broker);
  options.properties = {{"compression.type", codec}, {"statistics.interval.ms", "50"}};
  options.on_statistics = [&](std::string_view json) {
    const auto at = json.find("\"tx_bytes\":");
    if (at == std::string_view::npos) return;  // not counted: the REQUIRE below fails
    tx_bytes = std::stoll(std::string(json.substr(at + 11, 20)));
    ++documents;
  };
  KafkaPublisher publisher(options);
  const auto results = publisher.Publish(MakeMessages(1, count));
  REQUIRE(results.size() == static_cast<std::size_t>(count));
  for (const DeliveryResult& result : results) REQUIRE(result.ok);
  const int wanted = documents + 2;
  for (int i = 0; i < 200 && documents < wanted; ++i) rd_kafka_poll(publisher.handle(), 20);
  REQUIRE(documents >= wanted);
  return tx_bytes;
}

}  // namespace

TEST_CASE("KafkaPublisher hands librdkafka statistics to its hook and lz4 batches send fewer bytes",
          "[kafka]") {
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);
  const std::int64_t none = TxBytesAfterPublishing(broker, "none", 500);
  const std::int64_t lz4 = TxBytesAfterPublishing(broker, "lz4", 500);
  INFO("tx_bytes none=" << none << " lz4=" << lz4);
  // 500 records of key, JSON payload and headers, over 60 bytes each: more than 30,000 bytes
  // uncompressed (measured: 42,260 none, 10,905 lz4).
  CHECK(none > 30000);
  CHECK(lz4 > 0);
  CHECK(lz4 * 2 < none);
  // Compression is invisible to readers: both runs read back as the same 500 records.
  const auto records = ReadAll(broker);
  REQUIRE(records.size() == 1000);
  for (std::size_t i = 0; i < 500; ++i) {
    CHECK(records[i].key == records[i + 500].key);
    CHECK(records[i].value == records[i + 500].value);
    CHECK(records[i].headers.size() == records[i + 500].headers.size());
  }
}
