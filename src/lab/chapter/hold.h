// Hold points: the chapter's "HOLD ...; kill -9 me" lines, with this process's
// PID where the chapter says "me" (issue 15: the line names what to kill).
#pragma once

#include <string_view>

namespace outbox::lab {

// Prints line and "; kill -9 PID" (this process) to stdout, flushes it, then
// blocks without spinning until a signal ends the process (the lab expects
// kill -9). Everything the caller did before calling is already committed or
// acknowledged.
[[noreturn]] void HoldUntilKilled(std::string_view line);

}  // namespace outbox::lab
