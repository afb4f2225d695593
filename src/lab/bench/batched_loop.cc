#include "lab/bench/batched_loop.h"

#include <fmt/format.h>

#include <memory>
#include <optional>

#include "outbox/error.h"
#include "outbox/kafka/kafka_publisher.h"
#include "outbox/per_row_relay.h"

namespace outbox::lab {
namespace {

constexpr int kFlushMarginMs = 5000;

// One delivery report: 1 when acknowledged. Served inside rd_kafka_flush on
// our thread.
void OnDelivery(rd_kafka_t*, const rd_kafka_message_t* msg, void*) noexcept {
  if (msg->_private && msg->err == RD_KAFKA_RESP_ERR_NO_ERROR)
    *static_cast<unsigned char*>(msg->_private) = 1;
}

}  // namespace

BatchedLoopReport RunBatchedLoop(Store& store, const BatchedLoopOptions& options) {
  if (options.page_size <= 0)
    throw ConfigError(fmt::format("page size {}: must be at least 1", options.page_size));
  std::vector<kafka::Property> properties = {
      {"bootstrap.servers", options.brokers},
      {"acks", "all"},
      {"message.timeout.ms", std::to_string(options.delivery_timeout_ms)},
      {"log_level", "2"},
  };
  properties.insert(properties.end(), options.properties.begin(), options.properties.end());
  kafka::ConfHandle conf = kafka::MakeConf(properties);
  rd_kafka_conf_set_dr_msg_cb(conf.get(), &OnDelivery);
  // Declared before the producer, destroyed after it: reports write into it.
  std::unique_ptr<unsigned char[]> acked;
  kafka::KafkaHandle producer = kafka::MakeClient(RD_KAFKA_PRODUCER, std::move(conf));

  BatchedLoopReport report;
  // The run's id on every record, as the relay sends it: check counts only this run's records.
  const std::string run_id = store.RunId();
  for (;;) {
    const std::vector<OutboxRow> page = store.FetchUnpublished(std::nullopt, options.page_size);
    if (page.empty()) return report;
    ++report.pages;
    acked = std::make_unique<unsigned char[]>(page.size());  // zeroed
    for (std::size_t i = 0; i < page.size(); ++i) {
      const rd_kafka_resp_err_t err = kafka::ProduceOutboundMessage(
          producer.get(), options.topic, MessageForRow(page[i]), &acked[i], run_id);
      if (err != RD_KAFKA_RESP_ERR_NO_ERROR) kafka::ThrowKafkaError("batched loop: produce", err);
    }
    const rd_kafka_resp_err_t flushed =
        rd_kafka_flush(producer.get(), options.delivery_timeout_ms + kFlushMarginMs);
    std::vector<std::int64_t> ids;
    ids.reserve(page.size());
    for (std::size_t i = 0; i < page.size(); ++i)
      if (acked[i]) ids.push_back(page[i].id);
    report.sent += static_cast<std::int64_t>(ids.size());
    report.marked += store.MarkPublished(ids);
    if (flushed != RD_KAFKA_RESP_ERR_NO_ERROR) kafka::ThrowKafkaError("batched loop: flush", flushed);
    if (ids.size() != page.size())
      throw KafkaError(fmt::format("batched loop: {} of {} deliveries failed", page.size() - ids.size(),
                                   page.size()),
                       RD_KAFKA_RESP_ERR__MSG_TIMED_OUT);
  }
}

}  // namespace outbox::lab
