#include "lab/faults/broker_control.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <sstream>
#include <vector>

#include "outbox/error.h"
#include "outbox/parse_integer.h"

namespace outbox::lab {
namespace {

constexpr int kClientTimeoutMs = 2000;
// librdkafka's RD_KAFKAP_Produce ApiKey (Kafka protocol).
constexpr int16_t kProduceApiKey = 0;

sockaddr_un SocketAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path)
    throw ConfigError(fmt::format("control socket '{}': path longer than {} bytes", path,
                                  sizeof addr.sun_path - 1));
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

// Bounded so that every value fits the int32_t/int the mock cluster takes.
bool ParseInt(const std::string& text, long long& value) {
  const auto parsed = ParseInteger(text, std::numeric_limits<std::int32_t>::min(),
                                   std::numeric_limits<std::int32_t>::max());
  if (parsed) value = *parsed;
  return parsed.has_value();
}

std::string ReadLine(int fd) {
  std::string line;
  char c;
  pollfd p{fd, POLLIN, 0};
  while (line.size() < 512 && poll(&p, 1, kClientTimeoutMs) > 0 && read(fd, &c, 1) == 1 && c != '\n')
    line += c;
  return line;
}

}  // namespace

std::string ApplyBrokerControl(EmbeddedBroker& broker, const std::string& request) {
  std::istringstream in(request);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  if (words.empty()) return "error: empty request";
  const std::string& verb = words[0];
  long long a = 0, b = 0;
  auto broker_id = [&](std::size_t index, long long& id) {
    id = 1;
    return words.size() <= index || ParseInt(words[index], id);
  };
  rd_kafka_mock_cluster_t* cluster = broker.cluster();
  rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
  if (verb == "ping") return "ok";
  if (verb == "down" || verb == "up") {
    if (!broker_id(1, a)) return "error: broker id must be an integer";
    err = verb == "down" ? rd_kafka_mock_broker_set_down(cluster, static_cast<int32_t>(a))
                         : rd_kafka_mock_broker_set_up(cluster, static_cast<int32_t>(a));
  } else if (verb == "rtt") {
    if (words.size() < 2 || !ParseInt(words[1], a) || a < 0)
      return "error: usage: rtt MS [BROKER]";
    if (!broker_id(2, b)) return "error: broker id must be an integer";
    err = rd_kafka_mock_broker_set_rtt(cluster, static_cast<int32_t>(b), static_cast<int>(a));
  } else if (verb == "errors") {
    if (words.size() != 4 || words[1] != "produce" || !ParseInt(words[2], a) || a <= 0 ||
        !ParseInt(words[3], b))
      return "error: usage: errors produce N CODE";
    std::vector<rd_kafka_resp_err_t> codes(static_cast<std::size_t>(a),
                                           static_cast<rd_kafka_resp_err_t>(b));
    rd_kafka_mock_push_request_errors_array(cluster, kProduceApiKey, codes.size(), codes.data());
  } else if (verb == "clear") {
    if (words.size() != 2 || words[1] != "produce") return "error: usage: clear produce";
    rd_kafka_mock_clear_request_errors(cluster, kProduceApiKey);
  } else {
    return fmt::format("error: unknown request '{}'; use down, up, rtt, errors, clear, ping", verb);
  }
  if (err) return fmt::format("error: {}", rd_kafka_err2str(err));
  return "ok";
}

ControlSocket::ControlSocket(const std::string& path) : path_(path) {
  const sockaddr_un addr = SocketAddress(path);
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) ThrowSystemError(fmt::format("control socket '{}'", path), errno);
  unlink(path.c_str());
  if (bind(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 || listen(fd_, 8) != 0) {
    const int e = errno;
    close(fd_);
    ThrowSystemError(fmt::format("control socket '{}'", path), e);
  }
}

ControlSocket::~ControlSocket() {
  close(fd_);
  unlink(path_.c_str());
}

int ControlSocket::AcceptAndRead(std::string& request) {
  const int client = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (client < 0) return -1;
  request = ReadLine(client);
  return client;
}

void ControlSocket::Reply(int client, const std::string& reply) {
  const std::string line = reply + "\n";
  [[maybe_unused]] const ssize_t n = write(client, line.data(), line.size());
  close(client);
}

std::string SendBrokerControl(const std::string& path, const std::string& request) {
  const sockaddr_un addr = SocketAddress(path);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) ThrowSystemError(fmt::format("control socket '{}'", path), errno);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    close(fd);
    ThrowSystemError(fmt::format("connect to broker control '{}'", path), e);
  }
  const std::string line = request + "\n";
  [[maybe_unused]] const ssize_t n = write(fd, line.data(), line.size());
  const std::string reply = ReadLine(fd);
  close(fd);
  if (reply.empty()) throw SystemError(fmt::format("broker control '{}': no reply", path), 0);
  return reply;
}

}  // namespace outbox::lab
