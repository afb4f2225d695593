// RecordingPublisher: a Publisher decorator that writes a "send" invoke per
// message before producing and an ok/fail per delivery report after, for
// Publish and for pipelined Send/AwaitOldest alike.
#pragma once

#include <deque>
#include <string>

#include "lab/chapter/history.h"
#include "outbox/publisher.h"

namespace outbox::lab {

class RecordingPublisher : public Publisher {
 public:
  // inner and history must outlive this object; history may be null (no-op).
  RecordingPublisher(Publisher& inner, History* history) : inner_(inner), history_(history) {}

  std::vector<DeliveryResult> Publish(const std::vector<OutboundMessage>& messages) override {
    Send(messages);
    return AwaitOldest();
  }

  void Send(const std::vector<OutboundMessage>& messages) override {
    std::vector<std::string> event_ids;
    event_ids.reserve(messages.size());
    for (const auto& m : messages) {
      Note(history_, "invoke", "send", m.event_id);
      event_ids.push_back(m.event_id);
    }
    inner_.Send(messages);
    event_ids_.push_back(std::move(event_ids));
  }

  std::vector<DeliveryResult> AwaitOldest() override {
    std::vector<DeliveryResult> results = inner_.AwaitOldest();
    const std::vector<std::string> event_ids = std::move(event_ids_.front());
    event_ids_.pop_front();
    for (std::size_t i = 0; i < results.size(); ++i)
      Note(history_, results[i].ok ? "ok" : "fail", "send", event_ids[i], results[i].error);
    return results;
  }

  std::size_t InFlight() const override { return inner_.InFlight(); }

 private:
  Publisher& inner_;
  History* history_;
  std::deque<std::vector<std::string>> event_ids_;  // per batch in flight, oldest first
};

}  // namespace outbox::lab
