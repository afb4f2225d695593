#include "cli/stop_signal.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>

#include "outbox/error.h"

namespace outbox::cli {

StopSignalFd::StopSignalFd() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  fd_ = signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd_ < 0) ThrowSystemError("signalfd", errno);
}

StopSignalFd::~StopSignalFd() { close(fd_); }

bool StopSignalFd::Received() {
  signalfd_siginfo info;
  if (!received_ && read(fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info))
    received_ = true;
  return received_;
}

void StopSignalFd::Unblock() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_UNBLOCK, &signals, nullptr);
}

}  // namespace outbox::cli
