// CloudEvents headers for relay --headers cloudevents: the Kafka protocol binding's binary
// content mode (CloudEvents 1.0, "Kafka Protocol Binding for CloudEvents" section 3.2,
// https://github.com/cloudevents/spec/blob/v1.0.2/cloudevents/bindings/kafka-protocol-binding.md):
// the record value stays the event's data (the payload, unchanged) and each context attribute
// travels as a record header named "ce_" + the attribute, its value the attribute's canonical
// string (spec.md "Type System"), UTF-8. The relay sends them beside its own headers (event_id,
// event_type, outbox_id, run_id), so a consumer of either convention reads the same record.
//
// The row is foreign input: the fields that become attributes are checked here, and a row that
// cannot make a valid CloudEvent is refused with the reason (the relay parks it) instead of being
// sent with an altered id or type. Pure functions, thread-safe, never throw.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "outbox/event.h"
#include "outbox/record_headers.h"

namespace outbox {

// Which record headers the relay adds to its own (relay --headers).
enum class HeaderConvention {
  kLab,          // the lab's headers only: event_id, event_type, outbox_id, run_id
  kCloudEvents,  // and the CloudEvents binary-mode headers (CloudEventsHeaders)
};

// "lab" | "cloudevents". Throws ConfigError on anything else.
HeaderConvention ParseHeaderConvention(const std::string& text);

// The headers CloudEventsHeaders sets, in the order it sets them. An application header of the
// same name is refused (the row is parked): a consumer must get the relay's ce_id, as its
// event_id. Other "ce_" names (CloudEvents extension attributes) pass as the application wrote
// them.
inline constexpr std::array<std::string_view, 6> kCloudEventsHeaderNames = {
    "ce_specversion", "ce_id", "ce_source", "ce_type", "ce_subject", "ce_time"};

// The CloudEvents source of this lab's events unless relay --ce-source names another: a URI
// reference (RFC 3986) naming the producing context, here the lab's outbox relay.
inline constexpr std::string_view kDefaultCloudEventsSource = "/outbox-lab/relay";

// "" when source is a usable ce_source: non-empty, at most 4096 bytes, printable ASCII without
// spaces (a URI reference, RFC 3986, in its encoded form). Otherwise one line saying why, e.g.
//   a CloudEvents source is a URI reference: printable ASCII without spaces (byte 4 is 0x20)
std::string CloudEventsSourceProblem(std::string_view source);

// ms since the Unix epoch as an RFC 3339 UTC timestamp with milliseconds, e.g.
// 1764673470123 -> "2025-12-02T11:04:30.123Z" (proleptic Gregorian calendar, no leap seconds,
// as POSIX time). Returns "" for a time outside the years 0000-9999, which RFC 3339 cannot write.
std::string Rfc3339FromEpochMs(std::int64_t epoch_ms);

// The CloudEvents headers of row (CloudEvents 1.0 required attributes id, source, specversion,
// type; optional subject and time):
//   ce_specversion "1.0"
//   ce_id          the event id          (row.event.event_id)
//   ce_source      source                (checked by the caller: CloudEventsSourceProblem)
//   ce_type        the event type        (row.event.event_type)
//   ce_subject     the aggregate id      (row.event.aggregate_id)
//   ce_time        the row's creation    (row.event.created_at_ms, Rfc3339FromEpochMs)
// The values are the row's bytes, never escaped or altered: ce_id must equal event_id for a
// consumer deduplicating on either. A field that cannot be a CloudEvents String (spec.md "Type
// System": Unicode characters, so valid UTF-8 without the control characters U+0000-U+001F and
// U+007F-U+009F) or is empty where the attribute is required, or a creation time RFC 3339
// cannot write, fails the row: no headers and error, one line that names the field and the
// offending byte's position but never repeats the row's bytes, e.g.
//   cloudevents: event_type is not a CloudEvents string: byte 5 is a control character (0x00)
//   cloudevents: event_id is empty (ce_id is required)
// A subject is optional, but an empty aggregate id is sent as no ce_subject rather than an
// empty one (the outbox contract forbids it; a row written past that contract still flows).
ParsedHeaders CloudEventsHeaders(const OutboxRow& row, std::string_view source) noexcept;

// "" when none of headers (the application's, ParseRecordHeaders) is named as one of
// kCloudEventsHeaderNames, else the headers-column error for the first one, e.g.
//   headers column: "ce_id" is a header the relay sets itself (--headers cloudevents)
std::string CloudEventsCollision(const std::vector<RecordHeader>& headers) noexcept;

}  // namespace outbox
