#include "outbox/notify_watcher.h"

#include <fmt/format.h>
#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>

namespace outbox {

NotifyWatcher::NotifyWatcher(const std::string& url, std::string channel, int stop_fd)
    : url_(url), channel_(std::move(channel)), stop_fd_(stop_fd) {
  last_attempt_ = std::chrono::steady_clock::now();
  Listen();
}

void NotifyWatcher::Listen() {
  pg::Connection connection(url_);
  // The channel is an identifier in LISTEN: quoted by libpq, never spliced raw.
  std::unique_ptr<char, decltype(&PQfreemem)> quoted(
      PQescapeIdentifier(connection.get(), channel_.data(), channel_.size()), &PQfreemem);
  if (!quoted)
    throw pg::PgError(fmt::format("quote channel '{}': {}", channel_,
                                  PQerrorMessage(connection.get())),
                      "");
  connection.Exec(std::string("LISTEN ") + quoted.get(), fmt::format("listen on '{}'", channel_));
  connection_ = std::move(connection);
}

bool NotifyWatcher::Drain() {
  if (!connection_) return false;
  PGconn* conn = connection_->get();
  if (PQconsumeInput(conn) == 0) {
    connection_.reset();  // the server or the network went away: poll until it is back
    return false;
  }
  bool woke = false;
  while (PGnotify* notify = PQnotifies(conn)) {
    woke = woke || channel_ == notify->relname;
    ++notifications_;
    PQfreemem(notify);
  }
  return woke;
}

void NotifyWatcher::ReconnectIfDue() {
  if (connection_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_attempt_ < std::chrono::milliseconds(kReconnectEveryMs)) return;
  last_attempt_ = now;
  try {
    Listen();
  } catch (const pg::PgError&) {
    // Still down: the relay polls meanwhile, and its own connection reports the outage.
  }
}

void NotifyWatcher::ForgetWakeups() {
  ReconnectIfDue();
  Drain();
}

bool NotifyWatcher::StopRequested() {
  if (stop_fd_ < 0) return false;
  pollfd fd{stop_fd_, POLLIN, 0};
  return poll(&fd, 1, 0) > 0 && (fd.revents & POLLIN);
}

IdleWaiter::Wake NotifyWatcher::Wait(int timeout_ms) {
  ReconnectIfDue();
  // A notification read before this wait (libpq buffers what it parsed) wakes at once.
  if (Drain()) return Wake::kChanged;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    pollfd fds[2] = {{stop_fd_, POLLIN, 0}, {-1, POLLIN, 0}};
    if (connection_) fds[1].fd = PQsocket(connection_->get());
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    const int wait_ms = static_cast<int>(std::max<std::int64_t>(0, left.count()));
    // poll(2) skips entries whose fd is negative.
    if (poll(fds, 2, wait_ms) <= 0) return Wake::kTimeout;  // EINTR counts as a timeout
    if (fds[0].revents & POLLIN) return Wake::kStop;
    if (Drain()) return Wake::kChanged;
    // Another channel's notification, or the connection broke (then the next poll watches the
    // stop descriptor only): wait out the rest.
  }
}

}  // namespace outbox
