// Clock: the one source of time for the store, the relays and the lab, so a
// test can move time for every component at once (leveldb's Env::NowMicros is
// the model). Pass one Clock to the Store (StoreOptions::clock) and the Relay
// (RelayOptions::clock, defaulting to the store's); the lab's writer, consumer
// and history take it from the store or their options.
//
// Implementations must be thread-safe: the relay's delivery thread and the
// main thread may read one clock at once. Callers never own a Clock* they are
// given: the clock must outlive every Store, Relay or History using it.
#pragma once

#include <atomic>
#include <cstdint>

namespace outbox {

class Clock {
 public:
  virtual ~Clock() = default;

  // Wall-clock time, ms since the Unix epoch. What rows store (created_at,
  // published_at, next_attempt_at, claim_until, archived_at) and histories
  // print. May jump when the system time is set.
  virtual std::int64_t EpochMs() = 0;

  // Monotonic time, µs since an arbitrary start: for timeouts and durations.
  // Never goes back.
  virtual std::int64_t MonotonicUs() = 0;
};

// std::chrono::system_clock and std::chrono::steady_clock.
class SystemClock final : public Clock {
 public:
  std::int64_t EpochMs() override;
  std::int64_t MonotonicUs() override;
};

// A clock that moves only when told to, for tests and for replaying a run:
// Advance moves both readings by the same amount. Thread-safe.
class ManualClock : public Clock {
 public:
  // Starts at epoch_ms (wall) and 0 µs (monotonic).
  explicit ManualClock(std::int64_t epoch_ms) : epoch_us_(epoch_ms * 1000) {}

  std::int64_t EpochMs() override;
  std::int64_t MonotonicUs() override;

  // Moves both readings forward by ms (>= 0; a negative ms is ignored).
  void AdvanceMs(std::int64_t ms);

 private:
  std::atomic<std::int64_t> epoch_us_;
  std::atomic<std::int64_t> monotonic_us_{0};
};

}  // namespace outbox
