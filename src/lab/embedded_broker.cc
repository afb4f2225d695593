#include "lab/embedded_broker.h"

#include <fmt/format.h>

#include "outbox/error.h"

namespace outbox::lab {

EmbeddedBroker::EmbeddedBroker(int broker_count)
    : host_(kafka::MakeClient(RD_KAFKA_PRODUCER, kafka::MakeConf({{"log_level", "3"}}))) {
  if (broker_count < 1)
    throw ConfigError(fmt::format("broker count {}: must be at least 1", broker_count));
  cluster_.reset(rd_kafka_mock_cluster_new(host_.get(), broker_count));
  if (!cluster_) throw KafkaError("start embedded broker: rd_kafka_mock_cluster_new failed", -1);
}

void EmbeddedBroker::CreateTopic(const std::string& topic, int partitions) {
  if (partitions < 1)
    throw ConfigError(fmt::format("partitions {}: must be at least 1", partitions));
  const rd_kafka_resp_err_t err =
      rd_kafka_mock_topic_create(cluster_.get(), topic.c_str(), partitions, 1);
  if (err) kafka::ThrowKafkaError(fmt::format("create topic '{}'", topic), err);
}

std::string EmbeddedBroker::BootstrapServers() const {
  return rd_kafka_mock_cluster_bootstraps(cluster_.get());
}

}  // namespace outbox::lab
