// Relay owners: the name a relay records with its claims and the leader
// lease, "relay-PID@HOST/PIDNS/INCARNATION" (the relay command's default), and
// whether that process still exists. A relay that died (kill -9, a crash, exit
// on a full disk) leaves claims that would block its rows for a whole lease; a
// restarted relay on the same host releases them at start instead.
//
// A PID means something only inside its PID namespace: two containers with one
// host name (host networking, or pods with hostNetwork) may both run a relay
// as PID 1. So the name carries the PID namespace (the inode of
// /proc/self/ns/pid) and a random incarnation id drawn once per process, and a
// relay judges only owners of its own host name AND namespace; any other owner
// is "unknown", and only its lease can tell.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "outbox/outbox_store.h"
#include "outbox/store.h"  // ClaimOwner, LeaderLease

namespace outbox::lab {

// "relay-<getpid()>@<gethostname()>/<PID namespace inode>/<incarnation>", the
// incarnation 16 hex digits drawn at random once per process; the same string
// for every call in one process.
std::string DefaultRelayOwner();

struct OwnerProcess {
  pid_t pid = 0;
  std::string host;
  std::uint64_t pid_namespace = 0;  // 0: a name without one (written by an older relay)
  std::string incarnation;          // empty: a name without one
};

// The parts of an owner named "relay-PID@HOST/PIDNS/INCARNATION" or, as older
// relays wrote it, "relay-PID@HOST"; std::nullopt for any other name (an
// --owner chosen by the user).
std::optional<OwnerProcess> ParseRelayOwner(const std::string& owner);

enum class OwnerLiveness {
  kAlive,    // on this host and in this PID namespace, and its process exists (or the pid
             // was reused: then we wait)
  kDead,     // on this host and in this PID namespace, and no such process, only a zombie,
             // or this very process under another incarnation (the pid is ours now)
  kUnknown,  // another host or PID namespace, or not a relay-PID@HOST name: only its lease
             // can tell
};

// Liveness of owner as seen from this process: unknown unless its host name and
// PID namespace are ours; then this process itself (same pid) is alive under its
// own incarnation and dead under any other; another pid is judged by
// /proc/PID/stat (a zombie, state Z or X, is dead), else kill(pid, 0) (ESRCH:
// dead). A name without a namespace (an older relay's) is judged by its pid on
// this host, as before. Still assumes that two machines do not share a host
// name: the initial PID namespace has the same inode on every Linux machine.
OwnerLiveness OwnerLivenessHere(const std::string& owner);

// What ReleaseDeadOwners released: the lease (token 0: none) and each owner's claims (rows:
// the rows released).
struct DeadOwnersReleased {
  LeaderLease lease;
  std::vector<ClaimOwner> claims;
};

// At a relay's start, before it claims anything: releases the live leader lease and the claims
// of every owner OwnerLivenessHere calls dead (a relay killed mid-batch; an earlier incarnation
// of our own pid), so their rows go out now instead of after the lease. Only what was read is
// released: the lease under the token read (Store::ReleaseLease), each owner's claims up to the
// newest token read (ReleaseClaimsOf), so a claim taken since stays its owner's. Owners of
// another host or PID namespace are never released. Throws what the store throws.
DeadOwnersReleased ReleaseDeadOwners(OutboxStore& store);

// "alive", "dead" or "unknown".
const char* OwnerLivenessName(OwnerLiveness liveness);

}  // namespace outbox::lab
