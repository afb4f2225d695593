// EmbeddedBroker: librdkafka's mock cluster (rdkafka_mock.h), a Kafka-protocol
// broker on loopback TCP, hosted in this process.
//
// Limits (librdkafka 2.0.2): records live in memory only and vanish with the
// process; brokers listen on ephemeral ports of 127.0.0.1; each partition keeps
// at most 100,000 message sets or 5 MiB, dropping the oldest beyond that.
// Its listening sockets carry TCP_NODELAY, as a real Kafka broker's do
// (socket.nagle.disable on the broker side): without it, a produce request
// sent while another is in flight waits ~40 ms for the client's delayed ACK
// (Nagle + delayed ACK), and every batched relay looks 40 ms slow.
// Run it in its own process (`outbox-lab broker`) so that kill -9 of the lab
// cannot take the records with it.
#pragma once

#include <memory>
#include <string>

#include "outbox/kafka/handles.h"  // rdkafka.h, which must precede rdkafka_mock.h

#include <librdkafka/rdkafka_mock.h>

namespace outbox::lab {

// The embedded broker marks each start with a topic named this prefix plus a
// random incarnation id (16 hex digits). A reader finds it in the metadata of
// all topics: a different id than the one a publisher saw means the broker was
// restarted in between, and with it every record it held (they live in memory).
// A real Kafka cluster has no such topic; its cluster id stands in for it.
inline constexpr const char* kIncarnationTopicPrefix = "__outbox_lab_broker.";

struct MockClusterDeleter {
  void operator()(rd_kafka_mock_cluster_t* cluster) const noexcept {
    rd_kafka_mock_cluster_destroy(cluster);
  }
};

// Sets TCP_NODELAY on every listening TCP socket of this process whose port
// appears in bootstrap ("127.0.0.1:PORT[,...]"). Linux copies the option to
// each socket accept(2) returns, so every broker connection skips Nagle.
// Returns how many listening sockets it set. Never throws.
int DisableNagleOnListeners(const std::string& bootstrap);

class EmbeddedBroker {
 public:
  // Starts broker_count brokers whose sockets skip Nagle (TCP_NODELAY), with
  // a fresh random incarnation id and its marker topic (kIncarnationTopicPrefix).
  // Throws ConfigError for broker_count < 1, KafkaError when the cluster
  // cannot start, SystemError when a listening socket could not be set.
  explicit EmbeddedBroker(int broker_count = 1);

  // Creates topic with partitions partitions (replication factor 1).
  // Throws KafkaError (e.g. when it already exists).
  void CreateTopic(const std::string& topic, int partitions);

  // "127.0.0.1:PORT[,...]", the value for bootstrap.servers.
  std::string BootstrapServers() const;

  rd_kafka_mock_cluster_t* cluster() const noexcept { return cluster_.get(); }

  // This start's incarnation id: 16 random hex digits, never the same twice.
  const std::string& Incarnation() const noexcept { return incarnation_; }

 private:
  // The cluster runs on host_'s threads: declared first, destroyed last.
  kafka::KafkaHandle host_;
  std::unique_ptr<rd_kafka_mock_cluster_t, MockClusterDeleter> cluster_;
  std::string incarnation_;
};

}  // namespace outbox::lab
