#include "outbox/kafka/kafka_publisher.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>

#include "outbox/error.h"
#include "outbox/failpoint.h"

namespace outbox::kafka {
namespace {

constexpr int kFlushMarginMs = 5000;
constexpr int kQueueFullPollMs = 50;
constexpr int kReportPollMaxMs = 100;  // one poll's cap; it returns early on a report

}  // namespace

rd_kafka_resp_err_t ProduceOutboundMessage(rd_kafka_t* producer, const std::string& topic,
                                           const OutboundMessage& m, void* opaque,
                                           const std::string& run_id) noexcept {
  char outbox_id[24];
  const auto id_end = std::to_chars(outbox_id, outbox_id + sizeof outbox_id, m.outbox_id).ptr;
  for (;;) {
    const rd_kafka_resp_err_t err = rd_kafka_producev(
        producer, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_KEY(m.key.data(), m.key.size()),
        RD_KAFKA_V_VALUE(const_cast<char*>(m.payload.data()), m.payload.size()),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_HEADER("event_id", m.event_id.data(), static_cast<ssize_t>(m.event_id.size())),
        RD_KAFKA_V_HEADER("event_type", m.event_type.data(),
                          static_cast<ssize_t>(m.event_type.size())),
        RD_KAFKA_V_HEADER("outbox_id", outbox_id, static_cast<ssize_t>(id_end - outbox_id)),
        RD_KAFKA_V_HEADER("run_id", run_id.data(), static_cast<ssize_t>(run_id.size())),
        RD_KAFKA_V_OPAQUE(opaque), RD_KAFKA_V_END);
    if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) return err;
    rd_kafka_poll(producer, kQueueFullPollMs);  // serve delivery reports to make room
  }
}

KafkaPublisher::KafkaPublisher(const KafkaPublisherOptions& options)
    : topic_(options.topic), run_id_(options.run_id), delivery_timeout_ms_(options.delivery_timeout_ms) {
  if (options.delivery_timeout_ms <= 0)
    throw ConfigError(fmt::format("delivery timeout {} ms: must be positive", options.delivery_timeout_ms));
  std::vector<Property> properties = {
      {"bootstrap.servers", options.brokers},
      {"acks", "all"},
      {"message.timeout.ms", std::to_string(options.delivery_timeout_ms)},
      // Connection failures reach the user through LastClientError() in the
      // failure line; -X log_level=7 brings librdkafka's own log back.
      {"log_level", "2"},
  };
  properties.insert(properties.end(), options.properties.begin(), options.properties.end());
  ConfHandle conf = MakeConf(properties);
  rd_kafka_conf_set_dr_msg_cb(conf.get(), &KafkaPublisher::OnDelivery);
  rd_kafka_conf_set_error_cb(conf.get(), &KafkaPublisher::OnError);
  rd_kafka_conf_set_opaque(conf.get(), this);
  producer_ = MakeClient(RD_KAFKA_PRODUCER, std::move(conf));
}

void KafkaPublisher::OnDelivery(rd_kafka_t*, const rd_kafka_message_t* msg, void* opaque) noexcept {
  auto* self = static_cast<KafkaPublisher*>(opaque);
  auto* result = static_cast<DeliveryResult*>(msg->_private);
  if (!result) return;
  if (self->reports_pending_ > 0) --self->reports_pending_;
  result->partition = msg->partition;
  result->offset = msg->offset;
  result->ok = msg->err == RD_KAFKA_RESP_ERR_NO_ERROR;
  if (!result->ok) {
    try {
      result->error = DescribeError(msg->err);
    } catch (...) {
      // Out of memory: the result stays failed with no text.
    }
  }
}

void KafkaPublisher::OnError(rd_kafka_t*, int err, const char* reason, void* opaque) noexcept {
  auto* self = static_cast<KafkaPublisher*>(opaque);
  try {
    std::lock_guard lock(self->error_mutex_);
    self->last_client_error_ =
        fmt::format("{} ({})", reason, rd_kafka_err2name(static_cast<rd_kafka_resp_err_t>(err)));
  } catch (...) {
  }
}

std::string KafkaPublisher::LastClientError() const {
  std::lock_guard lock(error_mutex_);
  return last_client_error_;
}

std::vector<DeliveryResult> KafkaPublisher::Publish(const std::vector<OutboundMessage>& messages) {
  // Sized once: delivery reports hold pointers into it until flush returns.
  std::vector<DeliveryResult> results(messages.size());
  reports_pending_ = 0;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const OutboundMessage& m = messages[i];
    DeliveryResult& slot = results[i];
    slot.outbox_id = m.outbox_id;
    const rd_kafka_resp_err_t err = ProduceOutboundMessage(producer_.get(), topic_, m, &slot, run_id_);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
      ++reports_pending_;
    else
      slot.error = DescribeError(err);  // refused locally, e.g. _UNKNOWN_TOPIC
  }
  HitFailpoint("relay.after_produce");
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::milliseconds(delivery_timeout_ms_ + kFlushMarginMs);
  while (reports_pending_ > 0 && Clock::now() < deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    rd_kafka_poll(producer_.get(), static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, kReportPollMaxMs)));
  }
  if (reports_pending_ > 0) {
    // Never return while a report could still write into results.
    rd_kafka_purge(producer_.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_flush(producer_.get(), -1);
  }
  return results;
}

}  // namespace outbox::kafka
