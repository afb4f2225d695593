// Publisher: the seam between the relay and the broker.
//
// The relay depends only on this interface, so tests swap in a fake and the
// lab plugs in KafkaPublisher. Implementations need not be thread-safe.
#pragma once

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
};

}  // namespace outbox
