#include "ops/broker_probe.h"

#include <fmt/format.h>

namespace outbox::ops {

std::string ProbeBroker(rd_kafka_t* producer, int timeout_ms) noexcept {
  try {
    const rd_kafka_metadata_t* metadata = nullptr;
    // all_topics 0 and no topic: the brokers only, the cheapest request that needs an answer.
    const rd_kafka_resp_err_t err = rd_kafka_metadata(producer, 0, nullptr, &metadata, timeout_ms);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
      return fmt::format("no metadata answer within {} ms: {} ({})", timeout_ms,
                         rd_kafka_err2str(err), rd_kafka_err2name(err));
    const int brokers = metadata->broker_cnt;
    rd_kafka_metadata_destroy(metadata);
    if (brokers == 0) return "the metadata answer lists no broker";
    return {};
  } catch (...) {
    return "out of memory while probing the broker";
  }
}

}  // namespace outbox::ops
