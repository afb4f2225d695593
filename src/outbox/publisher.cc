#include "outbox/publisher.h"

#include <stdexcept>

namespace outbox {

std::vector<DeliveryResult> Publisher::AwaitOldest() {
  if (completed_.empty()) throw std::logic_error("AwaitOldest: no batch in flight");
  std::vector<DeliveryResult> results = std::move(completed_.front());
  completed_.pop_front();
  return results;
}

}  // namespace outbox
