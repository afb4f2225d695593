// ChangeWatcher: the relay's inotify idle wait. A commit by another
// connection wakes it, other files in the directory do not, a readable stop
// descriptor ends it, and ForgetWakeups forgets what was queued.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <array>
#include <string>

#include "outbox/change_watcher.h"
#include "outbox/sqlite/connection.h"
#include "outbox/store.h"
#include "relay_test_support.h"
#include "test_support.h"

namespace {

using outbox::ChangeWatcher;
using outbox::IdleWaiter;
using outbox::OpenMode;
using outbox::Store;
using outbox::StoreOptions;
using outbox::testing::EnqueueRange;
using outbox::testing::TempDir;
using outbox::testing::WriteFileBytes;
using Wake = IdleWaiter::Wake;

// Long enough never to be reached when a wake-up is expected; short enough
// to keep a failing test quick. Used only where the wait must end early.
constexpr int kLongWaitMs = 5000;
// A real timeout is the thing under test here: small and bounded.
constexpr int kShortWaitMs = 30;

// A pipe standing in for the relay's signalfd; closes both ends.
class Pipe {
 public:
  Pipe() { REQUIRE(pipe(fds_.data()) == 0); }
  ~Pipe() {
    close(fds_[0]);
    close(fds_[1]);
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  int read_end() const { return fds_[0]; }
  void RequestStop() { REQUIRE(write(fds_[1], "x", 1) == 1); }

 private:
  std::array<int, 2> fds_{};
};

}  // namespace

TEST_CASE("ChangeWatcher wakes with kChanged after another connection commits a write", "[relay]") {
  TempDir dir;
  const std::string path = dir.File("lab.db");
  Store relay_store(path, StoreOptions{}, OpenMode::kCreate);
  relay_store.ResetSchema();
  Store writer(path, StoreOptions{}, OpenMode::kExisting);
  ChangeWatcher watcher(path, -1);
  watcher.ForgetWakeups();

  EnqueueRange(writer, 1, 1);  // the commit queues an inotify event before Wait runs

  CHECK(watcher.Wait(kLongWaitMs) == Wake::kChanged);
  CHECK(relay_store.PendingCount() == 1);
  CHECK_FALSE(watcher.StopRequested());
}

TEST_CASE("ChangeWatcher returns kTimeout when nothing happens", "[relay]") {
  TempDir dir;
  const std::string path = dir.File("lab.db");
  Store relay_store(path, StoreOptions{}, OpenMode::kCreate);
  relay_store.ResetSchema();
  ChangeWatcher watcher(path, -1);
  watcher.ForgetWakeups();

  CHECK(watcher.Wait(kShortWaitMs) == Wake::kTimeout);
  CHECK(watcher.Wait(0) == Wake::kTimeout);
}

TEST_CASE("ChangeWatcher does not report writes to other files of the directory as a change",
          "[relay]") {
  TempDir dir;
  const std::string path = dir.File("lab.db");
  Store relay_store(path, StoreOptions{}, OpenMode::kCreate);
  relay_store.ResetSchema();
  ChangeWatcher watcher(path, -1);
  watcher.ForgetWakeups();

  WriteFileBytes(dir.path() / "other.txt", "not the database");
  WriteFileBytes(dir.path() / "lab.db.bak", "not the database either");

  CHECK(watcher.Wait(kShortWaitMs) == Wake::kTimeout);
}

TEST_CASE("ChangeWatcher returns kStop once the stop descriptor is readable", "[relay]") {
  TempDir dir;
  const std::string path = dir.File("lab.db");
  Store relay_store(path, StoreOptions{}, OpenMode::kCreate);
  relay_store.ResetSchema();
  Pipe stop;
  ChangeWatcher watcher(path, stop.read_end());
  watcher.ForgetWakeups();
  CHECK_FALSE(watcher.StopRequested());

  stop.RequestStop();

  CHECK(watcher.StopRequested());
  CHECK(watcher.Wait(kLongWaitMs) == Wake::kStop);
  // The stop stays requested: the loop sees it between batches too.
  CHECK(watcher.StopRequested());
  CHECK(watcher.Wait(kLongWaitMs) == Wake::kStop);
}

TEST_CASE("ChangeWatcher reports kStop before a change when both are pending", "[relay]") {
  TempDir dir;
  const std::string path = dir.File("lab.db");
  Store relay_store(path, StoreOptions{}, OpenMode::kCreate);
  relay_store.ResetSchema();
  Store writer(path, StoreOptions{}, OpenMode::kExisting);
  Pipe stop;
  ChangeWatcher watcher(path, stop.read_end());
  watcher.ForgetWakeups();

  EnqueueRange(writer, 1, 1);
  stop.RequestStop();

  CHECK(watcher.Wait(kLongWaitMs) == Wake::kStop);
}

TEST_CASE("ChangeWatcher ForgetWakeups forgets the changes queued so far", "[relay]") {
  TempDir dir;
  const std::string path = dir.File("lab.db");
  Store relay_store(path, StoreOptions{}, OpenMode::kCreate);
  relay_store.ResetSchema();
  Store writer(path, StoreOptions{}, OpenMode::kExisting);
  ChangeWatcher watcher(path, -1);

  EnqueueRange(writer, 1, 3);
  watcher.ForgetWakeups();

  CHECK(watcher.Wait(kShortWaitMs) == Wake::kTimeout);
  // A commit after ForgetWakeups is seen again.
  EnqueueRange(writer, 4, 4);
  CHECK(watcher.Wait(kLongWaitMs) == Wake::kChanged);
  CHECK(relay_store.PendingCount() == 4);
}

TEST_CASE("ChangeWatcher throws SystemError naming a directory that cannot be watched", "[relay]") {
  TempDir dir;
  const std::string path = (dir.path() / "missing-dir" / "lab.db").string();
  const auto error =
      outbox::testing::CaptureThrow<outbox::SystemError>([&] { ChangeWatcher watcher(path, -1); });
  REQUIRE(error.has_value());
  CHECK_THAT(error->what(), Catch::Contains("missing-dir"));
}
