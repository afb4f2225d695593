#include "outbox/per_row_relay.h"

#include <fmt/format.h>

#include <optional>

#include "outbox/error.h"
#include "outbox/failpoint.h"
#include "outbox/record_headers.h"

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

PerRowRelayReport RunPerRowRelay(OutboxStore& store, Publisher& publisher,
                                   const PerRowRelayOptions& options,
                                   const std::function<void(const PerRowRelayStep&)>& on_step,
                                   const std::function<bool()>& stop_requested) {
  if (options.limit <= 0)
    throw ConfigError(fmt::format("relay limit {}: must be at least 1", options.limit));
  PerRowRelayReport report;
  for (OutboxRow& row : store.FetchUnpublished(std::nullopt, options.limit)) {
    if (stop_requested && stop_requested()) {
      report.stopped = true;
      break;
    }
    PerRowRelayStep step;
    ParsedHeaders headers = ParseRecordHeaders(row.event.headers);
    if (headers.ok()) {
      OutboundMessage message = MessageForRow(row);
      message.headers = std::move(headers.headers);
      step.delivery = publisher.Publish({message}).front();
    } else {
      // Not sent: the chapter's relay stops at a failed row, and this one can never succeed.
      step.delivery.outbox_id = row.id;
      step.delivery.error = std::move(headers.error);
    }
    if (!step.delivery.ok) {
      ++report.failed;
      step.row = std::move(row);
      if (on_step) on_step(step);
      break;
    }
    ++report.sent;
    if (options.mark) {
      HitFailpoint("relay.after_ack_before_mark");
      step.marked = store.MarkPublished(row.id);
      if (step.marked) ++report.marked;
      HitFailpoint("relay.after_mark");
    }
    step.row = std::move(row);
    if (on_step) on_step(step);
  }
  return report;
}

}  // namespace outbox
