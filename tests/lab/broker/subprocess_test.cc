// ChildProcess: output to a file, exit status, exec failure as SystemError,
// and a destructor that stops and reaps a child still running.
#include "lab/broker/subprocess.h"

#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <string>

#include "outbox/error.h"
#include "test_support.h"

using outbox::lab::ChildProcess;
using outbox::testing::TempDir;

TEST_CASE("ChildProcess sends the child's stdout to a file and reports its exit status",
          "[bench]") {
  TempDir dir;
  const std::string out = dir.File("child.out");
  ChildProcess child({"/bin/sh", "-c", "echo hello from the child; exit 3"}, out);
  REQUIRE(child.pid() > 0);
  const outbox::lab::ChildExit exit = child.Wait();
  REQUIRE(WIFEXITED(exit.status));
  CHECK(WEXITSTATUS(exit.status) == 3);
  CHECK(outbox::lab::DescribeStatus(exit.status) == "exit status 3");
  CHECK(outbox::testing::ReadFileBytes(out) == "hello from the child\n");
  CHECK(child.pid() == -1);
  CHECK(child.TryWait());
}

TEST_CASE("ChildProcess throws SystemError when the program cannot be executed", "[bench]") {
  TempDir dir;
  const auto error = outbox::testing::CaptureThrow<outbox::SystemError>(
      [&] { ChildProcess child({dir.File("no-such-program")}, dir.File("child.out")); });
  REQUIRE(error.has_value());
  CHECK(error->errno_value() == ENOENT);
  CHECK_THAT(error->what(), Catch::Contains("no-such-program"));
}

TEST_CASE("ChildProcess stops and reaps a running child when it goes out of scope", "[bench]") {
  TempDir dir;
  pid_t pid = -1;
  {
    ChildProcess child({"/bin/sleep", "60"}, dir.File("sleep.out"));
    pid = child.pid();
    REQUIRE(pid > 0);
    CHECK_FALSE(child.TryWait());
  }
  // Reaped: the pid no longer names a child of ours.
  CHECK(waitpid(pid, nullptr, WNOHANG) == -1);
  CHECK(errno == ECHILD);
}

TEST_CASE("WaitTrackingPeakRss reads a positive peak RSS of a short-lived child", "[bench]") {
  TempDir dir;
  ChildProcess child({"/bin/sh", "-c", "sleep 0.2"}, dir.File("child.out"));
  const outbox::lab::ChildExit exit = child.WaitTrackingPeakRss(10);
  REQUIRE(WIFEXITED(exit.status));
  CHECK(WEXITSTATUS(exit.status) == 0);
  CHECK(exit.peak_rss_kib > 0);
}

TEST_CASE("ParseCpuTicks adds utime and stime and counts fields after the last parenthesis",
          "[bench]") {
  // A real line's shape (proc(5)), with a command name holding spaces and ')'.
  const std::string line =
      "4242 (my (odd) relay) S 1 4242 4242 0 -1 4194560 1234 0 0 0 37 5 0 0 20 0 9 0 "
      "12345 123456789 4000 18446744073709551615";
  CHECK(outbox::lab::ParseCpuTicks(line) == 42);
  CHECK(outbox::lab::ParseCpuTicks("4242 (relay) S 1 2 3") == -1);
  CHECK(outbox::lab::ParseCpuTicks("no parenthesis at all") == -1);
  CHECK(outbox::lab::ParseCpuTicks("1 (x) S 1 1 1 0 -1 0 0 0 0 0 abc 5 0") == -1);
}

TEST_CASE("ReadCpuTicks reads this process and gives -1 for a reaped child", "[bench]") {
  TempDir dir;
  CHECK(outbox::lab::ReadCpuTicks(getpid()) >= 0);
  ChildProcess child({"/bin/true"}, dir.File("true.out"));
  const pid_t pid = child.pid();
  child.Wait();
  CHECK(outbox::lab::ReadCpuTicks(pid) == -1);
}
