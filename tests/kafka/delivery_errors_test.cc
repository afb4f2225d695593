// Whose fault a failed delivery is (kafka::ClassifyDeliveryError): every code the header names
// as the message's, the outage codes, and an unknown code; and the outage's words.
#include <catch2/catch.hpp>

#include <string>

#include "outbox/kafka/delivery_errors.h"

namespace {

using outbox::kafka::ClassifyDeliveryError;
using outbox::kafka::DeliveryFault;
using outbox::kafka::DescribeOutage;
using outbox::kafka::IsConnectivityError;

}  // namespace

TEST_CASE("A delivery error that belongs to the message counts as the message's fault",
          "[kafka]") {
  const rd_kafka_resp_err_t err = GENERATE(
      RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE,
      RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE, RD_KAFKA_RESP_ERR_INVALID_MSG,
      RD_KAFKA_RESP_ERR_INVALID_RECORD, RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP,
      RD_KAFKA_RESP_ERR__BAD_MSG, RD_KAFKA_RESP_ERR__KEY_SERIALIZATION,
      RD_KAFKA_RESP_ERR__VALUE_SERIALIZATION, RD_KAFKA_RESP_ERR__INVALID_ARG,
      RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
      RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED, RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC,
      RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART, RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION);
  INFO(rd_kafka_err2name(err));
  CHECK(ClassifyDeliveryError(err) == DeliveryFault::kMessage);
  CHECK_FALSE(IsConnectivityError(err));
}

TEST_CASE("Timeouts and purges and unreachable or unready brokers are an outage and count no "
          "attempt",
          "[kafka]") {
  const rd_kafka_resp_err_t err = GENERATE(
      RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN, RD_KAFKA_RESP_ERR__TRANSPORT,
      RD_KAFKA_RESP_ERR__RESOLVE, RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, RD_KAFKA_RESP_ERR__TIMED_OUT,
      RD_KAFKA_RESP_ERR__PURGE_QUEUE, RD_KAFKA_RESP_ERR__PURGE_INFLIGHT,
      RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT, RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION,
      RD_KAFKA_RESP_ERR_BROKER_NOT_AVAILABLE, RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE,
      RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
      RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND, RD_KAFKA_RESP_ERR_KAFKA_STORAGE_ERROR,
      RD_KAFKA_RESP_ERR_THROTTLING_QUOTA_EXCEEDED,
      // A code the table does not know is no proof against the message.
      RD_KAFKA_RESP_ERR_UNKNOWN);
  INFO(rd_kafka_err2name(err));
  CHECK(ClassifyDeliveryError(err) == DeliveryFault::kOutage);
}

TEST_CASE("Only the client's connection errors are connectivity errors", "[kafka]") {
  CHECK(IsConnectivityError(RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN));
  CHECK(IsConnectivityError(RD_KAFKA_RESP_ERR__TRANSPORT));
  CHECK(IsConnectivityError(RD_KAFKA_RESP_ERR__RESOLVE));
  CHECK_FALSE(IsConnectivityError(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT));
  CHECK_FALSE(IsConnectivityError(RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT));
  CHECK_FALSE(IsConnectivityError(RD_KAFKA_RESP_ERR__FATAL));
}

TEST_CASE("An outage is named by its cause and code", "[kafka]") {
  CHECK(DescribeOutage(RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN, "3/3 brokers are down") ==
        "all brokers down (_ALL_BROKERS_DOWN)");
  CHECK(DescribeOutage(RD_KAFKA_RESP_ERR__TRANSPORT, "127.0.0.1:9/1: Connection refused") ==
        "transport failure: 127.0.0.1:9/1: Connection refused (_TRANSPORT)");
  CHECK(DescribeOutage(RD_KAFKA_RESP_ERR__TRANSPORT) == "transport failure (_TRANSPORT)");
  CHECK(DescribeOutage(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT) ==
        "Local: Message timed out (_MSG_TIMED_OUT)");
  CHECK(DescribeOutage(RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT) ==
        "Broker: Request timed out (REQUEST_TIMED_OUT)");
}
