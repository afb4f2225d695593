#include "outbox/kafka/kafka_publisher.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <stdexcept>

#include "outbox/error.h"
#include "outbox/failpoint.h"
#include "outbox/kafka/delivery_errors.h"

namespace outbox::kafka {
namespace {

constexpr int kFlushMarginMs = 5000;
constexpr int kQueueFullPollMs = 50;
constexpr int kReportPollMaxMs = 100;  // one poll's cap; it returns early on a report
// The first batch's wait for the topic's metadata, at most (LearnTopicOnce).
constexpr int kTopicMetadataMaxMs = 2000;

}  // namespace

rd_kafka_resp_err_t ProduceOutboundMessage(rd_kafka_t* producer, const std::string& topic,
                                           const OutboundMessage& m, void* opaque,
                                           const std::string& run_id) noexcept {
  char outbox_id[24];
  const auto id_end = std::to_chars(outbox_id, outbox_id + sizeof outbox_id, m.outbox_id).ptr;
  // One header list for the relay's headers and the application's (RD_KAFKA_V_HEADER cannot be
  // mixed with RD_KAFKA_V_HEADERS); rd_kafka_header_add copies. producev takes the list only
  // when it accepts the message: until then the handle owns it.
  HeadersHandle headers(rd_kafka_headers_new(4 + m.headers.size()));
  rd_kafka_header_add(headers.get(), "event_id", -1, m.event_id.data(),
                      static_cast<ssize_t>(m.event_id.size()));
  rd_kafka_header_add(headers.get(), "event_type", -1, m.event_type.data(),
                      static_cast<ssize_t>(m.event_type.size()));
  rd_kafka_header_add(headers.get(), "outbox_id", -1, outbox_id,
                      static_cast<ssize_t>(id_end - outbox_id));
  // The run's id (Store::RunId), so check counts this run's records apart from others': the
  // message's own when the relay read it with the row, else the publisher's.
  const std::string& run = m.run_id.empty() ? run_id : m.run_id;
  rd_kafka_header_add(headers.get(), "run_id", -1, run.data(), static_cast<ssize_t>(run.size()));
  for (const RecordHeader& h : m.headers)
    rd_kafka_header_add(headers.get(), h.name.data(), static_cast<ssize_t>(h.name.size()),
                        h.value.data(), static_cast<ssize_t>(h.value.size()));
  for (;;) {
    const rd_kafka_resp_err_t err = rd_kafka_producev(
        producer, RD_KAFKA_V_TOPIC(m.topic.empty() ? topic.c_str() : m.topic.c_str()),
        RD_KAFKA_V_KEY(m.key.data(), m.key.size()),
        RD_KAFKA_V_VALUE(const_cast<char*>(m.payload.data()), m.payload.size()),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(headers.get()),
        RD_KAFKA_V_OPAQUE(opaque), RD_KAFKA_V_END);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) headers.release();  // librdkafka owns the list now
    if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) return err;
    rd_kafka_poll(producer, kQueueFullPollMs);  // serve delivery reports to make room
  }
}

KafkaPublisher::KafkaPublisher(const KafkaPublisherOptions& options)
    : topic_(options.topic),
      run_id_(options.run_id),
      on_statistics_(options.on_statistics),
      delivery_timeout_ms_(options.delivery_timeout_ms) {
  if (options.delivery_timeout_ms <= 0)
    throw ConfigError(fmt::format("delivery timeout {} ms: must be positive", options.delivery_timeout_ms));
  if (!(options.linger_ms >= 0))
    throw ConfigError(fmt::format("linger {} ms: must be 0 or more", options.linger_ms));
  // librdkafka refuses message.timeout.ms <= linger.ms in its own words; say it in the lab's.
  if (static_cast<double>(options.delivery_timeout_ms) <= options.linger_ms)
    throw ConfigError(fmt::format("delivery timeout {} ms: must be longer than the linger of {} ms "
                                  "(--linger)",
                                  options.delivery_timeout_ms, options.linger_ms));
  std::vector<Property> properties = {
      {"bootstrap.servers", options.brokers},
      {"acks", "all"},
      // Publish and AwaitOldest wait for the batch right after producing it,
      // so lingering for more messages adds its time to every batch
      // (librdkafka's default is 5 ms; measured: a 100,000-row relay drain
      // went from about 24,000 to 30,000 events/s on the embedded broker).
      // The relay asks for kBatchLingerMs (options.linger_ms).
      {"linger.ms", fmt::format("{}", options.linger_ms)},
      {"message.timeout.ms", std::to_string(options.delivery_timeout_ms)},
      // Connection failures reach the user through LastClientError() in the
      // failure line; -X log_level=7 brings librdkafka's own log back.
      {"log_level", "2"},
  };
  for (const auto& [name, value] : options.properties)
    // With acks=0 librdkafka reports every record delivered without asking the broker (offset
    // -1001), and the outbox marks a row published only on the broker's acknowledgement.
    if ((name == "acks" || name == "request.required.acks") &&
        value.find_first_not_of(" 0") == std::string::npos && value.find('0') != std::string::npos)
      throw ConfigError(fmt::format(
          "librdkafka property '{}={}': the broker would acknowledge nothing, so a row would be "
          "marked published with no proof that its record arrived; use acks=all (the default) "
          "or acks=1",
          name, value));
  properties.insert(properties.end(), options.properties.begin(), options.properties.end());
  ConfHandle conf = MakeConf(properties);
  rd_kafka_conf_set_dr_msg_cb(conf.get(), &KafkaPublisher::OnDelivery);
  rd_kafka_conf_set_error_cb(conf.get(), &KafkaPublisher::OnError);
  if (on_statistics_) rd_kafka_conf_set_stats_cb(conf.get(), &KafkaPublisher::OnStatistics);
  rd_kafka_conf_set_opaque(conf.get(), this);
  producer_ = MakeClient(RD_KAFKA_PRODUCER, std::move(conf));
}

void KafkaPublisher::OnDelivery(rd_kafka_t* rk, const rd_kafka_message_t* msg, void*) noexcept {
  auto* slot = static_cast<Slot*>(msg->_private);
  if (!slot) return;
  if (slot->batch->reports_pending > 0) --slot->batch->reports_pending;
  DeliveryResult* result = &slot->result;
  result->partition = msg->partition;
  result->offset = msg->offset;
  result->ok = msg->err == RD_KAFKA_RESP_ERR_NO_ERROR;
  slot->err = msg->err;
  if (result->ok) {
    // A broker acknowledged: whatever connectivity error came before has passed.
    auto* self = static_cast<KafkaPublisher*>(rd_kafka_opaque(rk));
    try {
      std::lock_guard lock(self->error_mutex_);
      self->connectivity_error_ = RD_KAFKA_RESP_ERR_NO_ERROR;
      self->connectivity_reason_.clear();
    } catch (...) {
      // A mutex that cannot lock: the next outage may be named by an older error.
    }
  } else {
    try {
      result->error = DescribeError(msg->err);
    } catch (...) {
      // Out of memory: the result stays failed with no text.
    }
  }
}

int KafkaPublisher::OnStatistics(rd_kafka_t*, char* json, std::size_t json_len,
                                 void* opaque) noexcept {
  auto* self = static_cast<KafkaPublisher*>(opaque);
  try {
    self->on_statistics_(std::string_view(json, json_len));
  } catch (...) {
    // The hook's failure is its own; the producer goes on.
  }
  return 0;  // librdkafka frees json
}

void KafkaPublisher::OnError(rd_kafka_t*, int err, const char* reason, void* opaque) noexcept {
  auto* self = static_cast<KafkaPublisher*>(opaque);
  try {
    const auto code = static_cast<rd_kafka_resp_err_t>(err);
    std::lock_guard lock(self->error_mutex_);
    self->last_client_error_ = fmt::format("{} ({})", reason, rd_kafka_err2name(code));
    // All brokers down says the most; the reconnect failures that follow it say less.
    if (IsConnectivityError(code) &&
        (code == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN ||
         self->connectivity_error_ != RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)) {
      self->connectivity_error_ = code;
      self->connectivity_reason_ = reason;
    }
  } catch (...) {
  }
}

std::string KafkaPublisher::LastClientError() const {
  std::lock_guard lock(error_mutex_);
  return last_client_error_;
}

KafkaPublisher::~KafkaPublisher() {
  if (!in_flight_.empty()) PurgeInFlight();
}

void KafkaPublisher::PurgeInFlight() {
  rd_kafka_purge(producer_.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
  rd_kafka_flush(producer_.get(), -1);
}

std::vector<DeliveryResult> KafkaPublisher::Publish(const std::vector<OutboundMessage>& messages) {
  if (!in_flight_.empty())
    throw std::logic_error("KafkaPublisher::Publish: batches still in flight; await them first");
  Send(messages);
  return AwaitOldest();
}

void KafkaPublisher::LearnTopicOnce(const std::string& name) {
  if (topic_known_) return;
  topic_known_ = true;  // once, even when it fails: it only saves time
  {
    // Every broker refused already: the wait would only add its timeout to the message's own.
    // The refusals reach OnError only through a poll.
    rd_kafka_poll(producer_.get(), 0);
    std::lock_guard lock(error_mutex_);
    if (connectivity_error_ == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) return;
  }
  TopicHandle topic(rd_kafka_topic_new(producer_.get(), name.c_str(), nullptr));
  if (!topic) return;
  const rd_kafka_metadata_t* metadata = nullptr;
  const int timeout_ms = std::min(delivery_timeout_ms_, kTopicMetadataMaxMs);
  rd_kafka_metadata(producer_.get(), 0, topic.get(), &metadata, timeout_ms);
  MetadataHandle owned(metadata);  // null when the request failed
}

void KafkaPublisher::Send(const std::vector<OutboundMessage>& messages) {
  if (!messages.empty()) LearnTopicOnce(messages[0].topic.empty() ? topic_ : messages[0].topic);
  auto batch = std::make_unique<InFlightBatch>();
  batch->slots.resize(messages.size());
  batch->deadline = std::chrono::steady_clock::now() +
                    std::chrono::milliseconds(delivery_timeout_ms_ + kFlushMarginMs);
  InFlightBatch* raw = batch.get();
  // In the queue before the first produce, so the destructor collects its
  // reports whatever happens below.
  in_flight_.push_back(std::move(batch));
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const OutboundMessage& m = messages[i];
    Slot& slot = raw->slots[i];
    slot.batch = raw;
    slot.result.outbox_id = m.outbox_id;
    const rd_kafka_resp_err_t err = ProduceOutboundMessage(producer_.get(), topic_, m, &slot, run_id_);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      ++raw->reports_pending;
    } else {
      slot.err = err;
      slot.result.error = DescribeError(err);  // refused locally, e.g. _UNKNOWN_TOPIC
    }
  }
  HitFailpoint("relay.after_produce");
}

std::vector<DeliveryResult> KafkaPublisher::AwaitOldest() {
  if (in_flight_.empty()) throw std::logic_error("AwaitOldest: no batch in flight");
  InFlightBatch& batch = *in_flight_.front();
  using Clock = std::chrono::steady_clock;
  while (batch.reports_pending > 0 && Clock::now() < batch.deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(batch.deadline - Clock::now());
    rd_kafka_poll(producer_.get(),
                  static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, kReportPollMaxMs)));
  }
  // Never hand out results while a report could still write into them.
  if (batch.reports_pending > 0) PurgeInFlight();
  // A fatal error fails every message of the producer with _FATAL: the producer's fault, not
  // the messages'. Say which error it was, and let the relay count no attempt for them.
  char reason[512] = {};
  const rd_kafka_resp_err_t fatal = rd_kafka_fatal_error(producer_.get(), reason, sizeof reason);
  // An outage is named by what the client saw of the brokers (all down, a refused connection)
  // when it saw anything since the last ack, else by the message's own error (_MSG_TIMED_OUT).
  rd_kafka_resp_err_t connectivity;
  std::string connectivity_reason;
  {
    std::lock_guard lock(error_mutex_);
    connectivity = connectivity_error_;
    connectivity_reason = connectivity_reason_;
  }
  std::vector<DeliveryResult> results;
  results.reserve(batch.slots.size());
  for (Slot& slot : batch.slots) {
    if (fatal != RD_KAFKA_RESP_ERR_NO_ERROR && !slot.result.ok) {
      slot.result.producer_fatal = true;
      slot.result.error =
          fmt::format("the producer hit a fatal error: {} ({})", reason, rd_kafka_err2name(fatal));
    } else if (!slot.result.ok && ClassifyDeliveryError(slot.err) == DeliveryFault::kOutage) {
      // The cause first (the relay names the outage by the text before "; the message: "),
      // the message's own error after it: `publish` still shows its _MSG_TIMED_OUT.
      slot.result.outage = true;
      if (connectivity != RD_KAFKA_RESP_ERR_NO_ERROR)
        slot.result.error = fmt::format("{}; the message: {}",
                                        DescribeOutage(connectivity, connectivity_reason),
                                        DescribeError(slot.err));
    }
    results.push_back(std::move(slot.result));
  }
  in_flight_.pop_front();
  return results;
}

}  // namespace outbox::kafka
