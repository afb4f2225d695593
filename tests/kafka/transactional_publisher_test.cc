// TransactionalPublisher (relay --exactly-once) against librdkafka's mock cluster, and what that
// mock cluster does and does not do with transactions (docs/exactly-once.md): it runs the
// transactional API (InitProducerId, AddPartitionsToTxn, EndTxn all succeed), so the commit path
// and the relay-state round trip are tested here; it writes no commit or abort markers and
// ignores the fetch's isolation level (librdkafka v2.0.2 src/rdkafka_mock_handlers.c: EndTxn only
// checks the producer id, Fetch answers LastStableOffset = end offset and no aborted
// transactions), so an aborted transaction's records reach read_committed readers. The abort
// path is proven on real Kafka (scenarios/exactly-once-chapter.sh).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "lab/broker/embedded_broker.h"  // rdkafka.h, then rdkafka_mock.h
#include "lab/check/topic_reader.h"
#include "outbox/error.h"
#include "outbox/kafka/handles.h"
#include "outbox/kafka/transactional_publisher.h"
#include "outbox/per_row_relay.h"
#include "test_support.h"

namespace {

using outbox::OutboundMessage;
using outbox::kafka::TransactionalPublisher;
using outbox::kafka::TransactionalPublisherOptions;
using outbox::lab::EmbeddedBroker;
using outbox::testing::MakeEvent;

constexpr const char* kTopic = "loan-events";

std::vector<OutboundMessage> MakeMessages(int from, int to) {
  std::vector<OutboundMessage> messages;
  for (int i = from; i <= to; ++i) {
    outbox::OutboxRow row;
    row.id = i;
    row.event = MakeEvent(i);
    messages.push_back(outbox::MessageForRow(row));
  }
  return messages;
}

TransactionalPublisherOptions OptionsFor(const EmbeddedBroker& broker) {
  TransactionalPublisherOptions options;
  options.publisher.brokers = broker.BootstrapServers();
  options.publisher.topic = kTopic;
  options.publisher.delivery_timeout_ms = 5000;
  options.transactional_id = "outbox-relay:loan-events:test.db";
  options.transaction_timeout_ms = 10000;
  return options;
}

std::vector<outbox::lab::TopicRecord> ReadAll(const EmbeddedBroker& broker,
                                              const std::string& isolation) {
  outbox::lab::TopicReadOptions options;
  options.brokers = broker.BootstrapServers();
  options.topic = kTopic;
  options.properties = {{"isolation.level", isolation}};
  return outbox::lab::ReadTopic(options);
}

}  // namespace

TEST_CASE("The relay-state value names the outbox ids and their event ids and parses back",
          "[kafka]") {
  const std::string value = outbox::kafka::RelayStateValue(
      "outbox-relay:t:db", "run-1", {3, 4, 5}, {"evt-3", std::string("n\0\xff", 3), ""});
  CHECK(value == R"({"transactional_id":"outbox-relay:t:db","run_id":"run-1","outbox_ids":[3,4,5],)"
                 R"("event_ids_hex":["6576742d33","6e00ff",""]})");
  const outbox::kafka::RelayState state = outbox::kafka::ParseRelayState(value);
  CHECK(state.outbox_ids == std::vector<std::int64_t>{3, 4, 5});
  CHECK(state.event_ids == std::vector<std::string>{"evt-3", std::string("n\0\xff", 3), ""});
  CHECK(state.run_id == "run-1");
  // A record written before event ids were named, or with a field of another shape: ids only.
  for (const std::string older :
       {R"({"transactional_id":"x","run_id":"run-1","outbox_ids":[3,4]})",
        R"({"run_id":"run-1","outbox_ids":[3,4],"event_ids_hex":["6576"]})",
        R"({"run_id":"run-1","outbox_ids":[3,4],"event_ids_hex":["6576","zz"]})"}) {
    INFO(older);
    const outbox::kafka::RelayState parsed = outbox::kafka::ParseRelayState(older);
    CHECK(parsed.outbox_ids == std::vector<std::int64_t>{3, 4});
    CHECK(parsed.event_ids.empty());
  }
  CHECK(outbox::kafka::RelayStateTopic("loan-events") == "loan-events.outbox-relay-state");
  CHECK(outbox::kafka::DefaultTransactionalId("loan-events", "/data/app.db") ==
        "outbox-relay:loan-events:/data/app.db");
}

TEST_CASE("A relay-state record that is not the relay's own is refused with its text", "[kafka]") {
  for (const std::string junk : {"", "not json", "{\"outbox_ids\":\"3\"}", "{\"outbox_ids\":[1.5]}"}) {
    INFO("value " << junk);
    CHECK_THROWS_AS(outbox::kafka::ParseRelayState(junk), outbox::KafkaError);
  }
}

TEST_CASE("TransactionalPublisher refuses to send before Recover has initialized transactions",
          "[kafka]") {
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);
  TransactionalPublisher publisher(OptionsFor(broker));
  CHECK_THROWS_AS(publisher.Send(MakeMessages(1, 1)), std::logic_error);
}

TEST_CASE("TransactionalPublisher refuses an empty transactional id", "[kafka]") {
  EmbeddedBroker broker;
  TransactionalPublisherOptions options = OptionsFor(broker);
  options.transactional_id.clear();
  CHECK_THROWS_AS(TransactionalPublisher(options), outbox::ConfigError);
}

TEST_CASE("A committed batch's ids are recovered by the next producer of the same transactional id",
          "[kafka]") {
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);
  // Made here: the mock cluster leaves Recover's CreateTopics unanswered (3 s each).
  broker.CreateTopic(outbox::kafka::RelayStateTopic(kTopic), 1);
  {
    TransactionalPublisher first(OptionsFor(broker));
    CHECK(first.Recover(10000, "").empty());  // nothing committed yet
    const auto results = first.Publish(MakeMessages(1, 3));
    REQUIRE(results.size() == 3);
    for (const auto& r : results) CHECK(r.ok);
    CHECK(first.committed() == 1);
    REQUIRE(first.Publish(MakeMessages(4, 5)).size() == 2);
    CHECK(first.committed() == 2);
  }
  TransactionalPublisher second(OptionsFor(broker));
  CHECK(second.Recover(10000, "") == std::vector<std::int64_t>{1, 2, 3, 4, 5});
  // Only the run asked for: a reset's new run starts its ids at 1 again.
  CHECK(second.Recover(10000, "another-run").empty());
  // The records themselves are on the outbox topic, once each.
  CHECK(ReadAll(broker, "read_committed").size() == 5);
}

TEST_CASE("The embedded broker shows an aborted transaction's records to read_committed readers",
          "[kafka]") {
  // The limitation this test pins down: were the mock faithful, read_committed would see 0.
  EmbeddedBroker broker;
  broker.CreateTopic(kTopic, 1);
  auto conf = outbox::kafka::MakeConf({{"bootstrap.servers", broker.BootstrapServers()},
                                       {"transactional.id", "abort-probe"},
                                       {"log_level", "2"}});
  outbox::kafka::KafkaHandle producer =
      outbox::kafka::MakeClient(RD_KAFKA_PRODUCER, std::move(conf));
  outbox::kafka::ErrorHandle error(rd_kafka_init_transactions(producer.get(), 10000));
  REQUIRE(!error);
  error.reset(rd_kafka_begin_transaction(producer.get()));
  REQUIRE(!error);
  for (int i = 0; i < 3; ++i)
    REQUIRE(rd_kafka_producev(producer.get(), RD_KAFKA_V_TOPIC(kTopic), RD_KAFKA_V_VALUE((void*)"x", 1),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR_NO_ERROR);
  REQUIRE(rd_kafka_flush(producer.get(), 10000) == RD_KAFKA_RESP_ERR_NO_ERROR);
  error.reset(rd_kafka_abort_transaction(producer.get(), 10000));
  REQUIRE(!error);

  CHECK(ReadAll(broker, "read_uncommitted").size() == 3);
  CHECK(ReadAll(broker, "read_committed").size() == 3);
}
