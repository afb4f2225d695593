// The record the production relay (Relay) sends for an outbox row: MessageForRow's key, value
// and headers, the application's headers column (ParseRecordHeaders), the CloudEvents headers
// under --headers cloudevents (CloudEventsHeaders) and the row's topic under --topic-template
// (TopicTemplate::Render). Every part that reads the row's untrusted fields is checked here, so
// a bad row becomes one error line for its parking, never an exception. Pure; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "outbox/cloud_events.h"
#include "outbox/event.h"
#include "outbox/topic_template.h"

namespace outbox {

struct RoutedMessage {
  OutboundMessage message;  // complete but for run_id and the key choice (the relay's)
  std::string error;        // empty when the row can be sent
  bool ok() const noexcept { return error.empty(); }
};

// The message for row. topic_template: null sends to the publisher's topic (message.topic
// empty). headers: under kCloudEvents, message.headers holds CloudEventsHeaders(row,
// ce_source) first, then the application's headers in the column's order. Returns error, and
// no message, when the headers column is bad (ParseRecordHeaders), when it names a header the
// CloudEvents convention sets (CloudEventsCollision), when the row cannot make a CloudEvent, or
// when its topic would be illegal; the first of these found. Throws nothing. Decides nothing
// from the payload, which it only copies into the message (Relay::SendRows moves it in instead).
RoutedMessage RouteRow(const OutboxRow& row, const TopicTemplate* topic_template,
                       HeaderConvention headers, std::string_view ce_source) noexcept;

}  // namespace outbox
