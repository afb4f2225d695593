// The outbox's headers column: headers an application attaches to its event
// (W3C traceparent, a tenant id), sent as Kafka record headers beside the
// relay's own. The column is foreign input written by any program, so it is
// checked when the row is sent, and a bad value parks that row with the reason
// instead of stopping the relay (issue 9 §8). Pure functions, thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/event.h"

namespace outbox {

// Header names the relay sets on every record, and run_id, which main's
// publishers add per reset (issue 15). An application header may not reuse
// one: a consumer that reads the last "event_id" header (the idempotent
// consumer does) must get the relay's value, not a row's forgery.
inline constexpr std::array<std::string_view, 4> kRelayHeaderNames = {"event_id", "event_type",
                                                                      "outbox_id", "run_id"};

// The most application headers one record may carry, and the most bytes of their names and
// values together. Kafka sets no limit of its own, but every header travels in the record beside
// the payload under librdkafka's message.max.bytes (1,000,000 by default), and a record whose
// headers fill it cannot be read back whole: a row with 100,000 headers was acknowledged, then
// read without its run_id and judged lost. Past either limit the row is parked with the reason.
inline constexpr std::size_t kMaxRecordHeaders = 1000;
inline constexpr std::size_t kMaxRecordHeaderBytes = 100000;

struct ParsedHeaders {
  std::vector<RecordHeader> headers;  // in the object's order
  std::string error;                  // empty when the column is valid
  bool ok() const noexcept { return error.empty(); }
};

// Parses the headers column: empty (SQL NULL or '') means no headers;
// otherwise a JSON object (RFC 8259, UTF-8) whose every value is a string and
// whose names are non-empty and not in kRelayHeaderNames, with no NUL byte in the text, at
// most kMaxRecordHeaders entries and kMaxRecordHeaderBytes of names and values. On success returns
// the headers; on failure returns no headers and error, one line that never
// repeats the column's bytes (they may not be text), e.g.
//   headers column: invalid JSON at byte 7  (1-based)
//   headers column: invalid JSON: it ends after 10 bytes
//   headers column: the value of "tenant" is a number, not a string
//   headers column: 100000 headers, more than 1000
// Throws nothing on any input.
ParsedHeaders ParseRecordHeaders(const std::string& column) noexcept;

}  // namespace outbox
