#include "outbox/change_watcher.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "outbox/error.h"

namespace outbox {

ChangeWatcher::ChangeWatcher(const std::string& db_path, int stop_fd) : stop_fd_(stop_fd) {
  const std::filesystem::path path(db_path);
  db_name_ = path.filename().string();
  wal_name_ = db_name_ + "-wal";
  const std::string dir = path.has_parent_path() ? path.parent_path().string() : ".";
  inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_fd_ < 0) ThrowSystemError("inotify_init1", errno);
  if (inotify_add_watch(inotify_fd_, dir.c_str(), IN_MODIFY | IN_CREATE | IN_MOVED_TO) < 0) {
    const int err = errno;
    close(inotify_fd_);
    ThrowSystemError(fmt::format("watch directory '{}'", dir), err);
  }
}

ChangeWatcher::~ChangeWatcher() {
  if (inotify_fd_ >= 0) close(inotify_fd_);
}

bool ChangeWatcher::ReadEvents() {
  bool relevant = false;
  alignas(inotify_event) char buffer[4096];
  for (;;) {
    const ssize_t n = read(inotify_fd_, buffer, sizeof buffer);
    if (n <= 0) return relevant;  // EAGAIN: nothing more
    for (ssize_t offset = 0; offset < n;) {
      const auto* event = reinterpret_cast<const inotify_event*>(buffer + offset);
      if (event->len > 0 && (db_name_ == event->name || wal_name_ == event->name)) relevant = true;
      offset += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
    }
  }
}

void ChangeWatcher::ForgetWakeups() { ReadEvents(); }

bool ChangeWatcher::StopRequested() {
  if (stop_fd_ < 0) return false;
  pollfd fd{stop_fd_, POLLIN, 0};
  return poll(&fd, 1, 0) > 0 && (fd.revents & POLLIN);
}

IdleWaiter::Wake ChangeWatcher::Wait(int timeout_ms) {
  pollfd fds[2] = {{inotify_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  const int count = stop_fd_ >= 0 ? 2 : 1;
  if (poll(fds, count, timeout_ms) <= 0) return Wake::kTimeout;  // EINTR counts as a timeout
  if (count == 2 && (fds[1].revents & POLLIN)) return Wake::kStop;
  return ReadEvents() ? Wake::kChanged : Wake::kTimeout;
}

}  // namespace outbox
