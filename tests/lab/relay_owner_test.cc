// Relay owners "relay-PID@HOST": parsing, and liveness of a real process
// killed with SIGKILL (zombie and reaped), the current process, another host.
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "lab/relay_owner.h"

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
