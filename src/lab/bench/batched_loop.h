// The hand-written batched loop: the relay a user writes in 40 lines when
// the chapter's per-row loop is too slow, and what `relay` must beat
// (issue 8). Each page:
//   read up to page_size unpublished rows (Store::FetchUnpublished, from the first row)
//   -> produce them all with librdkafka -> rd_kafka_flush
//   -> mark the acknowledged ids in ONE transaction (Store::MarkPublished).
// No claims, no fencing, no retries, no backoff: one process at a time, and a
// failed delivery ends the loop. At-least-once like the relay: a crash
// between the flush and the mark re-sends the page.
//
// Produces each record exactly as the relay does (kafka::ProduceOutboundMessage:
// key = event id, the same headers), with librdkafka's defaults plus acks=all,
// so the comparison is of the loops, not of the records.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "outbox/kafka/handles.h"
#include "outbox/store.h"

namespace outbox::lab {

struct BatchedLoopOptions {
  std::string brokers;  // bootstrap.servers
  std::string topic;
  int delivery_timeout_ms = 10000;  // librdkafka message.timeout.ms; the flush waits 5 s longer
  std::int64_t page_size = 1000;    // rows per page, > 0
  std::vector<kafka::Property> properties;  // applied last (-X name=value)
};

struct BatchedLoopReport {
  std::int64_t pages = 0;   // pages read that had rows
  std::int64_t sent = 0;    // records acknowledged
  std::int64_t marked = 0;  // rows marked published
};

// Runs pages until a page comes back empty. Throws ConfigError for
// page_size <= 0 or a bad property, KafkaError when a delivery fails or the
// flush times out (the page's acknowledged rows are marked first), DbError.
BatchedLoopReport RunBatchedLoop(Store& store, const BatchedLoopOptions& options);

}  // namespace outbox::lab
