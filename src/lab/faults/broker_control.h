// Broker faults on the embedded broker, driven from outside its process over
// a Unix domain socket: one request line, one reply line per connection.
//
// Requests (mapped to librdkafka's mock API, rdkafka_mock.h):
//   down [BROKER]            rd_kafka_mock_broker_set_down (default broker 1)
//   up [BROKER]              rd_kafka_mock_broker_set_up
//   rtt MS [BROKER]          rd_kafka_mock_broker_set_rtt: delay every reply by MS ms
//   errors produce N CODE    rd_kafka_mock_push_request_errors: fail the next N
//                            Produce requests with Kafka error CODE (e.g. 19)
//   clear produce            rd_kafka_mock_clear_request_errors
//   ping
// Replies: "ok" or "error: <why>".
#pragma once

#include <string>

#include "lab/broker/embedded_broker.h"

namespace outbox::lab {

// Applies one request line to broker. Returns the reply line; never throws
// for a bad request (the reply says what is wrong).
std::string ApplyBrokerControl(EmbeddedBroker& broker, const std::string& request);

// A listening Unix socket at path (an existing socket file is replaced).
// Owns the descriptor and removes the file on destruction. Throws ConfigError for a path too long for a Unix socket, SystemError when socket, bind or listen fails.
class ControlSocket {
 public:
  explicit ControlSocket(const std::string& path);
  ~ControlSocket();
  ControlSocket(const ControlSocket&) = delete;
  ControlSocket& operator=(const ControlSocket&) = delete;

  int fd() const noexcept { return fd_; }
  // Accepts one connection, reads one line, replies with handler(line).
  // Bounded: a client that sends nothing for 2 s is dropped.
  template <typename Handler>
  void ServeOne(Handler&& handler) {
    std::string request;
    const int client = AcceptAndRead(request);
    if (client < 0) return;
    Reply(client, handler(request));
  }

 private:
  int AcceptAndRead(std::string& request);
  static void Reply(int client, const std::string& reply);

  std::string path_;
  int fd_ = -1;
};

// Client side: sends request to the socket at path and returns the reply.
// Throws SystemError when the socket cannot be reached or gives no reply.
std::string SendBrokerControl(const std::string& path, const std::string& request);

}  // namespace outbox::lab
