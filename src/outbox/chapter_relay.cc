#include "outbox/chapter_relay.h"

namespace outbox {

OutboundMessage MessageForRow(const OutboxRow& row) {
  OutboundMessage message;
  message.outbox_id = row.id;
  message.key = row.event.event_id;
  message.payload = row.event.payload;
  message.event_id = row.event.event_id;
  message.event_type = row.event.event_type;
  return message;
}

ChapterRelayReport RunChapterRelay(Store& store, Publisher& publisher,
                                   const ChapterRelayOptions& options,
                                   const std::function<void(const ChapterRelayStep&)>& on_step) {
  ChapterRelayReport report;
  for (OutboxRow& row : store.FetchUnpublished(0, options.limit)) {
    ChapterRelayStep step;
    step.delivery = publisher.Publish({MessageForRow(row)}).front();
    if (!step.delivery.ok) {
      ++report.failed;
      step.row = std::move(row);
      if (on_step) on_step(step);
      break;
    }
    ++report.sent;
    if (options.mark && store.MarkPublished(row.id)) {
      step.marked = true;
      ++report.marked;
    }
    step.row = std::move(row);
    if (on_step) on_step(step);
  }
  return report;
}

}  // namespace outbox
