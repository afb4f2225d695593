// KafkaPublisher: the Publisher backed by a librdkafka producer.
//
// Owns one rd_kafka_t. Publish() produces asynchronously and returns only
// after every message has its delivery report, so no report can outlive the
// call. Not thread-safe.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "outbox/kafka/handles.h"
#include "outbox/publisher.h"

namespace outbox::kafka {

// Produces m to topic as the outbox sends every record, the one produce call
// of the lab (KafkaPublisher and the bench's raw producer): key, value and the
// headers event_id, event_type, outbox_id and run_id (empty when run_id is), bytes copied
// (RD_KAFKA_MSG_F_COPY); opaque reaches the delivery report as msg->_private.
// While librdkafka's local queue is full it serves delivery reports
// (rd_kafka_poll, 50 ms) and tries again. Returns RD_KAFKA_RESP_ERR_NO_ERROR
// or the local refusal (e.g. _UNKNOWN_TOPIC); the delivery itself is reported
// later, through the producer's dr_msg_cb.
rd_kafka_resp_err_t ProduceOutboundMessage(rd_kafka_t* producer, const std::string& topic,
                                           const OutboundMessage& m, void* opaque,
                                           const std::string& run_id = {}) noexcept;

struct KafkaPublisherOptions {
  std::string brokers;  // bootstrap.servers, e.g. "127.0.0.1:9092"
  std::string topic;
  // librdkafka message.timeout.ms: how long a message may wait for its ack,
  // including retries, before its delivery report says _MSG_TIMED_OUT, in ms.
  // The chapter waits 10 s per send (send().get(10, SECONDS)).
  int delivery_timeout_ms = 10000;
  // Applied after the defaults above and acks=all, so they win (-X name=value).
  std::vector<Property> properties;
  // Sent as header "run_id" on every record: Store::RunId() of the database
  // the records come from, so readers can count one run's records apart.
  std::string run_id;
};

class KafkaPublisher : public Publisher {
 public:
  // Throws ConfigError for an unknown or invalid property.
  explicit KafkaPublisher(const KafkaPublisherOptions& options);

  // See Publisher::Publish. Waits for this batch's own delivery reports by
  // polling (rd_kafka_poll returns as soon as a report arrives), not with
  // rd_kafka_flush, whose wait has ~10 ms granularity. Waits at most about
  // delivery_timeout_ms plus 5 s; messages still without a report then are
  // purged and reported failed.
  std::vector<DeliveryResult> Publish(const std::vector<OutboundMessage>& messages) override;

  // The last error librdkafka reported through error_cb (e.g. "Connect to
  // ipv4#127.0.0.1:1 failed: Connection refused"), or empty.
  std::string LastClientError() const;

  rd_kafka_t* handle() const noexcept { return producer_.get(); }

 private:
  static void OnDelivery(rd_kafka_t* rk, const rd_kafka_message_t* msg, void* opaque) noexcept;
  static void OnError(rd_kafka_t* rk, int err, const char* reason, void* opaque) noexcept;

  std::string topic_;
  std::string run_id_;
  int delivery_timeout_ms_;
  mutable std::mutex error_mutex_;  // error_cb may run on a librdkafka thread
  std::string last_client_error_;
  // Delivery reports of the current Publish() not yet served; dr_msg_cb runs
  // inside rd_kafka_poll/flush on the calling thread, so no lock is needed.
  std::size_t reports_pending_ = 0;
  // Declared last so it is destroyed first: callbacks write into the members above.
  KafkaHandle producer_;
};

}  // namespace outbox::kafka
