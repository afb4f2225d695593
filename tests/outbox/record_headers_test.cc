// The outbox's headers column (issue 9 §8): the application's record headers,
// a JSON object of string values, treated as untrusted input. A bad value
// parks its row with the reason and never stops the relay.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "lab/broker/embedded_broker.h"
#include "lab/check/topic_reader.h"
#include "outbox/kafka/kafka_publisher.h"
#include "outbox/per_row_relay.h"
#include "outbox/record_headers.h"
#include "outbox/relay.h"
#include "outbox/store.h"
#include "relay_test_support.h"
#include "test_support.h"

using outbox::ParseRecordHeaders;
using outbox::RecordHeader;

namespace outbox {

// For CHECK on vectors of headers; found by argument-dependent lookup.
bool operator==(const RecordHeader& a, const RecordHeader& b) {
  return a.name == b.name && a.value == b.value;
}

}  // namespace outbox

namespace {

constexpr const char* kTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

}  // namespace

TEST_CASE("ParseRecordHeaders reads an object of string values in its order and NULL as none",
          "[headers]") {
  const auto parsed = ParseRecordHeaders(
      std::string(R"({"traceparent":")") + kTraceparent + R"(","tenant":"acme","a":""})");
  REQUIRE(parsed.ok());
  CHECK(parsed.headers == std::vector<RecordHeader>{
                              {"traceparent", kTraceparent}, {"tenant", "acme"}, {"a", ""}});
  CHECK(ParseRecordHeaders("").ok());
  CHECK(ParseRecordHeaders("").headers.empty());
  CHECK(ParseRecordHeaders("{}").ok());
}

namespace {

// A headers column of n entries "h0", "h1", ... whose values are value_bytes of 'v'.
std::string ManyHeaders(int n, std::size_t value_bytes) {
  std::string column = "{";
  for (int i = 0; i < n; ++i)
    column += (i ? ",\"h" : "\"h") + std::to_string(i) + "\":\"" + std::string(value_bytes, 'v') + "\"";
  return column + "}";
}

}  // namespace

TEST_CASE("ParseRecordHeaders reads up to its limits of 1000 headers and 100000 bytes",
          "[headers]") {
  CHECK(ParseRecordHeaders(ManyHeaders(1000, 1)).headers.size() == 1000);
  CHECK(ParseRecordHeaders(ManyHeaders(2, 49998)).ok());  // 2 + 2 + 2 * 49998 bytes
}

TEST_CASE("ParseRecordHeaders refuses every value that is not an object of string values with one "
          "line that never repeats the column bytes",
          "[headers]") {
  struct Case {
    std::string column;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"{\"tenant\":", "headers column: invalid JSON: it ends after 10 bytes"},
      {"not json", "headers column: invalid JSON at byte 2"},
      {std::string("{\"t\":\"\xC3\x28\"}"), "headers column: invalid JSON at byte 8"},
      {"[\"tenant\",\"acme\"]", "headers column: a JSON array, not an object of string values"},
      {"\"acme\"", "headers column: a JSON string, not an object of string values"},
      {"{\"tenant\":7}", "headers column: the value of \"tenant\" is a number, not a string"},
      {"{\"tenant\":null}", "headers column: the value of \"tenant\" is a null, not a string"},
      {"{\"tenant\":{\"id\":\"acme\"}}",
       "headers column: the value of \"tenant\" is a object, not a string"},
      {"{\"\":\"x\"}", "headers column: a header with an empty name"},
      {"{\"event_id\":\"evt-forged\"}", "headers column: \"event_id\" is a header the relay sets itself"},
      {"{\"outbox_id\":\"1\"}", "headers column: \"outbox_id\" is a header the relay sets itself"},
      {"{\"run_id\":\"r\"}", "headers column: \"run_id\" is a header the relay sets itself"},
      {"{\"a\\nb\":1}", "headers column: the value of \"a\\nb\" is a number, not a string"},
      {std::string(100000, '['), "headers column: invalid JSON: it ends after 100000 bytes"},
      {std::string("{\"a\":\"b\"}\0garbage", 18), "headers column: a NUL byte at byte 10"},
      {"{\"event_id\\u0000\":\"dup\"}",
       "headers column: the name \"event_id\\u0000\" holds a NUL character"},
      {"{\"k\":\"a\\u0000b\"}", "headers column: the value of \"k\" holds a NUL character"},
      {ManyHeaders(1001, 1), "headers column: 1001 headers, more than 1000"},
      {ManyHeaders(2, 50000), "headers column: 100004 bytes of header names and values, more "
                              "than 100000"},
  };
  for (const Case& c : cases) {
    INFO("column of " << c.column.size() << " bytes: " << c.column.substr(0, 40));
    const auto parsed = ParseRecordHeaders(c.column);
    CHECK_FALSE(parsed.ok());
    CHECK(parsed.headers.empty());
    CHECK(parsed.error == c.error);
    CHECK(parsed.error.find('\n') == std::string::npos);
  }
}

TEST_CASE("The relay parks a row with bad headers at once with the reason and sends the rest with "
          "theirs",
          "[headers][relay]") {
  outbox::testing::TempDir dir;
  outbox::testing::FakeClock clock;
  auto options = outbox::testing::FastStoreOptions();
  options.clock = &clock;
  outbox::Store store(dir.File("outbox.db"), options, outbox::OpenMode::kCreate);
  store.ResetSchema();
  std::vector<outbox::OutboxEvent> events;
  for (int i = 1; i <= 4; ++i) events.push_back(outbox::testing::MakeEvent(i));
  events[0].headers = std::string(R"({"traceparent":")") + kTraceparent + R"(","tenant":"acme"})";
  events[1].headers = "{\"tenant\":";          // invalid JSON
  events[2].headers = "{\"event_id\":\"x\"}";  // forges the relay's header
  const auto ids = outbox::testing::EnqueueAll(store, events);
  outbox::testing::FakePublisher publisher;
  outbox::RelayOptions relay_options;
  relay_options.clock = &clock;
  outbox::Relay relay(store, publisher, relay_options);

  const auto report = relay.RunBatch();

  CHECK(report.claimed == 4);
  CHECK(report.acked == 2);
  CHECK(report.failed == 2);
  CHECK(report.settle.parked == 2);  // at once, not after max_attempts
  REQUIRE(publisher.calls.size() == 1);
  REQUIRE(outbox::testing::IdsOf(publisher.calls[0]) == std::vector<std::int64_t>{ids[0], ids[3]});
  CHECK(publisher.calls[0][0].headers ==
        std::vector<RecordHeader>{{"traceparent", kTraceparent}, {"tenant", "acme"}});
  CHECK(publisher.calls[0][1].headers.empty());
  CHECK(outbox::testing::TextColumn(store, "last_error", ids[1]) ==
        "headers column: invalid JSON: it ends after 10 bytes");
  CHECK(outbox::testing::TextColumn(store, "last_error", ids[2]) ==
        "headers column: \"event_id\" is a header the relay sets itself");
  CHECK(outbox::testing::IntColumn(store, "parked_at", ids[1]).has_value());
  CHECK(outbox::testing::IntColumn(store, "attempts", ids[2]) == 1);
  // Nothing left to claim, and the relay goes on working.
  CHECK(relay.RunBatch().claimed == 0);
  const auto troubled = store.ListTroubled(clock.EpochMs(), 10);
  CHECK(troubled.parked == 2);
}

TEST_CASE("KafkaPublisher sends the application headers after event_id event_type outbox_id and run_id",
          "[headers][kafka]") {
  outbox::lab::EmbeddedBroker broker;
  broker.CreateTopic("loan-events", 1);
  outbox::kafka::KafkaPublisherOptions options;
  options.brokers = broker.BootstrapServers();
  options.topic = "loan-events";
  outbox::kafka::KafkaPublisher publisher(options);
  outbox::OutboxRow row;
  row.id = 7;
  row.event = outbox::testing::MakeEvent(7);
  outbox::OutboundMessage message = outbox::MessageForRow(row);
  message.headers = {{"traceparent", kTraceparent}, {"bytes", std::string("\xC3\x28\0z", 4)}};
  REQUIRE(publisher.Publish({message}).at(0).ok);

  outbox::lab::TopicReadOptions read;
  read.brokers = broker.BootstrapServers();
  read.topic = "loan-events";
  const auto records = outbox::lab::ReadTopic(read);

  REQUIRE(records.size() == 1);
  CHECK(records[0].headers == std::vector<RecordHeader>{{"event_id", "evt-7"},
                                                        {"event_type", "TestEvent"},
                                                        {"outbox_id", "7"},
                                                        {"run_id", ""},  // no run id given
                                                        {"traceparent", kTraceparent},
                                                        {"bytes", std::string("\xC3\x28\0z", 4)}});
}
