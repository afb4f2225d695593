#include "lab/faults/power_cut.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <random>

#include "lab/faults/powerloss_log.h"
#include "outbox/error.h"

namespace outbox::lab {
namespace {

constexpr std::int64_t kSectorSize = 4096;  // SQLITE_DEFAULT_SECTOR_SIZE

[[noreturn]] void Fail(const std::string& what, const std::string& path) {
  const int error = errno;
  throw SystemError(fmt::format("power cut: {} '{}': {}", what, path, std::strerror(error)), error);
}

std::int64_t SizeOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return st.st_size;
}

UniqueFd OpenForRestore(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd) Fail("open", path);
  return fd;
}

void WriteAt(const UniqueFd& fd, const std::string& bytes, std::int64_t offset,
             const std::string& path) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pwrite(fd.get(), bytes.data() + done, bytes.size() - done,
                               static_cast<off_t>(offset) + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) Fail("write", path);
    done += static_cast<std::size_t>(n);
  }
}

void Resize(const UniqueFd& fd, std::int64_t size, const std::string& path) {
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) Fail("truncate", path);
}

// Puts back what the change replaced.
void Undo(const LogRecord& change) {
  UniqueFd fd = OpenForRestore(change.path);
  WriteAt(fd, change.old_bytes, change.offset, change.path);
  Resize(fd, change.old_size, change.path);
}

// Makes the change again (a change the seeded device kept).
void Redo(const LogRecord& change) {
  if (change.type == LogRecordType::kDelete) {
    if (::unlink(change.path.c_str()) != 0 && errno != ENOENT) Fail("delete", change.path);
    return;
  }
  UniqueFd fd = OpenForRestore(change.path);
  WriteAt(fd, change.new_bytes, change.offset, change.path);
  Resize(fd, change.new_size, change.path);
}

// Garbles the last sector the write covered, within the bytes it wrote.
std::int64_t Tear(const LogRecord& write, std::mt19937_64& random) {
  const std::int64_t end = write.offset + static_cast<std::int64_t>(write.new_bytes.size());
  const std::int64_t sector = (end - 1) / kSectorSize * kSectorSize;
  const std::int64_t from = std::max(sector, write.offset);
  std::string garbage(static_cast<std::size_t>(end - from), '\0');
  for (char& c : garbage) c = static_cast<char>(random() & 0xff);
  UniqueFd fd = OpenForRestore(write.path);
  WriteAt(fd, garbage, from, write.path);
  return end - from;
}

}  // namespace

PowerCutReport PowerCut(const std::string& db_path, const PowerCutOptions& options) {
  PowerCutReport report;
  const std::string wal = db_path + "-wal";
  report.wal_before = ReadWalSummary(wal);
  const std::string log_path = SideLogPath(db_path);
  if (SizeOf(log_path) >= 0) {
    report.log_found = true;
    std::vector<Change> changes;
    {
      SideLog log(log_path);
      LogContents contents = log.Read();
      report.ignored_log_bytes = contents.ignored_tail_bytes;
      changes = ClassifyChanges(contents.records);
    }
    // Per file, everything from its first change that is not durable is
    // undone, newest first; then what the disk has anyway is written again in
    // order: durable changes after a pinned one (a failed sync), and, with a
    // seed, the unsynced changes the device happened to keep.
    std::map<std::string, std::size_t> first_lost;
    for (std::size_t i = 0; i < changes.size(); ++i)
      if (!changes[i].durable) first_lost.emplace(changes[i].record.path, i);
    std::vector<std::size_t> tail;
    for (std::size_t i = 0; i < changes.size(); ++i) {
      const auto first = first_lost.find(changes[i].record.path);
      if (first != first_lost.end() && i >= first->second) tail.push_back(i);
    }
    std::mt19937_64 random(options.seed.value_or(0));
    std::vector<bool> on_disk(changes.size(), false);
    for (std::size_t i : tail)
      on_disk[i] = changes[i].durable || (options.seed && (random() & 1) != 0);

    std::map<std::string, std::size_t> index;  // path -> position in report.files
    for (std::size_t i : tail) {
      const std::string& path = changes[i].record.path;
      if (index.emplace(path, report.files.size()).second) {
        FileUndo file;
        file.path = path;
        file.size_before = SizeOf(path);
        report.files.push_back(file);
      }
    }
    for (auto it = tail.rbegin(); it != tail.rend(); ++it) Undo(changes[*it].record);
    std::map<std::string, const LogRecord*> last_lost_write;
    for (std::size_t i : tail) {
      const LogRecord& change = changes[i].record;
      FileUndo& file = report.files[index[change.path]];
      if (on_disk[i]) {
        Redo(change);
        if (!changes[i].durable) ++file.changes_kept;
        continue;
      }
      ++file.changes_undone;
      file.bytes_undone += static_cast<std::int64_t>(change.new_bytes.size());
      if (!change.new_bytes.empty()) last_lost_write[change.path] = &change;
    }
    if (options.torn)
      for (const auto& [path, write] : last_lost_write)
        report.files[index[path]].torn_bytes = Tear(*write, random);
    for (FileUndo& file : report.files) file.size_after = SizeOf(file.path);
    if (::unlink(log_path.c_str()) != 0) Fail("delete", log_path);
  }
  const std::string shm = db_path + "-shm";
  if (::unlink(shm.c_str()) == 0) report.shm_removed = true;
  else if (errno != ENOENT) Fail("delete", shm);

  report.wal_after = ReadWalSummary(wal);
  const WalSummary& before = report.wal_before;
  const WalSummary& after = report.wal_after;
  if (before.present && after.present && before.salt1 == after.salt1) {
    report.wal_frames_lost = std::max<std::int64_t>(0, before.frames - after.frames);
    report.wal_commits_lost = std::max<std::int64_t>(0, before.commits - after.commits);
  } else if (before.present && !(after.present && after.salt1 == before.salt1)) {
    // The WAL restarted since its last sync: every frame of the current
    // generation is gone (an older generation, already checkpointed, may be back).
    report.wal_frames_lost = before.frames;
    report.wal_commits_lost = before.commits;
  }
  return report;
}

}  // namespace outbox::lab
