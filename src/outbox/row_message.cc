#include "outbox/row_message.h"

#include "outbox/per_row_relay.h"
#include "outbox/record_headers.h"

namespace outbox {

RoutedMessage RouteRow(const OutboxRow& row, const TopicTemplate* topic_template,
                       HeaderConvention headers, std::string_view ce_source) noexcept {
  RoutedMessage routed;
  try {
    ParsedHeaders application = ParseRecordHeaders(row.event.headers);
    if (!application.ok()) {
      routed.error = std::move(application.error);
      return routed;
    }
    std::vector<RecordHeader> sent;
    if (headers == HeaderConvention::kCloudEvents) {
      routed.error = CloudEventsCollision(application.headers);
      if (!routed.ok()) return routed;
      ParsedHeaders cloud = CloudEventsHeaders(row, ce_source);
      if (!cloud.ok()) {
        routed.error = std::move(cloud.error);
        return routed;
      }
      sent = std::move(cloud.headers);
    }
    // A traceparent (or any header) the application wrote goes out as written.
    for (RecordHeader& h : application.headers) sent.push_back(std::move(h));
    std::string topic;
    if (topic_template) {
      RoutedTopic to = topic_template->Render(row.event);
      if (!to.ok()) {
        routed.error = std::move(to.error);
        return routed;
      }
      topic = std::move(to.topic);
    }
    routed.message = MessageForRow(row);
    routed.message.headers = std::move(sent);
    routed.message.topic = std::move(topic);
  } catch (const std::exception& e) {
    routed.message = {};
    routed.error = std::string("the row's record cannot be built: ") + e.what();  // out of memory
  }
  return routed;
}

}  // namespace outbox
