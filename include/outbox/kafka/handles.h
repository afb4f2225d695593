// RAII ownership for librdkafka's C handles, configuration building, and the
// one function that turns librdkafka error codes into KafkaError.
#pragma once

#include <librdkafka/rdkafka.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace outbox::kafka {

struct KafkaDeleter {
  void operator()(rd_kafka_t* rk) const noexcept { rd_kafka_destroy(rk); }
};
struct ConfDeleter {
  void operator()(rd_kafka_conf_t* conf) const noexcept { rd_kafka_conf_destroy(conf); }
};
struct TopicPartitionListDeleter {
  void operator()(rd_kafka_topic_partition_list_t* list) const noexcept {
    rd_kafka_topic_partition_list_destroy(list);
  }
};
struct MessageDeleter {
  void operator()(rd_kafka_message_t* msg) const noexcept { rd_kafka_message_destroy(msg); }
};
struct TopicDeleter {
  void operator()(rd_kafka_topic_t* topic) const noexcept { rd_kafka_topic_destroy(topic); }
};
struct HeadersDeleter {
  void operator()(rd_kafka_headers_t* headers) const noexcept { rd_kafka_headers_destroy(headers); }
};
struct MetadataDeleter {
  void operator()(const rd_kafka_metadata_t* md) const noexcept { rd_kafka_metadata_destroy(md); }
};

struct ErrorDeleter {
  void operator()(rd_kafka_error_t* error) const noexcept { rd_kafka_error_destroy(error); }
};
struct QueueDeleter {
  void operator()(rd_kafka_queue_t* queue) const noexcept { rd_kafka_queue_destroy(queue); }
};
struct EventDeleter {
  void operator()(rd_kafka_event_t* event) const noexcept { rd_kafka_event_destroy(event); }
};
struct NewTopicDeleter {
  void operator()(rd_kafka_NewTopic_t* topic) const noexcept { rd_kafka_NewTopic_destroy(topic); }
};
struct AdminOptionsDeleter {
  void operator()(rd_kafka_AdminOptions_t* options) const noexcept {
    rd_kafka_AdminOptions_destroy(options);
  }
};

using KafkaHandle = std::unique_ptr<rd_kafka_t, KafkaDeleter>;
using ErrorHandle = std::unique_ptr<rd_kafka_error_t, ErrorDeleter>;  // transactional API results
using QueueHandle = std::unique_ptr<rd_kafka_queue_t, QueueDeleter>;
using EventHandle = std::unique_ptr<rd_kafka_event_t, EventDeleter>;
using NewTopicHandle = std::unique_ptr<rd_kafka_NewTopic_t, NewTopicDeleter>;
using AdminOptionsHandle = std::unique_ptr<rd_kafka_AdminOptions_t, AdminOptionsDeleter>;
using ConfHandle = std::unique_ptr<rd_kafka_conf_t, ConfDeleter>;
using TopicPartitionListHandle =
    std::unique_ptr<rd_kafka_topic_partition_list_t, TopicPartitionListDeleter>;
using MessageHandle = std::unique_ptr<rd_kafka_message_t, MessageDeleter>;
using MetadataHandle = std::unique_ptr<const rd_kafka_metadata_t, MetadataDeleter>;
using TopicHandle = std::unique_ptr<rd_kafka_topic_t, TopicDeleter>;
using HeadersHandle = std::unique_ptr<rd_kafka_headers_t, HeadersDeleter>;

// A librdkafka property, as given with -X name=value.
using Property = std::pair<std::string, std::string>;

// Parses "name=value". Throws ConfigError when there is no '=' or no name.
Property ParseProperty(std::string_view text);

// Builds a configuration from properties, applied in order (later wins).
// Throws ConfigError naming the property when librdkafka reports it unknown or
// its value invalid (rd_kafka_conf_set, CONFIGURATION.md).
ConfHandle MakeConf(const std::vector<Property>& properties);

// Creates a client, taking ownership of conf only when librdkafka accepted it
// (rd_kafka_new frees conf on success only). Throws ConfigError with
// librdkafka's reason when it refuses the configuration.
KafkaHandle MakeClient(rd_kafka_type_t type, ConfHandle conf);

// Throws KafkaError "<what>: <librdkafka message> (<ERROR_NAME>)". The one
// place that converts rd_kafka_resp_err_t into an exception.
[[noreturn]] void ThrowKafkaError(std::string_view what, rd_kafka_resp_err_t err);

// "<librdkafka message> (<ERROR_NAME>)", for delivery results.
std::string DescribeError(rd_kafka_resp_err_t err);

// The same for an rd_kafka_error_t of the transactional API: its own string and name.
std::string DescribeError(const rd_kafka_error_t* error);

// Throws KafkaError "<what>: <DescribeError(error)>" with the error's code.
[[noreturn]] void ThrowKafkaError(std::string_view what, const rd_kafka_error_t* error);

}  // namespace outbox::kafka
