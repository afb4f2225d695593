// UniqueFd: owns one POSIX file descriptor and closes it on destruction
// (RAII for the power-loss side log and the files power-cut rewrites).
// Move-only; not thread-safe.
#pragma once

#include <unistd.h>

namespace outbox::lab {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = other.release();
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
  }

  // The descriptor, or -1; still owned by this object.
  int get() const noexcept { return fd_; }
  // Gives up ownership: returns the descriptor (or -1) and forgets it.
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  explicit operator bool() const noexcept { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace outbox::lab
