#include "lab/chapter/relay_owner.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <fstream>
#include <random>
#include <sstream>
#include <string_view>
#include <sys/stat.h>

namespace outbox::lab {
namespace {

std::string HostName() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

// The inode of this process's PID namespace (/proc/self/ns/pid); 0 when it cannot be read.
std::uint64_t PidNamespace() {
  struct stat info {};
  if (stat("/proc/self/ns/pid", &info) != 0) return 0;
  return static_cast<std::uint64_t>(info.st_ino);
}

// Drawn once per process: a restarted relay that gets the same pid (a container's PID 1) is
// told apart from its predecessor by it.
const std::string& Incarnation() {
  static const std::string incarnation = [] {
    std::random_device device;
    const std::uint64_t high = device();
    const std::uint64_t low = device();
    return fmt::format("{:016x}", (high << 32) ^ low);
  }();
  return incarnation;
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

std::string DefaultRelayOwner() {
  return fmt::format("relay-{}@{}/{}/{}", getpid(), HostName(), PidNamespace(), Incarnation());
}

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
  const std::string rest = owner.substr(at + 1);
  const auto slash = rest.find('/');
  process.host = rest.substr(0, slash);
  if (process.host.empty()) return std::nullopt;
  if (slash == std::string::npos) return process;  // an older relay's "relay-PID@HOST"
  const auto second = rest.find('/', slash + 1);
  if (second == std::string::npos || second + 1 >= rest.size()) return std::nullopt;
  const char* ns_first = rest.data() + slash + 1;
  const char* ns_last = rest.data() + second;
  const auto [ns_end, ns_error] = std::from_chars(ns_first, ns_last, process.pid_namespace);
  if (ns_error != std::errc() || ns_end != ns_last || process.pid_namespace == 0)
    return std::nullopt;
  process.incarnation = rest.substr(second + 1);
  return process;
}

OwnerLiveness OwnerLivenessHere(const std::string& owner) {
  const auto process = ParseRelayOwner(owner);
  if (!process || process->host != HostName()) return OwnerLiveness::kUnknown;
  if (process->pid_namespace != 0) {
    if (process->pid_namespace != PidNamespace()) return OwnerLiveness::kUnknown;
    if (process->pid == getpid())
      return process->incarnation == Incarnation() ? OwnerLiveness::kAlive : OwnerLiveness::kDead;
  }
  return ProcessExists(process->pid) ? OwnerLiveness::kAlive : OwnerLiveness::kDead;
}

DeadOwnersReleased ReleaseDeadOwners(OutboxStore& store) {
  DeadOwnersReleased released;
  const LeaderLease lease = store.ReadLease();
  if (lease.Live(store.clock().EpochMs()) && OwnerLivenessHere(lease.owner) == OwnerLiveness::kDead &&
      store.ReleaseLease(lease.token))
    released.lease = lease;
  for (ClaimOwner claim : store.ClaimOwners(store.clock().EpochMs())) {
    if (OwnerLivenessHere(claim.owner) != OwnerLiveness::kDead) continue;
    claim.rows = store.ReleaseClaimsOf(claim.owner, claim.max_token);
    released.claims.push_back(std::move(claim));
  }
  return released;
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
