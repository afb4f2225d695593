// Hold points: the chapter's "HOLD ...; kill -9 me" lines.
#pragma once

#include <string_view>

namespace outbox::lab {

// Prints line to stdout, flushes it, then blocks without spinning until a
// signal ends the process (the lab expects kill -9). Everything the caller
// did before calling is already committed or acknowledged.
[[noreturn]] void HoldUntilKilled(std::string_view line);

}  // namespace outbox::lab
