#include "lab/broker/embedded_broker.h"

#include <dirent.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstdlib>
#include <random>
#include <set>
#include <string_view>

#include "outbox/error.h"

namespace outbox::lab {

EmbeddedBroker::EmbeddedBroker(int broker_count)
    : host_(kafka::MakeClient(RD_KAFKA_PRODUCER, kafka::MakeConf({{"log_level", "3"}}))) {
  if (broker_count < 1)
    throw ConfigError(fmt::format("broker count {}: must be at least 1", broker_count));
  cluster_.reset(rd_kafka_mock_cluster_new(host_.get(), broker_count));
  if (!cluster_) throw KafkaError("start embedded broker: rd_kafka_mock_cluster_new failed", -1);
  const int listeners = DisableNagleOnListeners(BootstrapServers());
  if (listeners != broker_count)
    throw SystemError(fmt::format("start embedded broker: set TCP_NODELAY on {} of {} listening "
                                  "sockets",
                                  listeners, broker_count),
                      0);
  std::random_device random;
  incarnation_ = fmt::format("{:08x}{:08x}", random(), random());
  CreateTopic(kIncarnationTopicPrefix + incarnation_, 1);
}

namespace {

// The TCP ports named in "127.0.0.1:PORT[,...]".
std::set<int> PortsOf(std::string_view bootstrap) {
  std::set<int> ports;
  while (!bootstrap.empty()) {
    const std::size_t comma = bootstrap.find(',');
    const std::string_view server = bootstrap.substr(0, comma);
    const std::size_t colon = server.rfind(':');
    if (colon != std::string_view::npos)
      ports.insert(std::atoi(std::string(server.substr(colon + 1)).c_str()));
    if (comma == std::string_view::npos) break;
    bootstrap.remove_prefix(comma + 1);
  }
  return ports;
}

// The local TCP port of socket fd, or -1 when fd is not an IPv4/IPv6 socket.
int LocalPort(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return -1;
  if (address.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  if (address.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
  return -1;
}

}  // namespace

int DisableNagleOnListeners(const std::string& bootstrap) {
  const std::set<int> ports = PortsOf(bootstrap);
  std::unique_ptr<DIR, int (*)(DIR*)> fds(opendir("/proc/self/fd"), closedir);
  if (!fds) return 0;
  int count = 0;
  while (const dirent* entry = readdir(fds.get())) {
    const int fd = std::atoi(entry->d_name);
    if (entry->d_name[0] == '.' || fd == dirfd(fds.get())) continue;
    int listening = 0;
    socklen_t size = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) != 0 || !listening) continue;
    if (!ports.count(LocalPort(fd))) continue;
    const int on = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on) == 0) ++count;
  }
  return count;
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
