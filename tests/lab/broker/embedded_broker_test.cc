// EmbeddedBroker's sockets: every connection a client opens to it skips Nagle
// (TCP_NODELAY), as a real Kafka broker's does. Without it a produce request
// sent while another is in flight waits ~40 ms for a delayed ACK.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "lab/broker/embedded_broker.h"
#include "outbox/kafka/handles.h"

namespace {

using outbox::lab::EmbeddedBroker;

int PortOf(const std::string& bootstrap) {
  return std::atoi(bootstrap.substr(bootstrap.rfind(':') + 1).c_str());
}

struct SocketCensus {
  int accepted = 0;          // sockets accept(2) returned on the broker's port
  int accepted_nodelay = 0;  // ... of which carry TCP_NODELAY
};

// Looks at every socket of this process whose local port is port.
SocketCensus CensusOnPort(int port) {
  SocketCensus census;
  std::unique_ptr<DIR, int (*)(DIR*)> fds(opendir("/proc/self/fd"), closedir);
  REQUIRE(fds);
  while (const dirent* entry = readdir(fds.get())) {
    if (entry->d_name[0] == '.') continue;
    const int fd = std::atoi(entry->d_name);
    sockaddr_in address{};
    socklen_t length = sizeof address;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) continue;
    if (address.sin_family != AF_INET || ntohs(address.sin_port) != port) continue;
    int listening = 0;
    socklen_t size = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) != 0 || listening) continue;
    ++census.accepted;
    int nodelay = 0;
    size = sizeof nodelay;
    REQUIRE(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, &size) == 0);
    if (nodelay) ++census.accepted_nodelay;
  }
  return census;
}

}  // namespace

TEST_CASE("Every connection the embedded broker accepts has Nagle disabled", "[kafka]") {
  EmbeddedBroker broker;
  broker.CreateTopic("nodelay", 1);
  auto producer = outbox::kafka::MakeClient(
      RD_KAFKA_PRODUCER,
      outbox::kafka::MakeConf({{"bootstrap.servers", broker.BootstrapServers()},
                               {"socket.nagle.disable", "false"}}));
  const std::string value = "v";
  REQUIRE(rd_kafka_producev(producer.get(), RD_KAFKA_V_TOPIC("nodelay"),
                            RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                            RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR_NO_ERROR);
  REQUIRE(rd_kafka_flush(producer.get(), 10000) == RD_KAFKA_RESP_ERR_NO_ERROR);

  const SocketCensus census = CensusOnPort(PortOf(broker.BootstrapServers()));
  REQUIRE(census.accepted >= 1);  // the producer's connection, seen from the broker side
  CHECK(census.accepted_nodelay == census.accepted);
}

TEST_CASE("DisableNagleOnListeners sets only the listening sockets of the named ports",
          "[kafka]") {
  EmbeddedBroker broker;
  CHECK(outbox::lab::DisableNagleOnListeners(broker.BootstrapServers()) == 1);
  CHECK(outbox::lab::DisableNagleOnListeners("127.0.0.1:1") == 0);
  EmbeddedBroker three(3);
  CHECK(outbox::lab::DisableNagleOnListeners(three.BootstrapServers()) == 3);
}
