// relay --topic-template: a template checked once, each row's topic checked when it is sent
// (a row whose topic would be illegal is parked with the reason), and the relay sending every
// record where its row says, in both coordination modes, on SQLite and PostgreSQL.
#include <catch2/catch.hpp>

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "lab/broker/embedded_broker.h"
#include "lab/check/topic_reader.h"
#include "outbox/error.h"
#include "outbox/kafka/kafka_publisher.h"
#include "outbox/per_row_relay.h"
#include "outbox/pg_store.h"
#include "outbox/pg/connection.h"
#include "outbox/relay.h"
#include "outbox/store.h"
#include "outbox/topic_template.h"
#include "pg_test_support.h"
#include "relay_test_support.h"
#include "test_support.h"

namespace {

using outbox::TopicTemplate;

std::string ParseError(const std::string& text) {
  try {
    TopicTemplate::Parse(text);
  } catch (const outbox::ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

outbox::RoutedTopic RenderType(const std::string& text, const std::string& event_type) {
  outbox::OutboxEvent event = outbox::testing::MakeEvent(1);
  event.event_type = event_type;
  return TopicTemplate::Parse(text).Render(event);
}

std::vector<outbox::OutboxEvent> LoanEvents() {
  std::vector<outbox::OutboxEvent> events;
  for (int i = 1; i <= 4; ++i) {
    outbox::OutboxEvent event = outbox::testing::MakeEvent(i);
    event.event_type = i % 2 ? "LoanCreated" : "LoanApproved";
    events.push_back(event);
  }
  events.push_back(outbox::testing::MakeEvent(5));
  events.back().event_type = "Loan Paid";  // a space: no legal topic
  return events;
}

// Runs a relay with template and the CloudEvents headers until nothing is left to claim.
void RunRouted(outbox::OutboxStore& store, outbox::testing::FakePublisher& publisher,
               outbox::Coordination coordination, outbox::Clock* clock) {
  outbox::RelayOptions options;
  options.coordination = coordination;
  options.topic_template = TopicTemplate::Parse("outbox.{event_type}");
  options.headers = outbox::HeaderConvention::kCloudEvents;
  options.clock = clock;
  options.owner = "relay-test";
  outbox::Relay relay(store, publisher, options);
  for (int i = 0; i < 5 && relay.RunBatch().claimed > 0; ++i) {
  }
}

// Every message's topic by event id, from every call.
std::map<std::string, std::string> TopicsSent(const outbox::testing::FakePublisher& publisher) {
  std::map<std::string, std::string> topics;
  for (const auto& call : publisher.calls)
    for (const auto& m : call) topics[m.event_id] = m.topic;
  return topics;
}

const std::map<std::string, std::string> kExpectedTopics = {{"evt-1", "outbox.LoanCreated"},
                                                            {"evt-2", "outbox.LoanApproved"},
                                                            {"evt-3", "outbox.LoanCreated"},
                                                            {"evt-4", "outbox.LoanApproved"}};
constexpr const char* kPaidError =
    "topic template 'outbox.{event_type}': the row's topic is illegal: a topic name takes only "
    "the letters a-z and A-Z, digits, '.', '_' and '-' (Kafka's rule), byte 12 is 0x20";

}  // namespace

TEST_CASE("TopicTemplate refuses unknown placeholders unbalanced braces illegal characters and "
          "aggregate_type",
          "[routing]") {
  CHECK(ParseError("outbox.{event_type}") == "(accepted)");
  CHECK(ParseError("{event_type}") == "(accepted)");
  CHECK(ParseError("") == "topic template '': empty");
  CHECK(ParseError("outbox") ==
        "topic template 'outbox': no placeholder: for one topic for every row use --topic; a "
        "template names {event_type}");
  CHECK(ParseError("outbox.{type}") ==
        "topic template 'outbox.{type}': unknown placeholder {type}; the one placeholder is "
        "{event_type}");
  CHECK(ParseError("outbox.{event_type") ==
        "topic template 'outbox.{event_type': the '{' at byte 8 is never closed");
  CHECK(ParseError("outbox}.{event_type}") ==
        "topic template 'outbox}.{event_type}': the '}' at byte 7 closes nothing");
  CHECK(ParseError("outbox/{event_type}") ==
        "topic template 'outbox/{event_type}': byte 7 (0x2f) cannot be in a topic name: Kafka "
        "takes a-z, A-Z, 0-9, '.', '_' and '-'");
  CHECK(ParseError("outbox.{aggregate_type}") ==
        "topic template 'outbox.{aggregate_type}': {aggregate_type}: the outbox table has no "
        "aggregate_type column (its fields: event_id, aggregate_id, event_type, payload); use "
        "{event_type}");
  const std::string long_prefix(249, 'a');
  CHECK(ParseError(long_prefix + "{event_type}") ==
        "topic template '" + long_prefix +
            "{event_type}': its fixed part has 249 characters, and a topic name at most 249");
}

TEST_CASE("TopicTemplate::Render checks each row's topic against Kafka's rules", "[routing]") {
  CHECK(RenderType("outbox.{event_type}", "LoanCreated").topic == "outbox.LoanCreated");
  CHECK(RenderType("{event_type}-v1", "Loan_Paid-2").topic == "Loan_Paid-2-v1");
  CHECK(RenderType("outbox.{event_type}", "Loan Paid").error == kPaidError);
  CHECK(RenderType("{event_type}", ".").error ==
        "topic template '{event_type}': the row's topic is illegal: a topic cannot be named '.'");
  CHECK(RenderType("{event_type}", "").error ==
        "topic template '{event_type}': the row's topic is illegal: a topic name cannot be "
        "empty");
  CHECK(RenderType("{event_type}", std::string("A\0B", 3)).error ==
        "topic template '{event_type}': the row's topic is illegal: a topic name takes only the "
        "letters a-z and A-Z, digits, '.', '_' and '-' (Kafka's rule), byte 2 is 0x00");
  CHECK(RenderType("x.{event_type}", std::string(247, 'T')).topic.size() == 249);
  CHECK(RenderType("x.{event_type}", std::string(248, 'T')).error ==
        "topic template 'x.{event_type}': the row's topic is illegal: a topic name has at most "
        "249 characters, got 250");
}

TEST_CASE("The relay sends each row to its event type's topic and parks a row whose topic is "
          "illegal in both coordination modes",
          "[routing][relay]") {
  const auto coordination =
      GENERATE(outbox::Coordination::kClaims, outbox::Coordination::kLeader);
  outbox::testing::TempDir dir;
  outbox::testing::FakeClock clock;
  auto store_options = outbox::testing::FastStoreOptions();
  store_options.clock = &clock;
  outbox::Store store(dir.File("outbox.db"), store_options, outbox::OpenMode::kCreate);
  store.ResetSchema();
  const auto ids = outbox::testing::EnqueueAll(store, LoanEvents());
  outbox::testing::FakePublisher publisher;

  RunRouted(store, publisher, coordination, &clock);

  CHECK(TopicsSent(publisher) == kExpectedTopics);
  CHECK(outbox::testing::TextColumn(store, "last_error", ids[4]) == kPaidError);
  CHECK(outbox::testing::IntColumn(store, "parked_at", ids[4]).has_value());
  for (int i = 0; i < 4; ++i) CHECK(outbox::testing::IsPublished(store, ids[i]));
  CHECK(store.EventTypes() ==
        std::vector<std::string>{"Loan Paid", "LoanApproved", "LoanCreated"});
  CHECK(outbox::lab::TopicsOfRun(store, "v2c7.outbox", "outbox.{event_type}") ==
        std::vector<std::string>{"outbox.LoanApproved", "outbox.LoanCreated"});
  CHECK(outbox::lab::TopicsOfRun(store, "v2c7.outbox", "") ==
        std::vector<std::string>{"v2c7.outbox"});
  // A purge without --archive keeps the types it removed: check still reads their topics.
  REQUIRE(store.PurgePublished(std::numeric_limits<std::int64_t>::max(), 100, false).deleted == 4);
  CHECK(store.EventTypes() ==
        std::vector<std::string>{"Loan Paid", "LoanApproved", "LoanCreated"});
}

TEST_CASE("PostgreSQL relays route by event type and park an illegal topic in both coordination "
          "modes",
          "[routing][postgres]") {
  const auto coordination =
      GENERATE(outbox::Coordination::kClaims, outbox::Coordination::kLeader);
  outbox::testing::PgSchema schema("route");
  outbox::PgStore store(schema.url());
  std::vector<std::int64_t> ids;
  for (const outbox::OutboxEvent& event : LoanEvents()) {
    auto txn = store.BeginWrite();
    ids.push_back(store.Enqueue(txn, event));
    txn.Commit();
  }
  outbox::testing::FakePublisher publisher;

  RunRouted(store, publisher, coordination, nullptr);

  CHECK(TopicsSent(publisher) == kExpectedTopics);
  const auto troubled = store.ListTroubled(store.clock().EpochMs(), 10);
  CHECK(troubled.parked == 1);
  CHECK(store.Count().published == 4);
  // The CloudEvents time is the row's own created_at (MakeEvent's, kept by Enqueue).
  for (const auto& call : publisher.calls)
    for (const auto& m : call)
      if (m.event_id == "evt-2") CHECK(m.headers.at(5).value == "2023-11-14T22:13:20.002Z");
  CHECK(store.EventTypes() ==
        std::vector<std::string>{"Loan Paid", "LoanApproved", "LoanCreated"});
  CHECK(outbox::lab::TopicsOfRun(store, "v2c7.outbox", "outbox.{event_type}") ==
        std::vector<std::string>{"outbox.LoanApproved", "outbox.LoanCreated"});
  // A purge without --archive keeps the types it removed: check still reads their topics. The
  // published_at moved a second back so that "older than 0 ms" holds on the server's clock.
  outbox::pg::Connection(schema.url()).Exec("UPDATE outbox SET published_at = published_at - 1000",
                                    "age the published rows");
  REQUIRE(store.PurgeOlderThan(0, 100, false).deleted == 4);
  CHECK(store.EventTypes() ==
        std::vector<std::string>{"Loan Paid", "LoanApproved", "LoanCreated"});
}

TEST_CASE("KafkaPublisher produces each message to its own topic and ReadTopicLogs reads them all",
          "[routing][kafka]") {
  outbox::lab::EmbeddedBroker broker;
  broker.CreateTopic("outbox.LoanCreated", 1);
  broker.CreateTopic("outbox.LoanApproved", 2);
  outbox::kafka::KafkaPublisherOptions options;
  options.brokers = broker.BootstrapServers();
  options.topic = "v2c7.outbox";
  outbox::kafka::KafkaPublisher publisher(options);
  std::vector<outbox::OutboundMessage> messages;
  for (int i = 1; i <= 3; ++i) {
    outbox::OutboxRow row;
    row.id = i;
    row.event = outbox::testing::MakeEvent(i);
    messages.push_back(outbox::MessageForRow(row));
    messages.back().topic = i == 2 ? "outbox.LoanApproved" : "outbox.LoanCreated";
  }
  for (const auto& result : publisher.Publish(messages)) REQUIRE(result.ok);

  outbox::lab::TopicReadOptions read;
  read.brokers = broker.BootstrapServers();
  const auto log =
      outbox::lab::ReadTopicLogs(read, {"outbox.LoanApproved", "outbox.LoanCreated", "absent"});

  CHECK(log.topic == "outbox.LoanApproved,outbox.LoanCreated,absent");
  CHECK(log.topic_exists);
  REQUIRE(log.records.size() == 3);
  CHECK(log.records[0].topic == "outbox.LoanApproved");
  CHECK(log.records[0].event_id == "evt-2");
  CHECK(log.records[1].topic == "outbox.LoanCreated");
  CHECK(log.records[1].event_id == "evt-1");
  CHECK(log.records[2].event_id == "evt-3");
  CHECK(log.partitions.size() == 3);  // 2 + 1; the absent topic has none
}
