#include "outbox/kafka/delivery_errors.h"

#include <fmt/format.h>

#include "outbox/kafka/handles.h"

namespace outbox::kafka {

DeliveryFault ClassifyDeliveryError(rd_kafka_resp_err_t err) noexcept {
  switch (err) {
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_MSG:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP:
    case RD_KAFKA_RESP_ERR__BAD_MSG:
    case RD_KAFKA_RESP_ERR__KEY_SERIALIZATION:
    case RD_KAFKA_RESP_ERR__VALUE_SERIALIZATION:
    case RD_KAFKA_RESP_ERR__INVALID_ARG:
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
      return DeliveryFault::kMessage;
    default:
      return DeliveryFault::kOutage;
  }
}

bool IsConnectivityError(rd_kafka_resp_err_t err) noexcept {
  switch (err) {
    case RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN:
    case RD_KAFKA_RESP_ERR__TRANSPORT:
    case RD_KAFKA_RESP_ERR__RESOLVE:
    case RD_KAFKA_RESP_ERR__TIMED_OUT:
    case RD_KAFKA_RESP_ERR__AUTHENTICATION:
    case RD_KAFKA_RESP_ERR__SSL:
      return true;
    default:
      return false;
  }
}

std::string DescribeOutage(rd_kafka_resp_err_t err, const std::string& reason) {
  const char* what = nullptr;
  switch (err) {
    case RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN:
      return fmt::format("all brokers down ({})", rd_kafka_err2name(err));
    case RD_KAFKA_RESP_ERR__TRANSPORT: what = "transport failure"; break;
    case RD_KAFKA_RESP_ERR__RESOLVE: what = "broker address not resolved"; break;
    case RD_KAFKA_RESP_ERR__TIMED_OUT: what = "broker requests time out"; break;
    case RD_KAFKA_RESP_ERR__AUTHENTICATION: what = "authentication refused"; break;
    case RD_KAFKA_RESP_ERR__SSL: what = "TLS failure"; break;
    default: return DescribeError(err);
  }
  if (reason.empty()) return fmt::format("{} ({})", what, rd_kafka_err2name(err));
  return fmt::format("{}: {} ({})", what, reason, rd_kafka_err2name(err));
}

}  // namespace outbox::kafka
