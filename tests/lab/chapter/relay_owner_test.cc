// Relay owners "relay-PID@HOST/PIDNS/INCARNATION": parsing, and liveness of a
// real process killed with SIGKILL (zombie and reaped), the current process,
// another host, another PID namespace, another incarnation of our pid; and
// which claims and leases a starting relay releases.
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "lab/chapter/relay_owner.h"
#include "outbox/store.h"
#include "relay_test_support.h"
#include "test_support.h"

using outbox::lab::DefaultRelayOwner;
using outbox::lab::OwnerLiveness;
using outbox::lab::OwnerLivenessHere;
using outbox::lab::ParseRelayOwner;

TEST_CASE("ParseRelayOwner reads relay-PID@HOST and rejects other names", "[lab]") {
  const auto owner = ParseRelayOwner("relay-4242@db-host-1");
  REQUIRE(owner.has_value());
  CHECK(owner->pid == 4242);
  CHECK(owner->host == "db-host-1");
  CHECK_FALSE(ParseRelayOwner("relay-4242").has_value());
  CHECK_FALSE(ParseRelayOwner("relay-@host").has_value());
  CHECK_FALSE(ParseRelayOwner("relay-12x@host").has_value());
  CHECK_FALSE(ParseRelayOwner("relay-0@host").has_value());
  CHECK_FALSE(ParseRelayOwner("relay-12@").has_value());
  CHECK_FALSE(ParseRelayOwner("my-relay").has_value());
}

TEST_CASE("A relay owner killed with SIGKILL is dead as a zombie and once reaped", "[lab]") {
  CHECK(OwnerLivenessHere(DefaultRelayOwner()) == OwnerLiveness::kAlive);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  const std::string self = DefaultRelayOwner();
  const std::string host = self.substr(self.find('@') + 1);
  const std::string owner = fmt::format("relay-{}@{}", child, host);
  CHECK(OwnerLivenessHere(owner) == OwnerLiveness::kAlive);
  REQUIRE(kill(child, SIGKILL) == 0);
  siginfo_t info{};
  // WNOWAIT: wait until it is dead but leave it a zombie.
  REQUIRE(waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT) == 0);
  CHECK(OwnerLivenessHere(owner) == OwnerLiveness::kDead);
  REQUIRE(waitpid(child, nullptr, 0) == child);
  CHECK(OwnerLivenessHere(owner) == OwnerLiveness::kDead);
  CHECK(OwnerLivenessHere(fmt::format("relay-{}@another-host-{}", child, host)) ==
        OwnerLiveness::kUnknown);
  CHECK(OwnerLivenessHere("relay-by-hand") == OwnerLiveness::kUnknown);
}

namespace {

// This process's owner name split into its parts.
outbox::lab::OwnerProcess Self() {
  const auto self = ParseRelayOwner(DefaultRelayOwner());
  REQUIRE(self.has_value());
  return *self;
}

std::string OwnerName(pid_t pid, const std::string& host, std::uint64_t pid_namespace,
                      const std::string& incarnation) {
  return fmt::format("relay-{}@{}/{}/{}", pid, host, pid_namespace, incarnation);
}

}  // namespace

TEST_CASE("ParseRelayOwner reads the PID namespace and incarnation after the host", "[lab]") {
  const auto owner = ParseRelayOwner("relay-1@db-host-1/4026532179/9f3c2a1b7e4d0c55");
  REQUIRE(owner.has_value());
  CHECK(owner->pid == 1);
  CHECK(owner->host == "db-host-1");
  CHECK(owner->pid_namespace == 4026532179u);
  CHECK(owner->incarnation == "9f3c2a1b7e4d0c55");
  CHECK_FALSE(ParseRelayOwner("relay-1@db-host-1/").has_value());
  CHECK_FALSE(ParseRelayOwner("relay-1@db-host-1/0/ab").has_value());
  CHECK_FALSE(ParseRelayOwner("relay-1@db-host-1/12x/ab").has_value());
  CHECK_FALSE(ParseRelayOwner("relay-1@db-host-1/12/").has_value());
  CHECK_FALSE(ParseRelayOwner("relay-1@/12/ab").has_value());
  const outbox::lab::OwnerProcess self = Self();
  CHECK(self.pid == getpid());
  CHECK(self.pid_namespace > 0);
  CHECK(self.incarnation.size() == 16);
  CHECK(DefaultRelayOwner() == DefaultRelayOwner());  // one incarnation per process
}

TEST_CASE("A relay with our host name and pid is unknown in another PID namespace and dead in "
          "ours under another incarnation",
          "[lab]") {
  const outbox::lab::OwnerProcess self = Self();
  CHECK(OwnerLivenessHere(DefaultRelayOwner()) == OwnerLiveness::kAlive);
  // Two containers with one host name: both relays may be PID 1. From here the other one's
  // pid is ours, and only its namespace tells it apart: it is not ours to judge.
  CHECK(OwnerLivenessHere(OwnerName(self.pid, self.host, self.pid_namespace + 1, "0123456789abcdef")) ==
        OwnerLiveness::kUnknown);
  CHECK(OwnerLivenessHere(OwnerName(self.pid, self.host, self.pid_namespace + 1, self.incarnation)) ==
        OwnerLiveness::kUnknown);
  // In our namespace our pid is ours: any other incarnation of it is a relay that died.
  CHECK(OwnerLivenessHere(OwnerName(self.pid, self.host, self.pid_namespace, "0123456789abcdef")) ==
        OwnerLiveness::kDead);
}

TEST_CASE("ReleaseDeadOwners leaves the claims and lease of a relay with our host name and pid in "
          "another PID namespace",
          "[lab]") {
  const outbox::lab::OwnerProcess self = Self();
  const std::string other_namespace =
      OwnerName(self.pid, self.host, self.pid_namespace + 1, "0123456789abcdef");
  const std::string earlier_self =
      OwnerName(self.pid, self.host, self.pid_namespace, "fedcba9876543210");
  outbox::testing::TempDir dir;
  outbox::testing::FakeClock clock;
  outbox::StoreOptions options = outbox::testing::FastStoreOptions();
  options.clock = &clock;
  outbox::Store store(dir.File("lab.db"), options, outbox::OpenMode::kCreate);
  store.ResetSchema();
  outbox::testing::EnqueueRange(store, 1, 4);
  outbox::ClaimRequest request;
  request.limit = 2;
  request.lease_ms = 30000;
  request.now_ms = clock.EpochMs();
  request.owner = other_namespace;
  REQUIRE(store.ClaimBatch(request).rows.size() == 2);
  request.owner = earlier_self;
  REQUIRE(store.ClaimBatch(request).rows.size() == 2);
  REQUIRE(store.AcquireLease(other_namespace, 30000, clock.EpochMs()).acquired);

  const outbox::lab::DeadOwnersReleased released = outbox::lab::ReleaseDeadOwners(store);

  CHECK(released.lease.token == 0);
  CHECK(store.ReadLease().owner == other_namespace);
  REQUIRE(released.claims.size() == 1);
  CHECK(released.claims[0].owner == earlier_self);
  CHECK(released.claims[0].rows == 2);
  const auto owners = store.ClaimOwners(clock.EpochMs());
  REQUIRE(owners.size() == 1);
  CHECK(owners[0].owner == other_namespace);
  CHECK(owners[0].rows == 2);

  SECTION("the lease of an earlier incarnation of our pid is released") {
    REQUIRE(store.ReleaseLease(store.ReadLease().token));
    REQUIRE(store.AcquireLease(earlier_self, 30000, clock.EpochMs()).acquired);
    CHECK(outbox::lab::ReleaseDeadOwners(store).lease.owner == earlier_self);
    CHECK_FALSE(store.ReadLease().Live(clock.EpochMs()));
  }
}
