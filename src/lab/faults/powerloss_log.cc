#include "lab/faults/powerloss_log.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <map>

#include "outbox/error.h"

namespace outbox::lab {
namespace {

constexpr std::uint32_t kMagic = 0x504c4f47;  // "PLOG"

// The fixed part of a record, in host byte order (the log never leaves the machine).
struct Header {
  std::uint32_t magic;
  std::uint32_t type;
  std::int32_t pid;
  std::uint32_t path_len;
  std::int64_t offset;
  std::int64_t old_size;
  std::int64_t new_size;
  std::uint64_t old_len;
  std::uint64_t new_len;
};

std::uint64_t Fnv1a(std::uint64_t hash, const char* data, std::size_t size) {
  for (std::size_t i = 0; i < size; ++i) {
    hash ^= static_cast<unsigned char>(data[i]);
    hash *= 1099511628211ULL;
  }
  return hash;
}
constexpr std::uint64_t kFnvBasis = 14695981039346656037ULL;

[[noreturn]] void Fail(const std::string& what, const std::string& path) {
  const int error = errno;
  throw SystemError(fmt::format("{} '{}': {}", what, path, std::strerror(error)), error);
}

}  // namespace

std::string SideLogPath(const std::string& db_path) { return db_path + "-powerloss"; }

SideLog::SideLog(const std::string& path)
    : path_(path), fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) {
  if (!fd_) Fail("open power-loss log", path);
}

SideLog::Lock::Lock(const SideLog& log) : fd_(log.fd_.get()) {
  while (::flock(fd_, LOCK_EX) != 0)
    if (errno != EINTR) Fail("lock power-loss log", log.path_);
}

SideLog::Lock::~Lock() { ::flock(fd_, LOCK_UN); }

void SideLog::Append(const LogRecord& record) const {
  const Header header{kMagic,
                      static_cast<std::uint32_t>(record.type),
                      record.pid,
                      static_cast<std::uint32_t>(record.path.size()),
                      record.offset,
                      record.old_size,
                      record.new_size,
                      record.old_bytes.size(),
                      record.new_bytes.size()};
  std::string buffer(reinterpret_cast<const char*>(&header), sizeof header);
  buffer += record.path;
  buffer += record.old_bytes;
  buffer += record.new_bytes;
  const std::uint64_t sum = Fnv1a(kFnvBasis, buffer.data(), buffer.size());
  buffer.append(reinterpret_cast<const char*>(&sum), sizeof sum);
  // One write(2): a kill -9 cannot leave half of it, and O_APPEND keeps
  // records of concurrent processes apart.
  const ssize_t written = ::write(fd_.get(), buffer.data(), buffer.size());
  if (written < 0) Fail("append to power-loss log", path_);
  if (static_cast<std::size_t>(written) != buffer.size())
    throw SystemError(fmt::format("append to power-loss log '{}': short write ({} of {} bytes)", path_,
                            written, buffer.size()));
}

std::int64_t SideLog::PhysicalSize() const {
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0) Fail("stat power-loss log", path_);
  return st.st_size;
}

std::int64_t SideLog::Base() const {
  Header header{};
  const ssize_t n = ::pread(fd_.get(), &header, sizeof header, 0);
  if (n < 0) Fail("read power-loss log", path_);
  const bool base = static_cast<std::size_t>(n) == sizeof header && header.magic == kMagic &&
                    header.type == static_cast<std::uint32_t>(LogRecordType::kBase);
  return base ? header.offset : 0;
}

std::int64_t SideLog::Size() const { return Base() + PhysicalSize(); }

LogContents SideLog::Read() const {
  std::string data;
  {
    const std::int64_t size = PhysicalSize();
    data.resize(static_cast<std::size_t>(size));
    std::size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = ::pread(fd_.get(), data.data() + done, data.size() - done,
                                static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) Fail("read power-loss log", path_);
      if (n == 0) break;
      done += static_cast<std::size_t>(n);
    }
    data.resize(done);
  }
  LogContents contents;
  std::int64_t base = 0;
  std::size_t at = 0;
  while (at < data.size()) {
    Header header{};
    if (data.size() - at < sizeof header) break;
    std::memcpy(&header, data.data() + at, sizeof header);
    if (header.magic != kMagic) break;
    const std::uint64_t body = std::uint64_t{header.path_len} + header.old_len + header.new_len;
    if (body > data.size() || data.size() - at - sizeof header < body + sizeof(std::uint64_t)) break;
    const std::size_t payload = sizeof header + static_cast<std::size_t>(body);
    std::uint64_t sum = 0;
    std::memcpy(&sum, data.data() + at + payload, sizeof sum);
    if (sum != Fnv1a(kFnvBasis, data.data() + at, payload)) break;
    if (at == 0 && header.type == static_cast<std::uint32_t>(LogRecordType::kBase))
      base = header.offset;
    LogRecord record;
    record.type = static_cast<LogRecordType>(header.type);
    record.position = base + static_cast<std::int64_t>(at);
    record.pid = header.pid;
    record.offset = header.offset;
    record.old_size = header.old_size;
    record.new_size = header.new_size;
    std::size_t field = at + sizeof header;
    record.path.assign(data, field, header.path_len);
    field += header.path_len;
    record.old_bytes.assign(data, field, header.old_len);
    field += header.old_len;
    record.new_bytes.assign(data, field, header.new_len);
    contents.records.push_back(std::move(record));
    at += payload + sizeof sum;
  }
  contents.ignored_tail_bytes = static_cast<std::int64_t>(data.size() - at);
  return contents;
}

void SideLog::Clear() const {
  LogRecord base;
  base.type = LogRecordType::kBase;
  base.pid = static_cast<std::int32_t>(::getpid());
  base.offset = Size();
  if (::ftruncate(fd_.get(), 0) != 0) Fail("truncate power-loss log", path_);
  Append(base);  // O_APPEND: at offset 0 of the emptied file
}

std::vector<Change> ClassifyChanges(const std::vector<LogRecord>& records) {
  std::vector<Change> changes;
  std::vector<bool> pinned;
  std::map<std::string, std::vector<std::size_t>> open;  // per path: not yet durable
  for (const LogRecord& record : records) {
    auto& waiting = open[record.path];
    switch (record.type) {
      case LogRecordType::kChange:
      case LogRecordType::kDelete:
        waiting.push_back(changes.size());
        changes.push_back({record, false});
        pinned.push_back(false);
        break;
      case LogRecordType::kSynced:
        std::erase_if(waiting, [&](std::size_t i) {
          const bool now_durable = !pinned[i] && changes[i].record.position < record.offset;
          if (now_durable) changes[i].durable = true;
          return now_durable;
        });
        break;
      case LogRecordType::kSyncFailed:
        for (std::size_t i : waiting)
          if (changes[i].record.position < record.offset) pinned[i] = true;
        break;
      case LogRecordType::kBase: break;
    }
  }
  return changes;
}

std::vector<LogRecord> UnsyncedChanges(const std::vector<LogRecord>& records) {
  std::vector<LogRecord> unsynced;
  for (Change& change : ClassifyChanges(records))
    if (!change.durable) unsynced.push_back(std::move(change.record));
  return unsynced;
}

}  // namespace outbox::lab
