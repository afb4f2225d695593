// PerRowRelay: the chapter's relay, kept as the teaching baseline (chapter 7.1, 轮询发布器):
// for each unpublished row in id order, send with key = event id, wait for
// the broker's ack, then mark the row published in its own transaction.
//
// At-least-once: a crash after the ack and before the mark re-sends the row
// on the next run (chapter 7.1, decision 3). Marking before the ack would
// lose the event instead (decision 1).
#pragma once

#include <cstdint>
#include <functional>

#include "outbox/publisher.h"
#include "outbox/store.h"

namespace outbox {

struct PerRowRelayOptions {
  std::int64_t limit = 0;  // rows to send at most (publish N); must be > 0
  bool mark = true;        // false for publish-hold: send and ack, never mark
};

// What happened to one row, reported as soon as it is settled.
struct PerRowRelayStep {
  OutboxRow row;
  DeliveryResult delivery;
  bool marked = false;
};

struct PerRowRelayReport {
  std::int64_t sent = 0;    // rows the broker acknowledged
  std::int64_t marked = 0;  // rows this run marked published
  std::int64_t failed = 0;  // 0 or 1: the run stops at the first failed delivery
  bool stopped = false;     // ended early because stop_requested said so
};

// The record for a row: key and event_id header = event id. Without the
// application's headers: the caller parses row.event.headers
// (ParseRecordHeaders) and refuses the row when they are bad.
OutboundMessage MessageForRow(const OutboxRow& row);

// Runs the chapter's loop once over up to options.limit unpublished rows.
// Calls on_step after each row is settled (acked and marked, or failed).
// Before each row asks stop_requested (when not empty) and stops when it says
// true, so a stop request (say SIGINT) never cuts a row between its ack and
// its mark.
// Stops at the first failed delivery, leaving that row and every later one
// unpublished, as the chapter's send().get() would by throwing. A row whose
// headers column is bad (ParseRecordHeaders) is not sent and fails the same
// way, with the reason as its delivery error.
// Throws ConfigError when options.limit <= 0 (SQLite would read a negative
// LIMIT as "no limit"), DbError when reading or marking fails (the row then stays
// unpublished and will be re-sent: a duplicate, never a loss).
PerRowRelayReport RunPerRowRelay(OutboxStore& store, Publisher& publisher,
                                   const PerRowRelayOptions& options,
                                   const std::function<void(const PerRowRelayStep&)>& on_step,
                                   const std::function<bool()>& stop_requested = {});

}  // namespace outbox
