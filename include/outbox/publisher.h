// Publisher: the seam between the relay and the broker.
//
// The relay depends only on this interface, so tests swap in a fake and the
// lab plugs in KafkaPublisher. Implementations need not be thread-safe.
//
// Two ways to send. Publish() sends a batch and waits for its reports. Send()
// and AwaitOldest() split the same work so that a relay can keep several
// batches in flight (a pipeline): Send() returns once the batch is handed to
// the client, AwaitOldest() waits for the reports of the oldest batch not yet
// awaited. The default Send() simply calls Publish() and keeps its results,
// so a publisher that only implements Publish() works in a pipeline too, one
// batch at a time.
#pragma once

#include <cstddef>
#include <deque>
#include <vector>

#include "outbox/event.h"

namespace outbox {

class Publisher {
 public:
  virtual ~Publisher() = default;

  // Sends every message and waits for every delivery report.
  // Returns one DeliveryResult per message, in the same order; a failed or
  // timed-out delivery is a result with ok=false, never an exception.
  // Throws KafkaError only when the client itself cannot work (e.g. produce
  // rejected by a full local queue after the delivery timeout).
  virtual std::vector<DeliveryResult> Publish(
      const std::vector<OutboundMessage>& messages) = 0;

  // Starts sending messages (the batch goes behind every batch sent before);
  // their reports are collected by AwaitOldest(). Throws what Publish throws.
  virtual void Send(const std::vector<OutboundMessage>& messages) {
    completed_.push_back(Publish(messages));
  }

  // Waits for every delivery report of the oldest batch given to Send() and
  // not yet awaited, and returns them as Publish would. Never returns before
  // the last report of that batch is in (or its deadline purged it), so
  // results never change after the call. Throws std::logic_error when no
  // batch is in flight; KafkaError as Publish.
  virtual std::vector<DeliveryResult> AwaitOldest();

  // Batches given to Send() and not yet awaited.
  virtual std::size_t InFlight() const { return completed_.size(); }

 private:
  std::deque<std::vector<DeliveryResult>> completed_;  // the default Send's results
};

}  // namespace outbox
