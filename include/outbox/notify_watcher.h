// NotifyWatcher: the relay's idle wait on PostgreSQL. It LISTENs on the outbox's wake channel
// (PgStore::wake_channel) over a connection of its own and sleeps in poll(2) on that socket and
// the stop descriptor, so a writer's commit that enqueued a row (PgStore::Enqueue sends
// pg_notify in the writer's transaction; PostgreSQL delivers it on commit, never for a rollback)
// wakes the relay at once, and an idle relay spends no CPU.
// https://www.postgresql.org/docs/15/sql-notify.html
//
// A notification is only a hint: the relay's poll (the loop's idle backoff, up to --idle-max) stays
// the fallback, so a writer that does not notify (raw SQL, another program) is still picked up
// within one poll interval, and a notification lost with the connection costs one interval at
// most. When the listening connection breaks, Wait sleeps its timeout (a plain poll) and tries
// to connect and LISTEN again, at most once per kReconnectEveryMs.
//
// Owns its connection. Not thread-safe.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "outbox/pg/connection.h"
#include "outbox/relay.h"

namespace outbox {

class NotifyWatcher : public IdleWaiter {
 public:
  // The least time between two attempts to connect the listening connection again, ms.
  static constexpr int kReconnectEveryMs = 1000;

  // url: the server (libpq URL, the relay's --db); channel: the channel to LISTEN on
  // (PgStore::wake_channel, at most 63 bytes). stop_fd: a descriptor that becomes readable on a
  // stop request (a signalfd for SIGTERM and SIGINT), or -1 for none; not owned.
  // Throws pg::PgError when the server cannot be reached or LISTEN fails.
  NotifyWatcher(const std::string& url, std::string channel, int stop_fd);

  // Reads and discards every notification received so far.
  void ForgetWakeups() override;
  // Blocks up to timeout_ms (ms): kChanged on a notification of the channel (received during the
  // wait or before it and not forgotten), kStop on a stop request, kTimeout otherwise (also
  // while the listening connection is down). Never throws.
  Wake Wait(int timeout_ms) override;
  bool StopRequested() override;

  // Notifications seen (each counted once, forgotten or not); for tests and figures.
  long notifications() const noexcept { return notifications_; }
  // True while the listening connection is up.
  bool listening() const noexcept { return connection_.has_value(); }

 private:
  void Listen();            // connects and LISTENs; throws pg::PgError
  bool Drain();             // reads what arrived; true when a notification came; drops a broken connection
  void ReconnectIfDue();    // Listen() at most once per kReconnectEveryMs, errors swallowed

  std::string url_;
  std::string channel_;
  int stop_fd_ = -1;  // not owned
  std::optional<pg::Connection> connection_;  // empty while broken
  std::chrono::steady_clock::time_point last_attempt_{};
  long notifications_ = 0;
};

}  // namespace outbox
