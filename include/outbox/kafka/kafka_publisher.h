// KafkaPublisher: the Publisher backed by a librdkafka producer.
//
// Owns one rd_kafka_t. Publish() produces asynchronously and returns only
// after every message has its delivery report. Send() and AwaitOldest() keep
// several batches in flight; every batch's reports land in state the
// publisher owns until AwaitOldest() hands them out, and the destructor purges
// and collects whatever is still in flight, so no report outlives it.
// Not thread-safe.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/kafka/handles.h"
#include "outbox/publisher.h"

namespace outbox::kafka {

// Produces m to m.topic, or to topic when m.topic is empty, as the outbox sends every record, the one produce call
// of the lab (KafkaPublisher and the bench's raw producer): key, value, the
// headers event_id, event_type, outbox_id and run_id (m.run_id, or run_id when that is empty;
// an empty header when both are), then m.headers, bytes copied
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
  // librdkafka linger.ms, in ms (fractions allowed): how long the producer waits for more
  // messages before it sends a request. 0 (the default here; librdkafka's is 5) suits one
  // message at a time: the chapter's per-row loop waits for each ack, and any linger is added
  // to every row. A relay producing a batch of 1,000 at once sets kBatchLingerMs instead.
  double linger_ms = 0;
  // Applied after the defaults (acks=all, linger.ms) so they win (-X name=value).
  std::vector<Property> properties;
  // Sent as header "run_id" on every record: Store::RunId() of the database
  // the records come from, so readers can count one run's records apart.
  std::string run_id;
  // Optional: called with each statistics document librdkafka emits (JSON,
  // librdkafka's STATISTICS.md: e.g. "tx_bytes", the bytes sent to the
  // brokers) every statistics.interval.ms, which a property must set above 0
  // (librdkafka's default 0 emits none). It runs inside rd_kafka_poll on the
  // thread calling Publish / AwaitOldest; an exception it throws is dropped
  // (none crosses the C callback).
  std::function<void(std::string_view json)> on_statistics;
};

// linger.ms for a publisher that sends batches (the relay): with linger.ms=0 every produce call
// wakes librdkafka's broker thread to send what is queued, so a batch of 1,000 went out in many
// small requests and cost ~10,000 context switches per 200,000 events (a 200,000-row drain:
// 8,835 and 9,883 involuntary switches at 0 against 1,387 and 1,267 at 1 ms). 1 ms is below
// the pipeline's wait for the previous batch's acks, so it adds at most 1 ms to a batch.
inline constexpr double kBatchLingerMs = 1;

class KafkaPublisher : public Publisher {
 public:
  // Throws ConfigError for an unknown or invalid property, and for acks=0 (or
  // request.required.acks=0): librdkafka then reports a record delivered without any
  // acknowledgement from the broker (librdkafka CONFIGURATION.md, acks), which the outbox's
  // mark-after-ack rule cannot rest on.
  explicit KafkaPublisher(const KafkaPublisherOptions& options);

  // Purges and collects the reports of batches still in flight (bounded by
  // the delivery timeout), so no report writes into freed memory.
  ~KafkaPublisher() override;
  KafkaPublisher(const KafkaPublisher&) = delete;
  KafkaPublisher& operator=(const KafkaPublisher&) = delete;

  // See Publisher::Publish: Send, then AwaitOldest. Call it with no batch in
  // flight (throws std::logic_error otherwise: it would return older reports).
  std::vector<DeliveryResult> Publish(const std::vector<OutboundMessage>& messages) override;

  // See Publisher::Send. Produces every message (a message librdkafka refuses
  // locally, e.g. _UNKNOWN_TOPIC, gets a failed result at once), then passes
  // the failpoint relay.after_produce. Throws KafkaError as Publish.
  void Send(const std::vector<OutboundMessage>& messages) override;

  // See Publisher::AwaitOldest. Waits for the oldest batch's own delivery
  // reports by polling (rd_kafka_poll returns as soon as a report arrives),
  // not with rd_kafka_flush, whose wait has ~10 ms granularity. Waits at most
  // about delivery_timeout_ms plus 5 s after that batch's Send; when messages
  // are still without a report then, every message in flight (of every batch)
  // is purged and reported failed. Once the producer has a fatal error
  // (rd_kafka_fatal_error: it can send nothing more, librdkafka INTRODUCTION.md
  // "Fatal errors"), every failed result carries producer_fatal and an error
  // naming the fatal error, not the message's own _FATAL. A failure that is not
  // the message's (ClassifyDeliveryError, delivery_errors.h: timeouts, purges,
  // unreachable brokers) carries outage. When the client saw a connectivity error
  // since the last ack (error_cb), its error reads "<cause>; the message: <its own
  // error>", e.g. "all brokers down (_ALL_BROKERS_DOWN); the message: Local: Message
  // timed out (_MSG_TIMED_OUT)", and the relay names the outage by the cause;
  // otherwise it is the message's own error alone.
  std::vector<DeliveryResult> AwaitOldest() override;

  std::size_t InFlight() const override { return in_flight_.size(); }

  // The last error librdkafka reported through error_cb (e.g. "Connect to
  // ipv4#127.0.0.1:1 failed: Connection refused"), or empty.
  std::string LastClientError() const;

  rd_kafka_t* handle() const noexcept { return producer_.get(); }

 private:
  static void OnDelivery(rd_kafka_t* rk, const rd_kafka_message_t* msg, void* opaque) noexcept;
  static void OnError(rd_kafka_t* rk, int err, const char* reason, void* opaque) noexcept;
  static int OnStatistics(rd_kafka_t* rk, char* json, std::size_t json_len, void* opaque) noexcept;

  struct InFlightBatch;
  // One message's report: where dr_msg_cb writes it, and the batch it counts against.
  struct Slot {
    DeliveryResult result;
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;  // the report's or the local refusal's
    InFlightBatch* batch = nullptr;
  };
  struct InFlightBatch {
    std::vector<Slot> slots;        // sized once: reports hold pointers into it
    std::size_t reports_pending = 0;
    std::chrono::steady_clock::time_point deadline;
  };
  // Purges everything in flight and serves the resulting reports.
  void PurgeInFlight();
  // Before the first produce: asks the broker for the topic's metadata
  // (rd_kafka_metadata, at most 2 s or the delivery timeout). Without it the
  // first batch waits in librdkafka's queue for unassigned messages, and the
  // broker thread that should send it once the partition is known sleeps up
  // to 1 s: measured, `relay --until-empty` of 10 rows took 1.03 s, the
  // batch loop (rd_kafka_flush wakes the broker threads) 0.07 s.
  // A failure is ignored: the produce then waits as before.
  // topic: the first message's (OutboundMessage::topic, a routed run), else topic_: asking for
  // topic_ when no record goes there would let a broker auto-create it empty.
  void LearnTopicOnce(const std::string& topic);
  bool topic_known_ = false;

  std::string topic_;
  std::string run_id_;
  std::function<void(std::string_view)> on_statistics_;
  int delivery_timeout_ms_;
  mutable std::mutex error_mutex_;  // error_cb may run on a librdkafka thread
  std::string last_client_error_;
  // The last connectivity error (IsConnectivityError) error_cb saw since the last ack, and its
  // reason; NO_ERROR when none. Guarded by error_mutex_.
  rd_kafka_resp_err_t connectivity_error_ = RD_KAFKA_RESP_ERR_NO_ERROR;
  std::string connectivity_reason_;
  // Batches sent and not yet awaited, oldest first. dr_msg_cb runs inside
  // rd_kafka_poll/flush on the calling thread, so no lock is needed.
  std::deque<std::unique_ptr<InFlightBatch>> in_flight_;
  // Declared last so it is destroyed first: callbacks write into the members above.
  KafkaHandle producer_;
};

}  // namespace outbox::kafka
