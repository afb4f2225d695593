// ChangeWatcher: the relay's idle wait. Sleeps in poll(2) on an inotify
// watch of the database's directory, so a writer's commit (which appends to
// the -wal file, or to the database file in rollback-journal mode) wakes the
// relay at once, and an idle relay spends no CPU. Linux only.
//
// Owns its inotify descriptor. Not thread-safe.
#pragma once

#include <string>

#include "outbox/relay.h"

namespace outbox {

class ChangeWatcher : public IdleWaiter {
 public:
  // db_path: the SQLite file to watch (and its -wal). stop_fd: a descriptor
  // that becomes readable on a stop request (e.g. a signalfd for SIGTERM and
  // SIGINT), or -1 for none. Throws SystemError when inotify is unavailable or the directory cannot be watched.
  ChangeWatcher(const std::string& db_path, int stop_fd);
  ~ChangeWatcher() override;
  ChangeWatcher(const ChangeWatcher&) = delete;
  ChangeWatcher& operator=(const ChangeWatcher&) = delete;

  void ForgetWakeups() override;
  Wake Wait(int timeout_ms) override;
  bool StopRequested() override;

 private:
  bool ReadEvents();  // true when an event concerned our files

  int inotify_fd_ = -1;
  int stop_fd_ = -1;  // not owned
  std::string db_name_;
  std::string wal_name_;
};

}  // namespace outbox
