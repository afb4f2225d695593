#include "lab/chapter/hold.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace outbox::lab {

void HoldUntilKilled(std::string_view line) {
  fmt::print("{}; kill -9 {}\n", line, getpid());
  std::fflush(stdout);
  for (;;) pause();  // pause() returns only after a handled signal; keep holding
}

}  // namespace outbox::lab
