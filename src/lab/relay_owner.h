// Relay owners: the name a relay records with its claims, "relay-PID@HOST"
// (the relay command's default), and whether that process still exists.
// A relay that died (kill -9, a crash, exit on a full disk) leaves claims
// that would block its rows for a whole lease; a restarted relay on the same
// host releases them at start instead (issue 9 §5).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

namespace outbox::lab {

// "relay-<getpid()>@<gethostname()>".
std::string DefaultRelayOwner();

struct OwnerProcess {
  pid_t pid = 0;
  std::string host;
};

// The pid and host of an owner named "relay-PID@HOST"; std::nullopt for any
// other name (an --owner chosen by the user).
std::optional<OwnerProcess> ParseRelayOwner(const std::string& owner);

enum class OwnerLiveness {
  kAlive,    // on this host and its process exists (or the pid was reused: then we wait)
  kDead,     // on this host and no such process, or only a zombie is left
  kUnknown,  // another host, or not a "relay-PID@HOST" name: only its lease can tell
};

// Liveness of owner as seen from this host: /proc/PID/stat (a zombie, state
// Z or X, is dead), else kill(pid, 0) (ESRCH: dead). Assumes one PID
// namespace per host name: two containers with the same host name sharing a
// database would see each other's relays as dead.
OwnerLiveness OwnerLivenessHere(const std::string& owner);

// "alive", "dead" or "unknown".
const char* OwnerLivenessName(OwnerLiveness liveness);

}  // namespace outbox::lab
