// Whose fault a failed delivery is: the message's own, or the brokers' (an outage).
//
// The relay counts an attempt toward parking (SettlePolicy::max_attempts) only for an error
// that belongs to the message: one that the same bytes meet again on a healthy cluster, so a
// retry cannot help and parking is the honest end. Every other failure says that the brokers
// could not be reached or did not answer in time: the relay counts no attempt, parks nothing,
// waits with backoff and sends the rows again (Relay, "broker outage"). Pure functions; thread-safe.
//
// Sources of the classification:
//   - the Kafka protocol's error table (kafka.apache.org/protocol, "Error Codes", its
//     Retriable column): a retriable error is the cluster's passing state, never the message's;
//   - librdkafka 2.0.2: rdkafka.h (the codes' meanings), rd_kafka_handle_Produce_error in
//     rdkafka_request.c (which errors it retries until message.timeout.ms, reporting them as
//     _MSG_TIMED_OUT, and which fail the message at once), INTRODUCTION.md "Message timeout"
//     and "Error handling";
//   - the Java producer's split of the same codes (org.apache.kafka.common.errors):
//     RecordTooLargeException, InvalidRecordException, TopicAuthorizationException and
//     UnknownTopicOrPartitionException with auto-creation off are the ones its callers are
//     told to give up on.
#pragma once

#include <librdkafka/rdkafka.h>

#include <string>

namespace outbox::kafka {

enum class DeliveryFault {
  // The message's own: counts an attempt (parked after max_attempts). Exactly these codes:
  //   MSG_SIZE_TOO_LARGE (10)            larger than message.max.bytes (locally, at produce) or
  //                                      the topic's max.message.bytes (broker)
  //   INVALID_MSG_SIZE (4)               a size the broker refuses
  //   RECORD_LIST_TOO_LARGE (18)         its record batch exceeds the segment size
  //   INVALID_MSG (2)                    CORRUPT_MESSAGE: the record fails the broker's CRC or
  //                                      format check
  //   INVALID_RECORD (87)                the broker refuses the record itself (e.g. no key on a
  //                                      compacted topic)
  //   INVALID_TIMESTAMP (32)             its timestamp is outside the topic's allowed range
  //   _BAD_MSG (-199)                    librdkafka cannot encode or read the message
  //   _KEY_SERIALIZATION (-162),
  //   _VALUE_SERIALIZATION (-161)        the message cannot be serialized
  //   _INVALID_ARG (-186)                producev refuses the message's arguments
  //   TOPIC_AUTHORIZATION_FAILED (29)    this client may not write the message's topic
  //   CLUSTER_AUTHORIZATION_FAILED (31)  nor the cluster (idempotent writes)
  //   _UNKNOWN_TOPIC (-188),
  //   UNKNOWN_TOPIC_OR_PART (3)          the topic does not exist and the cluster did not create
  //                                      it (auto.create.topics.enable off): librdkafka reports it
  //                                      only after the cluster answered, never while unreachable
  //   _UNKNOWN_PARTITION (-190)          the message's partition does not exist
  kMessage,
  // The brokers' or the network's: counts no attempt, parks nothing. Every other code, among
  // them _ALL_BROKERS_DOWN (-187), _TRANSPORT (-195), _RESOLVE (-193), _MSG_TIMED_OUT (-192),
  // _TIMED_OUT (-185), _PURGE_QUEUE (-152), _PURGE_INFLIGHT (-151), REQUEST_TIMED_OUT (7),
  // NETWORK_EXCEPTION (13), BROKER_NOT_AVAILABLE (8), LEADER_NOT_AVAILABLE (5),
  // NOT_LEADER_FOR_PARTITION (6), NOT_ENOUGH_REPLICAS (19), NOT_ENOUGH_REPLICAS_AFTER_APPEND
  // (20), KAFKA_STORAGE_ERROR (56), THROTTLING_QUOTA_EXCEEDED (89) and codes this table does not
  // know: an unknown error is not proof that the message is bad, and parking the backlog for
  // it is the failure this table exists to prevent (the outage names the code instead).
  // _FATAL (-150) is neither: a fatal producer is handled apart (DeliveryResult::producer_fatal).
  kOutage,
};

// The fault of a delivery report's or a local refusal's error code (err != NO_ERROR).
DeliveryFault ClassifyDeliveryError(rd_kafka_resp_err_t err) noexcept;

// True for the codes librdkafka's error_cb raises when brokers cannot be reached:
// _ALL_BROKERS_DOWN, _TRANSPORT, _RESOLVE, _TIMED_OUT (a request to a broker timed out), and
// _AUTHENTICATION / _SSL (a connection the broker refuses). They name an outage better than the
// messages' own _MSG_TIMED_OUT (KafkaPublisher::AwaitOldest).
bool IsConnectivityError(rd_kafka_resp_err_t err) noexcept;

// The outage's cause in words for status and the relay's line. For a connectivity code
// (IsConnectivityError): "all brokers down (_ALL_BROKERS_DOWN)", or "<what>: <reason> (<NAME>)"
// with the client's reason, e.g. "transport failure: 127.0.0.1:9092/1: Connect to
// ipv4#127.0.0.1:9092 failed: Connection refused (_TRANSPORT)". Otherwise librdkafka's words,
// e.g. "Local: Message timed out (_MSG_TIMED_OUT)" (as DescribeError).
std::string DescribeOutage(rd_kafka_resp_err_t err, const std::string& reason = {});

}  // namespace outbox::kafka
