// Subprocess: a child process started with fork/exec, for the bench's
// embedded broker and relay children (as ninja's subprocess.h). The parent
// owns the child: the destructor stops one still running (SIGTERM, then
// SIGKILL after 5 s) and reaps it. Not thread-safe: one owner thread.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <vector>

namespace outbox::lab {

// Owns one file descriptor; closes it on destruction.
class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) noexcept : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const noexcept { return fd_; }
  void Reset() noexcept {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

struct ChildExit {
  int status = 0;         // as from waitpid
  long peak_rss_kib = 0;  // VmHWM of the child's own image, KiB (WaitTrackingPeakRss only)
};

// VmHWM (peak resident set of the current image) from /proc/PID/status, KiB;
// 0 when the process is gone.
long ReadPeakRssKib(pid_t pid);

// CPU time a process has used so far, in clock ticks (sysconf(_SC_CLK_TCK)
// per second, 100 on Linux): utime + stime, fields 14 and 15 of
// /proc/PID/stat (proc(5)), summed over all its threads. -1 when the process
// is gone or the line cannot be read.
long ReadCpuTicks(pid_t pid);
// The same from the text of one /proc/PID/stat line. The command name (field
// 2) is in parentheses and may itself hold spaces and ')', so the fields are
// counted from the last ')'. -1 when the line is too short or malformed.
long ParseCpuTicks(const std::string& stat_line);

// "exit status 3", "signal 9" or "wait status N" for a waitpid status.
std::string DescribeStatus(int status);

class ChildProcess {
 public:
  // Runs args[0] (a path; no PATH search) with args; stdout goes to
  // stdout_path (created or truncated), stdin comes from /dev/null, stderr is
  // ours. The child gets PR_SET_PDEATHSIG(SIGTERM), so it dies with us even
  // when we are killed with -9. Throws SystemError when stdout_path cannot be
  // opened, or fork or exec fails (exec's errno is reported back through a
  // close-on-exec pipe, so a missing program fails here, not later).
  ChildProcess(const std::vector<std::string>& args, const std::string& stdout_path);
  // Stops a child still running: SIGTERM, then SIGKILL after 5 s; reaps it.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Blocks until the child exits.
  ChildExit Wait();

  // Waits for the child, reading its VmHWM every interval_ms; the last read
  // before exit is its peak (VmHWM never falls). Not wait4's ru_maxrss: Linux
  // folds the forked copy of our own image into it at exec, so it reports
  // at least our RSS at fork time.
  // on_sample (may be empty) runs after each read.
  ChildExit WaitTrackingPeakRss(int interval_ms, const std::function<void()>& on_sample = {});

  // True (and reaped) when the child has exited; never blocks.
  bool TryWait();

  // The child's pid while it runs; -1 once reaped.
  pid_t pid() const noexcept { return pid_; }
  int last_status() const noexcept { return last_status_; }

 private:
  pid_t pid_ = -1;
  int last_status_ = 0;
};

}  // namespace outbox::lab
