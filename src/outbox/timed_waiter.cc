#include "outbox/timed_waiter.h"

#include <poll.h>
#include <unistd.h>

namespace outbox {

bool TimedWaiter::StopRequested() {
  if (stop_fd_ < 0) return false;
  pollfd fd{stop_fd_, POLLIN, 0};
  return poll(&fd, 1, 0) > 0 && (fd.revents & POLLIN);
}

IdleWaiter::Wake TimedWaiter::Wait(int timeout_ms) {
  if (stop_fd_ < 0) {
    poll(nullptr, 0, timeout_ms);
    return Wake::kTimeout;
  }
  pollfd fd{stop_fd_, POLLIN, 0};
  if (poll(&fd, 1, timeout_ms) > 0 && (fd.revents & POLLIN)) return Wake::kStop;
  return Wake::kTimeout;  // EINTR counts as a timeout
}

}  // namespace outbox
