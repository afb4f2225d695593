// Failpoints: named places where a test can make the process crash, hold,
// sleep or fail, configured by the environment variable OUTBOX_FAILPOINTS in
// the fail-rs / gofail grammar:
//
//   OUTBOX_FAILPOINTS="name=[P%][N*]action[(arg)][->[P%][N*]action[(arg)]...];name2=..."
//
// Actions:
//   off    does nothing.
//   kill   prints "[failpoint] NAME KILL" on stderr (evidence that the point
//          was reached), then SIGKILLs this process on the spot.
//   hold   prints "[failpoint] NAME HOLD; kill -9 PID" (or the hold line the
//          caller passed to HitFailpoint, then "; kill -9 PID") on stdout,
//          flushed, and blocks until a signal ends the process. PID is this
//          process's own, so the line says exactly what to type (issue 15).
//   pause  prints "[failpoint] NAME PAUSE; kill -USR1 PID to release" on
//          stdout, then blocks until the process receives SIGUSR1, and returns:
//          a script waits for the line, does what must happen while the process
//          stands at the point, then releases it (no sleep window to win).
//          Each SIGUSR1 releases one pause; one sent before the PAUSE line is
//          dropped. A spec with a pause installs the SIGUSR1 handler (without
//          one, SIGUSR1 would terminate the process).
//   sleep(ms)  sleeps that many milliseconds and returns.
//   error  throws FailpointError. A term with N* applies to its next N evaluations, then
// the next term takes over; P% applies it with probability P (else the
// evaluation does nothing). Example: "relay.after_ack_before_mark=2*off->kill"
// kills the relay the third time it reaches that point.
//
// The registry is the project's only global. The library registers its own
// points (relay.*, purge.*); a program adds its own with RegisterFailpoints
// before it configures them (the lab: write.*, consume.*, the chapter's
// holds). When the variable is unset, Hit() costs one relaxed atomic load.
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

// Names and texts are string literals (the registry keeps the pointers).
struct FailpointInfo {
  const char* name;
  const char* durable;  // what is durable when the process stops at this point
  // True when a process reaches the point at most once (a command's final
  // hold): hit counts above 1 can never fire there.
  bool once = false;
};

// Every registered failpoint: the library's, then those registered, in
// registration order. Not thread-safe against RegisterFailpoints.
std::vector<FailpointInfo> AllFailpoints();

// Adds points to the registry; a name already registered is skipped, so a
// second call with the same list changes nothing. Call before
// ConfigureFailpoints names them. Throws ConfigError for a name without a '.'.
void RegisterFailpoints(const std::vector<FailpointInfo>& points);

// Parses spec (the grammar above) and makes it the active configuration,
// replacing any previous one; an empty spec disables every point. Throws
// ConfigError for a malformed spec or an unknown failpoint name, or when a
// pause action cannot install its SIGUSR1 handler (pipe2 or sigaction fails).
void ConfigureFailpoints(const std::string& spec);

// ConfigureFailpoints(getenv("OUTBOX_FAILPOINTS")) when the variable is set.
void ConfigureFailpointsFromEnv();

// The names the active configuration sets (e.g. "vfs.sync.wal"), sorted; empty
// when none is. Lets a program refuse points that cannot fire in this process.
std::vector<std::string> ConfiguredFailpoints();

// Evaluates the failpoint name. Call from the code at that point. May not
// return (kill, hold), may block until released (pause) or sleep, may throw
// FailpointError (error action; or pause when poll(2) fails). hold_line, when
// not empty, is what the hold action prints instead of "[failpoint] NAME HOLD",
// before "; kill -9 PID": the chapter's own words at its hold points, up to
// where the chapter says "me".
void HitFailpoint(std::string_view name, std::string_view hold_line = {});

// What a failpoint asks of a caller that must not throw (an SQLite VFS callback).
enum class FailpointOutcome { kNone, kError, kEnospc };

// Evaluates the failpoint name as HitFailpoint does, but never throws:
// kill, hold and sleep act on the spot as there; error returns kError, and
// the action enospc (disk full; HitFailpoint treats it as error) returns
// kEnospc. Used by the power-loss VFS shim for the vfs.* points.
FailpointOutcome QueryFailpoint(std::string_view name) noexcept;

}  // namespace outbox
