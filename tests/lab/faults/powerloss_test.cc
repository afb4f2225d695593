// The power-loss VFS shim and power-cut, with known answers: below FULL a
// commit that was never synced is undone; at FULL it survives. One process,
// then two processes sharing one simulated page cache.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <functional>

#include "lab/chapter/history.h"
#include "lab/chapter/loans.h"
#include "lab/check/checker.h"
#include "lab/faults/power_cut.h"
#include "lab/faults/powerloss_log.h"
#include "lab/faults/powerloss_vfs.h"
#include "lab/faults/wal_file.h"
#include "outbox/clock.h"
#include "outbox/failpoint.h"
#include "test_support.h"

namespace outbox::lab {
namespace {

using outbox::testing::TempDir;

StoreOptions WithSync(Synchronous synchronous) {
  StoreOptions options;
  options.synchronous = synchronous;
  return options;
}

std::int64_t Loans(const std::string& db) {
  auto store = OpenLabDatabase(db, {});
  return CountLoans(store->BeginRead().connection());
}

// Ends this process with SIGKILL on the spot: no destructor runs, so every
// connection dies open, as under kill -9 (a clean close would checkpoint).
[[noreturn]] void KillSelf() {
  kill(getpid(), SIGKILL);
  _exit(4);
}

// Runs body, which must end in KillSelf() while its connections are open, in
// a child process using the shim. Returns when the child died by SIGKILL.
void InKilledChild(const std::function<void()>& body) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    try {
      PowerlossVfs vfs;
      body();
    } catch (...) {
      _exit(3);
    }
    _exit(5);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGKILL);
}

}  // namespace

TEST_CASE("A commit under synchronous off is undone by a power cut", "[powerloss]") {
  TempDir dir;
  const std::string db = dir.File("outbox.db");
  ResetLabDatabase(db, {});  // without the shim: the schema is durable
  {
    PowerlossVfs vfs;
    auto store = OpenLabDatabase(db, WithSync(Synchronous::kOff));
    WriteLoanWithEvent(*store, 1);
    CHECK(CountLoans(store->BeginRead().connection()) == 1);
  }
  CHECK(Loans(db) == 1);  // the page cache still has it
  const PowerCutReport report = PowerCut(db, {});
  CHECK(report.log_found);
  CHECK_FALSE(report.files.empty());
  CHECK(Loans(db) == 0);
}

TEST_CASE("A commit under synchronous full survives a power cut", "[powerloss]") {
  TempDir dir;
  const std::string db = dir.File("outbox.db");
  ResetLabDatabase(db, {});
  {
    PowerlossVfs vfs;
    auto store = OpenLabDatabase(db, WithSync(Synchronous::kFull));
    WriteLoanWithEvent(*store, 1);
  }
  PowerCut(db, {});
  CHECK(Loans(db) == 1);
}

TEST_CASE("A commit under synchronous normal is undone with its WAL frames when the writer was killed",
          "[powerloss]") {
  TempDir dir;
  const std::string db = dir.File("outbox.db");
  ResetLabDatabase(db, {});
  InKilledChild([&] {
    auto store = OpenLabDatabase(db, WithSync(Synchronous::kNormal));
    WriteLoanWithEvent(*store, 1);
    WriteLoanWithEvent(*store, 2);
    KillSelf();
  });
  CHECK(ReadWalSummary(db + "-wal").commits >= 2);
  const PowerCutReport report = PowerCut(db, {});
  CHECK(report.wal_commits_lost >= 2);
  CHECK(report.shm_removed);
  CHECK(Loans(db) == 0);
}

TEST_CASE("Two processes share one page cache: full keeps both commits and off loses both",
          "[powerloss]") {
  for (const Synchronous synchronous : {Synchronous::kOff, Synchronous::kFull}) {
    TempDir dir;
    const std::string db = dir.File("outbox.db");
    ResetLabDatabase(db, {});
    InKilledChild([&] {
      auto store = OpenLabDatabase(db, WithSync(synchronous));
      WriteLoanWithEvent(*store, 1);
      KillSelf();
    });
    // The second process sees the first one's commit through the page cache.
    InKilledChild([&] {
      auto store = OpenLabDatabase(db, WithSync(synchronous));
      if (CountLoans(store->BeginRead().connection()) != 1) _exit(5);
      WriteLoanWithEvent(*store, 2);
      KillSelf();
    });
    PowerCut(db, {});
    CHECK(Loans(db) == (synchronous == Synchronous::kFull ? 2 : 0));
  }
}

TEST_CASE("A write synced by another process is durable for both", "[powerloss]") {
  TempDir dir;
  const std::string db = dir.File("outbox.db");
  ResetLabDatabase(db, {});
  InKilledChild([&] {
    auto store = OpenLabDatabase(db, WithSync(Synchronous::kOff));
    WriteLoanWithEvent(*store, 1);
    KillSelf();
  });
  // A FULL commit in another process syncs the WAL, which holds the first
  // process's unsynced frames before its own.
  InKilledChild([&] {
    auto store = OpenLabDatabase(db, WithSync(Synchronous::kFull));
    WriteLoanWithEvent(*store, 2);
    KillSelf();
  });
  PowerCut(db, {});
  CHECK(Loans(db) == 2);
}

TEST_CASE("The seeded device keeps the same subset of writes for the same seed", "[powerloss]") {
  std::vector<std::string> outcomes;
  for (int run = 0; run < 2; ++run) {
    TempDir dir;
    const std::string db = dir.File("outbox.db");
    ResetLabDatabase(db, {});
    InKilledChild([&] {
      auto store = OpenLabDatabase(db, WithSync(Synchronous::kOff));
      for (int i = 1; i <= 6; ++i) WriteLoanWithEvent(*store, i);
      KillSelf();
    });
    const PowerCutReport report = PowerCut(db, {.torn = false, .seed = 42});
    std::int64_t kept = 0, undone = 0;
    for (const FileUndo& file : report.files) {
      kept += file.changes_kept;
      undone += file.changes_undone;
    }
    CHECK(kept > 0);
    CHECK(undone > 0);
    // WAL salts differ from run to run; which writes were kept does not.
    outcomes.push_back(fmt::format("kept={} undone={} loans={}", kept, undone, Loans(db)));
  }
  CHECK(outcomes[0] == outcomes[1]);
}

TEST_CASE("A torn power cut garbles the last unsynced sector and the WAL checksum rejects it",
          "[powerloss]") {
  TempDir dir;
  const std::string db = dir.File("outbox.db");
  ResetLabDatabase(db, {});
  InKilledChild([&] {
    auto store = OpenLabDatabase(db, WithSync(Synchronous::kOff));
    WriteLoanWithEvent(*store, 1);
    KillSelf();
  });
  const PowerCutReport report = PowerCut(db, {.torn = true, .seed = std::nullopt});
  std::int64_t torn = 0;
  for (const FileUndo& file : report.files) torn += file.torn_bytes;
  CHECK(torn > 0);
  CHECK(Loans(db) == 0);
}

TEST_CASE("The side log reads back what was appended and ignores a torn tail", "[powerloss]") {
  TempDir dir;
  const std::string path = dir.File("x.db-powerloss");
  {
    SideLog log(path);
    SideLog::Lock lock(log);
    LogRecord record;
    record.path = dir.File("x.db-wal");
    record.offset = 4096;
    record.old_size = 4096;
    record.new_size = 8192;
    record.new_bytes = std::string(4096, 'n');
    log.Append(record);
    LogRecord synced;
    synced.type = LogRecordType::kSynced;
    synced.path = record.path;
    synced.offset = log.Size();
    log.Append(synced);
    log.Append(record);
  }
  std::string bytes = outbox::testing::ReadFileBytes(path);
  outbox::testing::WriteFileBytes(path, bytes.substr(0, bytes.size() - 10));
  SideLog log(path);
  const LogContents contents = log.Read();
  REQUIRE(contents.records.size() == 2);
  CHECK(contents.records[0].new_bytes == std::string(4096, 'n'));
  CHECK(contents.ignored_tail_bytes > 0);
  CHECK(UnsyncedChanges(contents.records).empty());
}

TEST_CASE("A sync that began before a compaction does not cover changes logged after it",
          "[powerloss]") {
  TempDir dir;
  SideLog log(dir.File("x.db-powerloss"));
  SideLog::Lock lock(log);
  LogRecord change;
  change.path = dir.File("x.db-wal");
  change.new_bytes = "a";
  log.Append(change);
  const std::int64_t upto = log.Size();  // process A starts an fsync here
  log.Clear();                           // process B's sync found nothing unsynced
  CHECK(log.Size() >= upto);
  change.new_bytes = "b";
  log.Append(change);                    // process C writes after the compaction
  LogRecord synced;                      // A's fsync returns
  synced.type = LogRecordType::kSynced;
  synced.path = change.path;
  synced.offset = upto;
  log.Append(synced);
  const auto unsynced = UnsyncedChanges(log.Read().records);
  REQUIRE(unsynced.size() == 1);
  CHECK(unsynced[0].new_bytes == "b");
}

TEST_CASE("A failed sync pins the changes before it even after a later sync", "[powerloss]") {
  std::vector<LogRecord> records(4);
  records[0].position = 0;
  records[0].path = "w";
  records[1].type = LogRecordType::kSyncFailed;
  records[1].position = 100;
  records[1].offset = 100;
  records[1].path = "w";
  records[2].position = 200;
  records[2].path = "w";
  records[3].type = LogRecordType::kSynced;
  records[3].position = 300;
  records[3].offset = 300;
  records[3].path = "w";
  const auto unsynced = UnsyncedChanges(records);
  REQUIRE(unsynced.size() == 1);
  CHECK(unsynced[0].position == 0);
}

TEST_CASE("Check tells undone commits and their phantom events apart after a power cut",
          "[powerloss][checker]") {
  TempDir dir;
  const std::string db = dir.File("outbox.db");
  const std::string history_path = dir.File("history.jsonl");
  ResetLabDatabase(db, {});
  const bool full = GENERATE(false, true);
  {
    PowerlossVfs vfs;
    outbox::SystemClock clock;
    History history(history_path, clock);
    auto store = OpenLabDatabase(db, WithSync(full ? Synchronous::kFull : Synchronous::kOff));
    for (int i = 1; i <= 3; ++i) WriteLoanWithEvent(*store, i, &history);
  }
  PowerCut(db, {});
  // The relay had published the first two before the cut.
  std::vector<TopicRecord> records(2);
  records[0].event_id = records[0].key = "evt-1001";
  records[1].event_id = records[1].key = "evt-1002";
  records[1].offset = 1;
  std::int64_t malformed = 0;
  const auto ops = ReadHistories({history_path}, &malformed);
  auto store = OpenLabDatabase(db, {});
  CheckResult r = CheckRun(*store, records, &ops);
  CHECK(r.corrupt.empty());
  if (full) {
    CHECK(r.undone.empty());
    CHECK(r.phantom.empty());
    CHECK(r.lost.empty());
    // None marked: all three are pending (two already in Kafka); the relay owes them, none is lost.
    CHECK(r.pending == std::vector<std::string>{"evt-1001", "evt-1002", "evt-1003"});
  } else {
    CHECK(r.lost.empty());
    CHECK(r.undone == std::vector<std::string>{"evt-1001", "evt-1002", "evt-1003"});
    CHECK(r.phantom == std::vector<std::string>{"evt-1001", "evt-1002"});
    CHECK(r.undone_phantom == r.phantom);
    CHECK_FALSE(r.valid());  // at full, an undone commit is an error
    r.undo_allowed = true;
    CHECK(r.valid());        // below full, it is what the setting allows
  }
}

TEST_CASE("Check reports a corrupt database instead of failing", "[powerloss][checker]") {
  TempDir dir;
  const std::string db = dir.File("outbox.db");
  {
    auto store = ResetLabDatabase(db, {});
    for (int i = 1; i <= 200; ++i) WriteLoanWithEvent(*store, i);
  }
  // Garble a page in the middle of the file, past the schema page.
  std::string bytes = outbox::testing::ReadFileBytes(db);
  REQUIRE(bytes.size() > 3 * 4096);
  for (std::size_t i = 2 * 4096 + 100; i < 2 * 4096 + 900; ++i) bytes[i] = static_cast<char>(i * 7);
  outbox::testing::WriteFileBytes(db, bytes);
  auto store = OpenLabDatabase(db, {});
  CheckResult r;
  try {
    r = CheckRun(*store, {}, nullptr);
  } catch (const DbError& e) {
    r.corrupt = e.what();
  }
  CHECK_FALSE(r.corrupt.empty());
  CHECK_FALSE(r.valid());
}

TEST_CASE("After a failed sync a power cut loses the writes before it unless later written again",
          "[powerloss]") {
  TempDir dir;
  const std::string db = dir.File("x.db");
  outbox::testing::WriteFileBytes(db, "aaaa....zzzz");
  {
    SideLog log(SideLogPath(db));
    SideLog::Lock lock(log);
    auto change = [&](std::int64_t offset, const std::string& old_bytes, const std::string& bytes) {
      LogRecord record;
      record.path = db;
      record.offset = offset;
      record.old_size = 12;
      record.new_size = 12;
      record.old_bytes = old_bytes;
      record.new_bytes = bytes;
      log.Append(record);
    };
    auto sync = [&](LogRecordType type) {
      LogRecord record;
      record.type = type;
      record.path = db;
      record.offset = log.Size();
      log.Append(record);
    };
    change(0, "aaaa", "bbbb");   // its sync fails: the kernel drops it
    sync(LogRecordType::kSyncFailed);
    change(4, "....", "cccc");   // written after the failure, synced
    change(8, "zzzz", "dddd");
    sync(LogRecordType::kSynced);
    change(8, "dddd", "eeee");   // never synced
    outbox::testing::WriteFileBytes(db, "bbbbccccdddd");
    outbox::testing::WriteFileBytes(db, "bbbbcccceeee");
  }
  const PowerCutReport report = PowerCut(db, {});
  REQUIRE(report.files.size() == 1);
  CHECK(report.files[0].changes_undone == 2);
  CHECK(outbox::testing::ReadFileBytes(db) == "aaaaccccdddd");
}

TEST_CASE("Injected write errors fail the transaction with SQLITE_IOERR_WRITE or SQLITE_FULL",
          "[powerloss]") {
  TempDir dir;
  const std::string db = dir.File("outbox.db");
  ResetLabDatabase(db, {});
  struct FailpointReset {
    ~FailpointReset() { ConfigureFailpoints(""); }
  } reset;
  const bool enospc = GENERATE(false, true);
  ConfigureFailpoints(enospc ? "vfs.write.wal=1*enospc" : "vfs.write.wal=1*error");
  PowerlossVfs vfs;
  auto store = OpenLabDatabase(db, WithSync(Synchronous::kFull));
  int code = SQLITE_OK;
  try {
    WriteLoanWithEvent(*store, 1);
  } catch (const DbError& e) {
    code = e.code();
  }
  CHECK(code == (enospc ? SQLITE_FULL : SQLITE_IOERR_WRITE));
  CHECK(CountLoans(store->BeginRead().connection()) == 0);
  WriteLoanWithEvent(*store, 2);  // one hit: the next write goes through
  CHECK(CountLoans(store->BeginRead().connection()) == 1);
}

TEST_CASE("An injected sync error fails the commit and a power cut keeps only what a later sync made durable",
          "[powerloss]") {
  TempDir dir;
  const std::string db = dir.File("outbox.db");
  ResetLabDatabase(db, {});
  struct FailpointReset {
    ~FailpointReset() { ConfigureFailpoints(""); }
  } reset;
  ConfigureFailpoints("vfs.sync.wal=1*error");
  {
    PowerlossVfs vfs;
    auto store = OpenLabDatabase(db, WithSync(Synchronous::kFull));
    int code = SQLITE_OK;
    try {
      WriteLoanWithEvent(*store, 1);
    } catch (const DbError& e) {
      code = e.code();
    }
    CHECK(code == SQLITE_IOERR_FSYNC);
    WriteLoanWithEvent(*store, 2);
  }
  PowerCut(db, {});
  auto store = OpenLabDatabase(db, {});
  CHECK_FALSE(LoanExists(store->BeginRead().connection(), "L-1001"));
  CHECK(LoanExists(store->BeginRead().connection(), "L-1002"));
}

TEST_CASE("A vfs failpoint is refused without the power-loss shim since it could never fire",
          "[powerloss]") {
  struct FailpointReset {
    ~FailpointReset() { ConfigureFailpoints(""); }
  } reset;
  ConfigureFailpoints("vfs.sync=error");
  CHECK_THROWS_WITH(RequireNoVfsFailpoints(),
                    "OUTBOX_FAILPOINTS sets vfs.sync, which can never fire here: vfs.* failpoints "
                    "need --vfs powerloss (or OUTBOX_VFS=powerloss)");
  ConfigureFailpoints("relay.after_ack_before_mark=off;vfs.write.wal=1*error");
  CHECK_THROWS_AS(RequireNoVfsFailpoints(), ConfigError);
  ConfigureFailpoints("relay.after_ack_before_mark=off");
  CHECK_NOTHROW(RequireNoVfsFailpoints());
  ConfigureFailpoints("");
  CHECK_NOTHROW(RequireNoVfsFailpoints());
}

}  // namespace outbox::lab
