#include "lab/relay_owner.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <fstream>
#include <sstream>

namespace outbox::lab {
namespace {

std::string HostName() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

bool ProcessExists(pid_t pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  if (stat) {
    std::stringstream text;
    text << stat.rdbuf();
    const std::string line = text.str();
    // pid (comm) state ...: comm may hold spaces and parentheses, so look after the last ')'.
    const auto close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size()) {
      const char state = line[close + 2];
      return state != 'Z' && state != 'X';
    }
    return true;
  }
  return !(kill(pid, 0) == -1 && errno == ESRCH);
}

}  // namespace

std::string DefaultRelayOwner() { return fmt::format("relay-{}@{}", getpid(), HostName()); }

std::optional<OwnerProcess> ParseRelayOwner(const std::string& owner) {
  constexpr std::string_view kPrefix = "relay-";
  if (owner.rfind(kPrefix, 0) != 0) return std::nullopt;
  const auto at = owner.find('@', kPrefix.size());
  if (at == std::string::npos || at + 1 >= owner.size()) return std::nullopt;
  OwnerProcess process;
  const char* first = owner.data() + kPrefix.size();
  const char* last = owner.data() + at;
  const auto [end, error] = std::from_chars(first, last, process.pid);
  if (error != std::errc() || end != last || process.pid <= 0) return std::nullopt;
  process.host = owner.substr(at + 1);
  return process;
}

OwnerLiveness OwnerLivenessHere(const std::string& owner) {
  const auto process = ParseRelayOwner(owner);
  if (!process || process->host != HostName()) return OwnerLiveness::kUnknown;
  return ProcessExists(process->pid) ? OwnerLiveness::kAlive : OwnerLiveness::kDead;
}

const char* OwnerLivenessName(OwnerLiveness liveness) {
  switch (liveness) {
    case OwnerLiveness::kAlive: return "alive";
    case OwnerLiveness::kDead: return "dead";
    case OwnerLiveness::kUnknown: return "unknown";
  }
  return "unknown";
}

}  // namespace outbox::lab
