// Failpoints: the OUTBOX_FAILPOINTS grammar (fail-rs style), errors for
// malformed specs, and the schedule of the `error` action. In this process
// only actions that return (off, sleep, error) are hit; kill and pause are hit
// in a forked child, whose output the test reads from a pipe. Every test
// clears the global registry on exit.
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "outbox/error.h"
#include "outbox/failpoint.h"
#include "outbox/sqlite/connection.h"
#include "outbox/store.h"
#include "relay_test_support.h"
#include "test_support.h"

namespace {

using outbox::ConfigError;
using outbox::ConfigureFailpoints;
using outbox::FailpointError;
using outbox::HitFailpoint;
using outbox::testing::CaptureThrow;
using outbox::testing::FailpointReset;

constexpr const char* kPoint = "write.before_commit";
constexpr const char* kOtherPoint = "relay.after_claim";

// Hits name n times; returns for each hit whether it threw FailpointError.
std::vector<bool> Throws(const std::string& name, int n) {
  std::vector<bool> thrown;
  for (int i = 0; i < n; ++i)
    thrown.push_back(CaptureThrow<FailpointError>([&] { HitFailpoint(name); }).has_value());
  return thrown;
}

// A forked child that runs body with stdout and stderr sent to one pipe; the
// parent reads its lines. The destructor reaps a child the test left running.
class Child {
 public:
  explicit Child(const std::function<void()>& body) {
    std::fflush(stdout);  // the child must not inherit and re-flush Catch's buffered output
    std::fflush(stderr);
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);
      close(fds[0]);
      close(fds[1]);
      try {
        body();
      } catch (...) {
        _exit(3);
      }
      std::fflush(stdout);
      _exit(0);
    }
    close(fds[1]);
    out_ = fds[0];
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      Wait();
    }
    close(out_);
  }

  pid_t pid() const { return pid_; }

  // The next line of the child's output without its newline; blocks until it
  // arrives; empty at end of output.
  std::string ReadLine() {
    std::string line;
    char c;
    while (read(out_, &c, 1) == 1 && c != '\n') line += c;
    return line;
  }

  // True when the child printed nothing more within ms milliseconds.
  bool QuietFor(int ms) {
    pollfd readable = {out_, POLLIN, 0};
    return poll(&readable, 1, ms) == 0;
  }

  bool Running() {
    int status = 0;
    return waitpid(pid_, &status, WNOHANG) == 0;
  }

  // waitpid's status.
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped_ = true;
    return status;
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  bool reaped_ = false;
};

}  // namespace

TEST_CASE("AllFailpoints lists unique dotted names each with what is durable there",
          "[failpoint]") {
  const auto& points = outbox::AllFailpoints();
  REQUIRE(points.size() >= 7);
  std::vector<std::string> names;
  for (const auto& point : points) {
    INFO("failpoint " << point.name);
    CHECK(std::string(point.name).find('.') != std::string::npos);
    CHECK_FALSE(std::string(point.durable).empty());
    CHECK(std::count(names.begin(), names.end(), point.name) == 0);
    names.emplace_back(point.name);
  }
  for (const char* expected : {"write.before_commit", "write.after_commit", "relay.after_claim",
                               "relay.after_produce", "relay.after_ack_before_mark",
                               "relay.after_mark", "purge.mid_batch"}) {
    INFO("failpoint " << expected);
    CHECK(std::count(names.begin(), names.end(), expected) == 1);
  }
}

TEST_CASE("ConfigureFailpoints accepts every form of the grammar for every failpoint",
          "[failpoint]") {
  FailpointReset reset;
  const std::string actions = GENERATE(as<std::string>{}, "off", "kill", "hold", "sleep(5)",
                                       "error", "50%error", "2*off->error",
                                       "1*sleep(1)->50%2*off->error", "0%kill", "100%3*hold",
                                       "sleep(0)", "3*off->2*sleep(1)->error->off", "pause",
                                       "1*off->pause->off");
  for (const auto& point : outbox::AllFailpoints()) {
    const std::string spec = std::string(point.name) + "=" + actions;
    INFO("spec: " << spec);
    CHECK_NOTHROW(ConfigureFailpoints(spec));
  }
  ConfigureFailpoints("");
}

TEST_CASE("ConfigureFailpoints accepts several entries separated by semicolons and an empty spec",
          "[failpoint]") {
  FailpointReset reset;
  const std::string spec = GENERATE(
      as<std::string>{}, "", ";", ";;",
      "write.before_commit=off;relay.after_mark=kill",
      "write.before_commit=error;relay.after_claim=2*off->hold;purge.mid_batch=sleep(1);",
      ";write.before_commit=off;;relay.after_mark=50%error");
  INFO("spec: '" << spec << "'");
  CHECK_NOTHROW(ConfigureFailpoints(spec));
}

TEST_CASE("ConfigureFailpoints rejects a malformed spec or an unknown name with ConfigError "
          "naming the entry",
          "[failpoint]") {
  FailpointReset reset;
  const auto [spec, entry] = GENERATE(table<std::string, std::string>({
      {"write.before_commit", "write.before_commit"},                  // no '='
      {"write.before_commit=", "write.before_commit="},                // no action
      {"write.before_commit=explode", "write.before_commit=explode"},   // unknown action
      {"write.before_commit=sleep", "write.before_commit=sleep"},      // sleep needs ms
      {"write.before_commit=sleep()", "write.before_commit=sleep()"},
      {"write.before_commit=sleep(x)", "write.before_commit=sleep(x)"},
      {"write.before_commit=sleep(-1)", "write.before_commit=sleep(-1)"},
      {"write.before_commit=sleep(5", "write.before_commit=sleep(5"},  // missing ')'
      {"write.before_commit=error(1)", "write.before_commit=error(1)"},  // takes no argument
      {"write.before_commit=101%error", "write.before_commit=101%error"},
      {"write.before_commit=%error", "write.before_commit=%error"},
      {"write.before_commit=x%error", "write.before_commit=x%error"},
      {"write.before_commit=-1*error", "write.before_commit=-1*error"},
      {"write.before_commit=*error", "write.before_commit=*error"},
      {"write.before_commit=2*", "write.before_commit=2*"},
      {"write.before_commit=error->", "write.before_commit=error->"},
      {"write.before_commit=off->->error", "write.before_commit=off->->error"},
      {"write.before_commit=Error", "write.before_commit=Error"},
      {"no.such.point=off", "no.such.point=off"},                      // unknown name
      {"=off", "=off"},
      {" write.before_commit=off", " write.before_commit=off"},
      {"write.before_commit=off;relay.after_mark=boom", "relay.after_mark=boom"},
      {"relay.after_mark=kill;nope=error", "nope=error"},
      {"relay.after_claim=kill;relay.after_claim=off", "relay.after_claim=off"},  // given twice
  }));
  INFO("spec: '" << spec << "'");
  const auto error = CaptureThrow<ConfigError>([&] { ConfigureFailpoints(spec); });
  REQUIRE(error.has_value());
  CHECK_THAT(error->what(), Catch::Contains("'" + entry + "'"));
}

TEST_CASE("A rejected spec leaves the previous configuration active", "[failpoint]") {
  FailpointReset reset;
  ConfigureFailpoints(std::string(kPoint) + "=error");
  REQUIRE(CaptureThrow<ConfigError>([] { ConfigureFailpoints("write.before_commit=boom"); }).has_value());

  CHECK(Throws(kPoint, 2) == std::vector<bool>{true, true});
}

TEST_CASE("The error action throws FailpointError exactly when scheduled", "[failpoint]") {
  FailpointReset reset;
  using Hits = std::vector<bool>;

  SECTION("error every time") {
    ConfigureFailpoints(std::string(kPoint) + "=error");
    CHECK(Throws(kPoint, 4) == Hits{true, true, true, true});
  }
  SECTION("off never throws") {
    ConfigureFailpoints(std::string(kPoint) + "=off");
    CHECK(Throws(kPoint, 4) == Hits{false, false, false, false});
  }
  SECTION("2*off->error: the first two hits return, then every hit throws") {
    ConfigureFailpoints(std::string(kPoint) + "=2*off->error");
    CHECK(Throws(kPoint, 5) == Hits{false, false, true, true, true});
  }
  SECTION("1*error->2*off->error: each N* term gives way to the next when exhausted") {
    ConfigureFailpoints(std::string(kPoint) + "=1*error->2*off->error");
    CHECK(Throws(kPoint, 5) == Hits{true, false, false, true, true});
  }
  SECTION("2*error: after the last term is exhausted the point does nothing") {
    ConfigureFailpoints(std::string(kPoint) + "=2*error");
    CHECK(Throws(kPoint, 4) == Hits{true, true, false, false});
  }
  SECTION("1*sleep(1)->2*off->error: a sleep counts as a hit") {
    ConfigureFailpoints(std::string(kPoint) + "=1*sleep(1)->2*off->error");
    CHECK(Throws(kPoint, 5) == Hits{false, false, false, true, true});
  }
  SECTION("0*error is skipped at once") {
    ConfigureFailpoints(std::string(kPoint) + "=0*error->off");
    CHECK(Throws(kPoint, 2) == Hits{false, false});
  }
  SECTION("0% never throws, 100% always does") {
    ConfigureFailpoints(std::string(kPoint) + "=0%error;" + kOtherPoint + "=100%error");
    CHECK(Throws(kPoint, 50) == Hits(50, false));
    CHECK(Throws(kOtherPoint, 50) == Hits(50, true));
  }
  SECTION("each point keeps its own schedule") {
    ConfigureFailpoints(std::string(kPoint) + "=1*off->error;" + kOtherPoint + "=1*error->off");
    CHECK(Throws(kOtherPoint, 1) == Hits{true});
    CHECK(Throws(kPoint, 1) == Hits{false});
    CHECK(Throws(kOtherPoint, 1) == Hits{false});
    CHECK(Throws(kPoint, 1) == Hits{true});
  }
  SECTION("reconfiguring starts the schedule over") {
    ConfigureFailpoints(std::string(kPoint) + "=1*off->error");
    CHECK(Throws(kPoint, 2) == Hits{false, true});
    ConfigureFailpoints(std::string(kPoint) + "=1*off->error");
    CHECK(Throws(kPoint, 2) == Hits{false, true});
  }
}

TEST_CASE("50%error throws on some hits and returns on others", "[failpoint]") {
  FailpointReset reset;
  ConfigureFailpoints(std::string(kPoint) + "=50%error");
  const auto hits = Throws(kPoint, 1000);
  const auto thrown = std::count(hits.begin(), hits.end(), true);
  // Binomial(1000, 0.5): outside [350, 650] with probability below 1e-20.
  CHECK(thrown > 350);
  CHECK(thrown < 650);
}

TEST_CASE("FailpointError names the failpoint", "[failpoint]") {
  FailpointReset reset;
  ConfigureFailpoints(std::string(kPoint) + "=error");
  const auto error = CaptureThrow<FailpointError>([] { HitFailpoint(kPoint); });
  REQUIRE(error.has_value());
  CHECK_THAT(error->what(), Catch::Contains(kPoint));
  // FailpointError is an outbox::Error, like every error of the library.
  CHECK(CaptureThrow<outbox::Error>([] { HitFailpoint(kPoint); }).has_value());
}

TEST_CASE("A failpoint that is not configured does nothing", "[failpoint]") {
  FailpointReset reset;
  SECTION("nothing configured") { ConfigureFailpoints(""); }
  SECTION("another point configured") { ConfigureFailpoints(std::string(kOtherPoint) + "=error"); }
  SECTION("an empty spec after an active one") {
    ConfigureFailpoints(std::string(kPoint) + "=error");
    ConfigureFailpoints("");
  }
  for (const auto& point : outbox::AllFailpoints()) {
    if (std::string(point.name) == kOtherPoint) continue;
    INFO("failpoint " << point.name);
    CHECK(Throws(point.name, 3) == std::vector<bool>{false, false, false});
  }
}

TEST_CASE("ConfigureFailpointsFromEnv reads OUTBOX_FAILPOINTS", "[failpoint]") {
  FailpointReset reset;
  struct EnvReset {
    ~EnvReset() { unsetenv("OUTBOX_FAILPOINTS"); }
  } env_reset;
  REQUIRE(setenv("OUTBOX_FAILPOINTS", "write.before_commit=1*off->error", 1) == 0);

  outbox::ConfigureFailpointsFromEnv();

  CHECK(Throws(kPoint, 2) == std::vector<bool>{false, true});
  REQUIRE(setenv("OUTBOX_FAILPOINTS", "write.before_commit=boom", 1) == 0);
  CHECK(CaptureThrow<ConfigError>([] { outbox::ConfigureFailpointsFromEnv(); }).has_value());
}

TEST_CASE("An error at purge.mid_batch rolls back only the purge batch in progress",
          "[failpoint][store]") {
  FailpointReset reset;
  outbox::testing::TempDir dir;
  outbox::Store store(dir.File("lab.db"), outbox::StoreOptions{}, outbox::OpenMode::kCreate);
  store.ResetSchema();
  outbox::testing::EnqueueRange(store, 1, 5);
  for (std::int64_t id = 1; id <= 5; ++id) REQUIRE(store.MarkPublished(id));
  // MarkPublished stamps the system clock; a cutoff a day ahead covers every row.
  const std::int64_t cutoff =
      std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count() +
      86400000;
  ConfigureFailpoints("purge.mid_batch=1*off->error");

  REQUIRE(CaptureThrow<FailpointError>([&] { store.PurgePublished(cutoff, 2, true); }).has_value());

  // The first batch (rows 1, 2) committed; the second (rows 3, 4) rolled back.
  CHECK(store.Count().total == 3);
  const auto rows = store.Snapshot().rows;
  const auto archived = std::count_if(rows.begin(), rows.end(), [](const auto& r) { return r.archived; });
  CHECK(archived == 2);
  REQUIRE(rows.size() == 5);
  CHECK(rows[2].id == 3);
  CHECK_FALSE(rows[2].archived);

  ConfigureFailpoints("");
  const auto report = store.PurgePublished(cutoff, 2, true);
  CHECK(report.deleted == 3);
  CHECK(report.batches == 2);
  CHECK(store.Count().total == 0);
  CHECK(store.Snapshot().rows.size() == 5);
  CHECK(store.Snapshot().Counts().total == 0);
}

TEST_CASE("The pause action blocks at its point until SIGUSR1 releases it and then goes on",
          "[failpoint]") {
  Child child([] {
    ConfigureFailpoints(std::string(kPoint) + "=pause");
    HitFailpoint(kPoint);
    fmt::print("after the point\n");
    std::fflush(stdout);
    HitFailpoint(kPoint);  // each pause needs its own release
    fmt::print("after the second pause\n");
  });

  CHECK(child.ReadLine() ==
        fmt::format("[failpoint] {} PAUSE; kill -USR1 {} to release", kPoint, child.pid()));
  // Not released: the child stays at the point (a bound for a negative check, not a sync).
  CHECK(child.QuietFor(300));
  CHECK(child.Running());

  REQUIRE(kill(child.pid(), SIGUSR1) == 0);
  CHECK(child.ReadLine() == "after the point");
  CHECK(child.ReadLine() ==
        fmt::format("[failpoint] {} PAUSE; kill -USR1 {} to release", kPoint, child.pid()));
  CHECK(child.QuietFor(100));
  REQUIRE(kill(child.pid(), SIGUSR1) == 0);
  CHECK(child.ReadLine() == "after the second pause");
  const int status = child.Wait();
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("The kill action says on stderr which point fired before the process dies by SIGKILL",
          "[failpoint]") {
  Child child([] {
    ConfigureFailpoints(std::string(kPoint) + "=1*off->kill");
    HitFailpoint(kPoint);
    fmt::print("passed the first hit\n");
    std::fflush(stdout);
    HitFailpoint(kPoint);
    fmt::print("survived the kill\n");
  });

  CHECK(child.ReadLine() == "passed the first hit");
  CHECK(child.ReadLine() == fmt::format("[failpoint] {} KILL", kPoint));
  CHECK(child.ReadLine().empty());  // end of output: nothing after the point ran
  const int status = child.Wait();
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
}

TEST_CASE("RegisterFailpoints adds a program's points once and ConfigureFailpoints then accepts them",
          "[failpoint]") {
  FailpointReset reset;
  const auto count = [](const std::string& name) {
    const auto all = outbox::AllFailpoints();
    return std::count_if(all.begin(), all.end(),
                         [&](const outbox::FailpointInfo& p) { return name == p.name; });
  };
  REQUIRE(CaptureThrow<ConfigError>([] { ConfigureFailpoints("test.registered=error"); }));

  outbox::RegisterFailpoints({{"test.registered", "nothing: a test point"}});
  outbox::RegisterFailpoints({{"test.registered", "nothing: a test point"}});

  CHECK(count("test.registered") == 1);
  ConfigureFailpoints("test.registered=error");
  CHECK(Throws("test.registered", 1) == std::vector<bool>{true});
  CHECK(CaptureThrow<ConfigError>([] { outbox::RegisterFailpoints({{"undotted", "x"}}); }));
  CHECK(count("undotted") == 0);
}

TEST_CASE("The hold action prints the hold line its caller passes and the PID to kill",
          "[failpoint]") {
  Child child([] {
    ConfigureFailpoints(std::string(kPoint) + "=hold");
    HitFailpoint(kPoint, "[write] committed all, HOLD before publish");
  });

  CHECK(child.ReadLine() ==
        fmt::format("[write] committed all, HOLD before publish; kill -9 {}", child.pid()));
  CHECK(child.QuietFor(100));
  CHECK(child.Running());
}

TEST_CASE("The generic hold line names the point and the PID of the holding process",
          "[failpoint]") {
  Child child([] {
    ConfigureFailpoints(std::string(kPoint) + "=hold");
    HitFailpoint(kPoint);
  });

  CHECK(child.ReadLine() == fmt::format("[failpoint] {} HOLD; kill -9 {}", kPoint, child.pid()));
  CHECK(child.Running());
}
