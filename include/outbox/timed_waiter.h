// TimedWaiter: the relay's idle wait where no file can be watched (a PostgreSQL server on another
// host): it sleeps in poll(2) on the stop descriptor only, so a writer's commit is seen at the next
// poll, within the loop's idle backoff (LoopOptions::idle_min_ms .. idle_max_ms), and a stop
// request wakes it at once. Owns nothing. Not thread-safe.
#pragma once

#include "outbox/relay.h"

namespace outbox {

class TimedWaiter : public IdleWaiter {
 public:
  // stop_fd: a descriptor that becomes readable on a stop request (a signalfd for SIGTERM and
  // SIGINT, say), or -1 for none. Not owned.
  explicit TimedWaiter(int stop_fd) : stop_fd_(stop_fd) {}

  void ForgetWakeups() override {}
  // Sleeps timeout_ms (ms) or until a stop request: kTimeout or kStop, never kChanged.
  Wake Wait(int timeout_ms) override;
  bool StopRequested() override;

 private:
  int stop_fd_;
};

}  // namespace outbox
