#include "lab/broker/subprocess.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "outbox/error.h"

namespace outbox::lab {
namespace {

constexpr int kChildStopTimeoutMs = 5000;

[[noreturn]] void ThrowErrno(const std::string& what) { ThrowSystemError(what, errno); }

}  // namespace

// VmHWM (peak resident set of the current image) from /proc/PID/status, KiB;
// 0 when the process is gone.
long ReadPeakRssKib(pid_t pid) {
  std::ifstream status(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  return 0;
}

long ReadCpuTicks(pid_t pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return -1;
  return ParseCpuTicks(line);
}

long ParseCpuTicks(const std::string& stat_line) {
  const std::size_t close = stat_line.rfind(')');
  if (close == std::string::npos) return -1;
  // After "pid (comm)" come field 3 (state) onwards: utime is field 14, stime 15.
  std::istringstream fields(stat_line.substr(close + 1));
  std::string field;
  long ticks = 0;
  for (int number = 3; number <= 15; ++number) {
    if (!(fields >> field)) return -1;
    if (number < 14) continue;
    char* end = nullptr;
    const long value = std::strtol(field.c_str(), &end, 10);
    if (end == field.c_str() || *end != '\0' || value < 0) return -1;
    ticks += value;
  }
  return ticks;
}

std::string DescribeStatus(int status) {
  if (WIFEXITED(status)) return fmt::format("exit status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("signal {}", WTERMSIG(status));
  return fmt::format("wait status {}", status);
}

// Only async-signal-safe calls between fork and exec in the child: other
// threads may hold locks.
ChildProcess::ChildProcess(const std::vector<std::string>& args, const std::string& stdout_path) {
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  UniqueFd out(open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (out.get() < 0) ThrowErrno(fmt::format("open '{}'", stdout_path));
  UniqueFd in(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (in.get() < 0) ThrowErrno("open '/dev/null'");
  // exec failure is reported through this close-on-exec pipe: EOF means exec succeeded.
  int ends[2] = {-1, -1};
  if (pipe2(ends, O_CLOEXEC) != 0) ThrowErrno("pipe2");
  UniqueFd report_read(ends[0]);
  UniqueFd report_write(ends[1]);
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ < 0) ThrowErrno(fmt::format("start '{}'", args[0]));
  if (pid_ == 0) {
    // Only async-signal-safe calls from here to exec: other threads may hold locks.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);  // the parent died before prctl
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(in.get(), STDIN_FILENO);
    dup2(out.get(), STDOUT_FILENO);
    execv(argv[0], argv.data());
    const int err = errno;
    [[maybe_unused]] const ssize_t ignored = write(report_write.get(), &err, sizeof err);
    _exit(127);
  }
  report_write.Reset();  // so read() sees EOF once the child has exec'd
  int exec_errno = 0;
  ssize_t n;
  while ((n = read(report_read.get(), &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  if (n == static_cast<ssize_t>(sizeof exec_errno)) {
    Wait();
    errno = exec_errno;
    ThrowErrno(fmt::format("execute '{}'", args[0]));
  }
}

ChildProcess::~ChildProcess() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  for (int waited_ms = 0; waited_ms < kChildStopTimeoutMs; waited_ms += 10) {
    if (TryWait()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid_, SIGKILL);
  Wait();
}

ChildExit ChildProcess::Wait() {
  ChildExit exit;
  if (pid_ <= 0) return exit;
  while (waitpid(pid_, &exit.status, 0) < 0 && errno == EINTR) {
  }
  last_status_ = exit.status;
  pid_ = -1;
  return exit;
}

ChildExit ChildProcess::WaitTrackingPeakRss(int interval_ms,
                                            const std::function<void()>& on_sample) {
  ChildExit exit;
  while (pid_ > 0) {
    exit.peak_rss_kib = std::max(exit.peak_rss_kib, ReadPeakRssKib(pid_));
    if (on_sample) on_sample();
    if (TryWait()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
  }
  exit.status = last_status_;
  return exit;
}

bool ChildProcess::TryWait() {
  if (pid_ <= 0) return true;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
  last_status_ = status;
  pid_ = -1;
  return true;
}

}  // namespace outbox::lab
