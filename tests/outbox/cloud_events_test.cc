// relay --headers cloudevents: the CloudEvents Kafka binding's binary-mode headers built from an
// outbox row (CloudEventsHeaders), its RFC 3339 time, and the refusal of rows whose untrusted
// bytes cannot make a CloudEvent: every such row gets one error line, none crashes the relay.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "outbox/cloud_events.h"
#include "outbox/error.h"
#include "outbox/row_message.h"
#include "test_support.h"

namespace outbox {

bool operator==(const RecordHeader& a, const RecordHeader& b);  // record_headers_test.cc

}  // namespace outbox

namespace {

using outbox::CloudEventsHeaders;
using outbox::RecordHeader;
using outbox::Rfc3339FromEpochMs;

outbox::OutboxRow RowOf(const outbox::OutboxEvent& event) {
  outbox::OutboxRow row;
  row.id = 7;
  row.event = event;
  return row;
}

// The error CloudEventsHeaders gives for a row whose event_type is type.
std::string TypeError(const std::string& type) {
  outbox::OutboxEvent event = outbox::testing::MakeEvent(7);
  event.event_type = type;
  return CloudEventsHeaders(RowOf(event), "/s").error;
}

}  // namespace

TEST_CASE("Rfc3339FromEpochMs writes UTC with milliseconds across leap days and before 1970",
          "[cloudevents]") {
  CHECK(Rfc3339FromEpochMs(0) == "1970-01-01T00:00:00.000Z");
  CHECK(Rfc3339FromEpochMs(1700000000001) == "2023-11-14T22:13:20.001Z");
  CHECK(Rfc3339FromEpochMs(951782400000) == "2000-02-29T00:00:00.000Z");
  CHECK(Rfc3339FromEpochMs(951868799999) == "2000-02-29T23:59:59.999Z");
  CHECK(Rfc3339FromEpochMs(-1) == "1969-12-31T23:59:59.999Z");
  CHECK(Rfc3339FromEpochMs(-62167219200000) == "0000-01-01T00:00:00.000Z");
  CHECK(Rfc3339FromEpochMs(253402300799999) == "9999-12-31T23:59:59.999Z");
}

TEST_CASE("Rfc3339FromEpochMs gives nothing for a time outside the years 0000 to 9999",
          "[cloudevents]") {
  CHECK(Rfc3339FromEpochMs(253402300800000).empty());
  CHECK(Rfc3339FromEpochMs(-62167219200001).empty());
  CHECK(Rfc3339FromEpochMs(std::numeric_limits<std::int64_t>::max()).empty());
  CHECK(Rfc3339FromEpochMs(std::numeric_limits<std::int64_t>::min()).empty());
}

TEST_CASE("CloudEventsHeaders maps the row to ce_id ce_type ce_subject and ce_time in spec order",
          "[cloudevents]") {
  outbox::OutboxEvent event = outbox::testing::MakeEvent(7);
  event.event_type = "LoanApproved";
  event.aggregate_id = "loan-\xC3\xA9t\xC3\xA9";  // UTF-8 passes unchanged
  const auto parsed = CloudEventsHeaders(RowOf(event), "/outbox-lab/relay");
  REQUIRE(parsed.ok());
  CHECK(parsed.headers == std::vector<RecordHeader>{{"ce_specversion", "1.0"},
                                                    {"ce_id", "evt-7"},
                                                    {"ce_source", "/outbox-lab/relay"},
                                                    {"ce_type", "LoanApproved"},
                                                    {"ce_subject", "loan-\xC3\xA9t\xC3\xA9"},
                                                    {"ce_time", "2023-11-14T22:13:20.007Z"}});
}

TEST_CASE("CloudEventsHeaders refuses control characters and bytes that are not UTF-8 by position "
          "without echoing them",
          "[cloudevents]") {
  CHECK(TypeError(std::string("Loan\0X", 6)) ==
        "cloudevents: event_type is not a CloudEvents string: byte 5 is a control character "
        "(0x00)");
  CHECK(TypeError("Loan\nX") ==
        "cloudevents: event_type is not a CloudEvents string: byte 5 is a control character "
        "(0x0a)");
  CHECK(TypeError("A\x7f") ==
        "cloudevents: event_type is not a CloudEvents string: byte 2 is a control character "
        "(0x7f)");
  CHECK(TypeError("A\xC2\x85") ==
        "cloudevents: event_type is not a CloudEvents string: byte 2 is a control character "
        "(U+0085)");
  CHECK(TypeError("\xC3\x28") ==
        "cloudevents: event_type is not a CloudEvents string: byte 2 is not UTF-8 (0x28)");
  CHECK(TypeError("\xFF") ==
        "cloudevents: event_type is not a CloudEvents string: byte 1 is not UTF-8 (0xff)");
  CHECK(TypeError("\xC0\xAF") ==  // an overlong '/'
        "cloudevents: event_type is not a CloudEvents string: byte 1 is not UTF-8 (0xc0)");
  CHECK(TypeError("\xE0\x80\xAF") ==  // overlong in three bytes
        "cloudevents: event_type is not a CloudEvents string: byte 1 is not UTF-8 (0xe0)");
  CHECK(TypeError("\xED\xA0\x80") ==  // a UTF-16 surrogate
        "cloudevents: event_type is not a CloudEvents string: byte 1 is not UTF-8 (0xed)");
  CHECK(TypeError("ab\xE2\x82") ==
        "cloudevents: event_type is not a CloudEvents string: byte 3 starts a UTF-8 sequence cut "
        "short");
  CHECK(TypeError("") == "cloudevents: event_type is empty (ce_type is required)");
  CHECK(TypeError("\xE2\x82\xAC\xF0\x9F\x98\x80").empty());  // a euro sign and an emoji
}

TEST_CASE("CloudEventsHeaders refuses an empty event id and a time RFC 3339 cannot write and "
          "sends no ce_subject for an empty aggregate",
          "[cloudevents]") {
  outbox::OutboxEvent event = outbox::testing::MakeEvent(7);
  event.event_id.clear();
  CHECK(CloudEventsHeaders(RowOf(event), "/s").error ==
        "cloudevents: event_id is empty (ce_id is required)");
  event = outbox::testing::MakeEvent(7);
  event.created_at_ms = std::numeric_limits<std::int64_t>::max();
  CHECK(CloudEventsHeaders(RowOf(event), "/s").error ==
        "cloudevents: created_at 9223372036854775807 ms is outside the years 0000-9999 of RFC "
        "3339");
  event = outbox::testing::MakeEvent(7);
  event.aggregate_id.clear();
  const auto parsed = CloudEventsHeaders(RowOf(event), "/s");
  REQUIRE(parsed.ok());
  for (const RecordHeader& h : parsed.headers) CHECK(h.name != "ce_subject");
  CHECK(parsed.headers.size() == 5);
}

TEST_CASE("CloudEventsHeaders answers every two-byte event type with headers or one error line",
          "[cloudevents]") {
  outbox::OutboxEvent event = outbox::testing::MakeEvent(7);
  int refused = 0;
  for (int a = 0; a < 256; ++a)
    for (int b = 0; b < 256; ++b) {
      event.event_type = {static_cast<char>(a), static_cast<char>(b)};
      const auto parsed = CloudEventsHeaders(RowOf(event), "/s");
      if (parsed.ok()) {
        REQUIRE(parsed.headers.at(3).value == event.event_type);  // never altered
      } else {
        ++refused;
        REQUIRE(parsed.headers.empty());
        REQUIRE(parsed.error.find('\n') == std::string::npos);
        REQUIRE(parsed.error.find(event.event_type) == std::string::npos);
      }
    }
  // Accepted: 95 x 95 printable ASCII pairs and the 1,888 two-byte UTF-8 characters U+00A0-U+07FF.
  CHECK(65536 - refused == 95 * 95 + 1888);
}

TEST_CASE("CloudEventsSourceProblem takes a URI reference and refuses empty spaces and non-ASCII",
          "[cloudevents]") {
  CHECK(outbox::CloudEventsSourceProblem("/outbox-lab/relay").empty());
  CHECK(outbox::CloudEventsSourceProblem("urn:loans:svc").empty());
  CHECK(outbox::CloudEventsSourceProblem("") ==
        "a CloudEvents source cannot be empty (it is required)");
  CHECK(outbox::CloudEventsSourceProblem("/a b") ==
        "a CloudEvents source is a URI reference: printable ASCII without spaces (byte 3 is "
        "0x20)");
  CHECK(outbox::CloudEventsSourceProblem("/\xC3\xA9") ==
        "a CloudEvents source is a URI reference: printable ASCII without spaces (byte 2 is "
        "0xc3)");
  CHECK(outbox::CloudEventsSourceProblem(std::string(4097, 'a')) ==
        "a CloudEvents source has at most 4096 bytes, got 4097");
}

TEST_CASE("RouteRow puts the CloudEvents headers before the application's traceparent and refuses "
          "an application ce_id",
          "[cloudevents]") {
  constexpr const char* kTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  outbox::OutboxEvent event = outbox::testing::MakeEvent(7);
  event.headers = std::string(R"({"traceparent":")") + kTraceparent + R"(","ce_tenant":"acme"})";
  auto routed = outbox::RouteRow(RowOf(event), nullptr, outbox::HeaderConvention::kCloudEvents,
                                 "/s");
  REQUIRE(routed.ok());
  REQUIRE(routed.message.headers.size() == 8);
  CHECK(routed.message.headers[0] == RecordHeader{"ce_specversion", "1.0"});
  CHECK(routed.message.headers[6] == RecordHeader{"traceparent", kTraceparent});
  CHECK(routed.message.headers[7] == RecordHeader{"ce_tenant", "acme"});  // an extension: passes
  CHECK(routed.message.topic.empty());
  routed = outbox::RouteRow(RowOf(event), nullptr, outbox::HeaderConvention::kLab, "/s");
  REQUIRE(routed.ok());
  CHECK(routed.message.headers.size() == 2);

  event.headers = R"({"ce_id":"forged"})";
  routed = outbox::RouteRow(RowOf(event), nullptr, outbox::HeaderConvention::kCloudEvents, "/s");
  CHECK(routed.error ==
        "headers column: \"ce_id\" is a header the relay sets itself (--headers cloudevents)");
  // Without the convention a ce_id is the application's own header.
  routed = outbox::RouteRow(RowOf(event), nullptr, outbox::HeaderConvention::kLab, "/s");
  CHECK(routed.ok());
}

TEST_CASE("ParseHeaderConvention takes lab and cloudevents only", "[cloudevents]") {
  CHECK(outbox::ParseHeaderConvention("lab") == outbox::HeaderConvention::kLab);
  CHECK(outbox::ParseHeaderConvention("cloudevents") == outbox::HeaderConvention::kCloudEvents);
  CHECK_THROWS_AS(outbox::ParseHeaderConvention("CloudEvents"), outbox::ConfigError);
}
