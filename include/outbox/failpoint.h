// Failpoints: named places where a test can make the process crash, hold,
// sleep or fail, configured by the environment variable OUTBOX_FAILPOINTS in
// the fail-rs / gofail grammar:
//
//   OUTBOX_FAILPOINTS="name=[P%][N*]action[(arg)][->[P%][N*]action[(arg)]...];name2=..."
//
// Actions: off, kill (SIGKILL this process on the spot), hold (print
// "[failpoint] NAME HOLD; kill -9 me" and block), sleep(ms), error (throw
// FailpointError). A term with N* applies to its next N evaluations, then
// the next term takes over; P% applies it with probability P (else the
// evaluation does nothing). Example: "relay.after_ack_before_mark=2*off->kill"
// kills the relay the third time it reaches that point.
//
// The registry is the project's only global. When the variable is unset, Hit()
// costs one relaxed atomic load.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "outbox/error.h"

namespace outbox {

// Thrown by the `error` action.
class FailpointError : public Error {
 public:
  using Error::Error;
};

struct FailpointInfo {
  const char* name;
  const char* durable;  // what is durable when the process stops at this point
};

// Every failpoint, in the order a loan travels through them.
const std::vector<FailpointInfo>& AllFailpoints();

// Parses spec (the grammar above) and makes it the active configuration,
// replacing any previous one; an empty spec disables every point. Throws
// ConfigError for a malformed spec or an unknown failpoint name.
void ConfigureFailpoints(const std::string& spec);

// ConfigureFailpoints(getenv("OUTBOX_FAILPOINTS")) when the variable is set.
void ConfigureFailpointsFromEnv();

// Evaluates the failpoint name. Call from the code at that point. May not
// return (kill, hold), may sleep, may throw FailpointError.
void HitFailpoint(std::string_view name);

}  // namespace outbox
