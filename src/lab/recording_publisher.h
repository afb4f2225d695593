// RecordingPublisher: a Publisher decorator that writes a "send" invoke per
// message before producing and an ok/fail per delivery report after.
#pragma once

#include "lab/history.h"
#include "outbox/publisher.h"

namespace outbox::lab {

class RecordingPublisher : public Publisher {
 public:
  // inner and history must outlive this object; history may be null (no-op).
  RecordingPublisher(Publisher& inner, History* history) : inner_(inner), history_(history) {}

  std::vector<DeliveryResult> Publish(const std::vector<OutboundMessage>& messages) override {
    for (const auto& m : messages) Note(history_, "invoke", "send", m.event_id);
    std::vector<DeliveryResult> results = inner_.Publish(messages);
    for (std::size_t i = 0; i < results.size(); ++i)
      Note(history_, results[i].ok ? "ok" : "fail", "send", messages[i].event_id, results[i].error);
    return results;
  }

 private:
  Publisher& inner_;
  History* history_;
};

}  // namespace outbox::lab
