#include "outbox/clock.h"

#include <chrono>

namespace outbox {

std::int64_t SystemClock::EpochMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

std::int64_t SystemClock::MonotonicUs() {
  using namespace std::chrono;
  return duration_cast<microseconds>(steady_clock::now().time_since_epoch()).count();
}

std::int64_t ManualClock::EpochMs() { return epoch_us_.load() / 1000; }

std::int64_t ManualClock::MonotonicUs() { return monotonic_us_.load(); }

void ManualClock::AdvanceMs(std::int64_t ms) {
  if (ms <= 0) return;
  epoch_us_ += ms * 1000;
  monotonic_us_ += ms * 1000;
}

}  // namespace outbox
