// ProbeBroker: does a broker answer? For relay --http's /readyz. Any thread: librdkafka's
// rd_kafka_t is thread-safe, so the endpoint asks through the relay's own producer without
// touching the relay loop.
#pragma once

#include <librdkafka/rdkafka.h>

#include <string>

namespace outbox::ops {

// Asks producer's brokers for cluster metadata (rd_kafka_metadata, brokers only), waiting at most
// timeout_ms (ms). Returns "" when a broker answered, else librdkafka's reason (e.g.
// "Local: Broker transport failure (_TRANSPORT)"). Never throws.
std::string ProbeBroker(rd_kafka_t* producer, int timeout_ms) noexcept;

}  // namespace outbox::ops
