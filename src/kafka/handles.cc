#include "outbox/kafka/handles.h"

#include <fmt/format.h>

#include "outbox/error.h"

namespace outbox::kafka {

Property ParseProperty(std::string_view text) {
  const auto eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0)
    throw ConfigError(fmt::format("librdkafka property '{}': expected name=value", text));
  return {std::string(text.substr(0, eq)), std::string(text.substr(eq + 1))};
}

ConfHandle MakeConf(const std::vector<Property>& properties) {
  ConfHandle conf(rd_kafka_conf_new());
  char errstr[512];
  for (const auto& [name, value] : properties) {
    if (rd_kafka_conf_set(conf.get(), name.c_str(), value.c_str(), errstr, sizeof errstr) !=
        RD_KAFKA_CONF_OK)
      throw ConfigError(fmt::format("librdkafka property '{}={}': {}", name, value, errstr));
  }
  return conf;
}

KafkaHandle MakeClient(rd_kafka_type_t type, ConfHandle conf) {
  char errstr[512];
  rd_kafka_t* rk = rd_kafka_new(type, conf.get(), errstr, sizeof errstr);
  if (!rk) throw ConfigError(fmt::format("create Kafka client: {}", errstr));
  conf.release();  // now owned by rk
  return KafkaHandle(rk);
}

std::string DescribeError(rd_kafka_resp_err_t err) {
  return fmt::format("{} ({})", rd_kafka_err2str(err), rd_kafka_err2name(err));
}

void ThrowKafkaError(std::string_view what, rd_kafka_resp_err_t err) {
  throw KafkaError(fmt::format("{}: {}", what, DescribeError(err)), static_cast<int>(err));
}

std::string DescribeError(const rd_kafka_error_t* error) {
  return fmt::format("{} ({})", rd_kafka_error_string(error), rd_kafka_error_name(error));
}

void ThrowKafkaError(std::string_view what, const rd_kafka_error_t* error) {
  throw KafkaError(fmt::format("{}: {}", what, DescribeError(error)),
                   static_cast<int>(rd_kafka_error_code(error)));
}

}  // namespace outbox::kafka
