// A signalfd for SIGTERM and SIGINT, so that a stop request (Ctrl-C, a
// service manager's SIGTERM) is read as data at a safe point instead of
// killing the process between a broker's ack and the row's mark.
#pragma once

namespace outbox::cli {

class StopSignalFd {
 public:
  // Blocks SIGTERM and SIGINT for this thread and every thread started
  // afterwards (librdkafka's too: construct it before any publisher), so they
  // arrive only here. Throws SystemError when signalfd(2) fails.
  StopSignalFd();
  ~StopSignalFd();
  StopSignalFd(const StopSignalFd&) = delete;
  StopSignalFd& operator=(const StopSignalFd&) = delete;

  // The descriptor, readable once a signal is pending (for poll(2)).
  int get() const noexcept { return fd_; }

  // True once SIGTERM or SIGINT arrived; never blocks. Consumes the pending
  // signal from the descriptor, and stays true afterwards.
  bool Received();

  // Unblocks SIGTERM and SIGINT for this thread again, so they terminate as by default (e.g.
  // Ctrl-C at a hold point after the work this descriptor guarded).
  void Unblock();

 private:
  int fd_ = -1;
  bool received_ = false;
};

}  // namespace outbox::cli
