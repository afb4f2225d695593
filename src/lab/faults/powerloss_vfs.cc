#include "lab/faults/powerloss_vfs.h"

#include <fmt/format.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <optional>
#include <string>

#include "lab/faults/powerloss_log.h"
#include "outbox/error.h"
#include "outbox/failpoint.h"

namespace outbox::lab {
namespace {

enum class FileKind { kDb, kWal, kJournal, kOther };

// The C++ state of one open file, constructed in SQLite's file buffer in
// xOpen and destroyed in xClose.
struct FileState {
  PowerlossVfs* owner = nullptr;  // not owned: the registered shim
  std::string path;
  FileKind kind = FileKind::kOther;
  std::optional<SideLog> log;  // set for the kinds that are logged
};

// What SQLite allocates szOsFile bytes for: this header, then the FileState,
// then the unix VFS's own file object. Standard layout, so a sqlite3_file*
// SQLite hands back converts to it.
struct ShimFile {
  sqlite3_file base;     // first: pMethods
  FileState* state;      // not owning: lives in this buffer, destroyed in xClose
  sqlite3_file* real;    // not owning: lives in this buffer, closed in xClose
};

constexpr std::size_t RoundUp(std::size_t n) { return (n + 15) / 16 * 16; }
constexpr std::size_t kStateOffset = RoundUp(sizeof(ShimFile));
constexpr std::size_t kRealOffset = kStateOffset + RoundUp(sizeof(FileState));

ShimFile* Shim(sqlite3_file* file) { return reinterpret_cast<ShimFile*>(file); }
sqlite3_file* Real(sqlite3_file* file) { return Shim(file)->real; }
FileState& State(sqlite3_file* file) { return *Shim(file)->state; }
PowerlossVfs* Owner(sqlite3_vfs* vfs) { return static_cast<PowerlossVfs*>(vfs->pAppData); }
sqlite3_vfs* RealVfs(sqlite3_vfs* vfs) { return Owner(vfs)->real(); }

// Reads [offset, offset + amount) of the real file as it is now, clipped to
// its size. Returns the bytes, or nullopt on an I/O error.
std::optional<std::string> ReadExisting(sqlite3_file* real, sqlite3_int64 offset,
                                        sqlite3_int64 amount, sqlite3_int64 size) {
  const sqlite3_int64 length = std::clamp<sqlite3_int64>(size - offset, 0, amount);
  std::string bytes(static_cast<std::size_t>(length), '\0');
  if (length > 0 &&
      real->pMethods->xRead(real, bytes.data(), static_cast<int>(length), offset) != SQLITE_OK)
    return std::nullopt;
  return bytes;
}

std::optional<sqlite3_int64> FileSize(sqlite3_file* real) {
  sqlite3_int64 size = 0;
  if (real->pMethods->xFileSize(real, &size) != SQLITE_OK) return std::nullopt;
  return size;
}

// Asks the failpoint registry about vfs.<operation>.<kind of file>, then
// vfs.<operation>. Returns the SQLite code to fail with, or SQLITE_OK.
int InjectedFault(const FileState& state, const char* operation, int io_error) noexcept {
  const char* kind = state.kind == FileKind::kDb    ? "db"
                     : state.kind == FileKind::kWal ? "wal"
                     : state.kind == FileKind::kJournal ? "journal"
                                                        : nullptr;
  if (!kind) return SQLITE_OK;
  char name[64];
  std::snprintf(name, sizeof name, "vfs.%s.%s", operation, kind);
  FailpointOutcome outcome = QueryFailpoint(name);
  if (outcome == FailpointOutcome::kNone) {
    std::snprintf(name, sizeof name, "vfs.%s", operation);
    outcome = QueryFailpoint(name);
  }
  if (outcome == FailpointOutcome::kNone) return SQLITE_OK;
  char why[96];
  std::snprintf(why, sizeof why, "%s injected by failpoint %s",
                outcome == FailpointOutcome::kEnospc ? "no space left on device," : "I/O error", name);
  state.owner->NoteFault(operation, state.path, why);
  return outcome == FailpointOutcome::kEnospc ? SQLITE_FULL : io_error;
}

// Returns rc, noting a failure of the real file for the error message.
int Noted(const FileState& state, const char* operation, int rc) noexcept {
  if (rc != SQLITE_OK && rc != SQLITE_IOERR_SHORT_READ && state.kind != FileKind::kOther)
    state.owner->NoteFault(operation, state.path, sqlite3_errstr(rc));
  return rc;
}

// --- io methods ---------------------------------------------------------------------------------
// SQLite calls these through C: none may throw.

int ShimClose(sqlite3_file* file) noexcept {
  sqlite3_file* real = Real(file);
  const int rc = real->pMethods ? real->pMethods->xClose(real) : SQLITE_OK;
  Shim(file)->state->~FileState();
  return rc;
}

int ShimRead(sqlite3_file* file, void* buffer, int amount, sqlite3_int64 offset) noexcept {
  if (const int rc = InjectedFault(State(file), "read", SQLITE_IOERR_READ); rc != SQLITE_OK)
    return rc;
  return Real(file)->pMethods->xRead(Real(file), buffer, amount, offset);
}

int ShimWrite(sqlite3_file* file, const void* buffer, int amount, sqlite3_int64 offset) noexcept {
  sqlite3_file* real = Real(file);
  FileState& state = State(file);
  if (const int rc = InjectedFault(state, "write", SQLITE_IOERR_WRITE); rc != SQLITE_OK) return rc;
  if (!state.log) return real->pMethods->xWrite(real, buffer, amount, offset);
  try {
    // Under the log's lock, so that no sync in another process can count this
    // change as durable between logging it and making it.
    SideLog::Lock lock(*state.log);
    const auto size = FileSize(real);
    if (!size) return SQLITE_IOERR_WRITE;
    const auto old_bytes = ReadExisting(real, offset, amount, *size);
    if (!old_bytes) return SQLITE_IOERR_WRITE;
    LogRecord record;
    record.type = LogRecordType::kChange;
    record.pid = static_cast<std::int32_t>(getpid());
    record.path = state.path;
    record.offset = offset;
    record.old_size = *size;
    record.new_size = std::max<sqlite3_int64>(*size, offset + amount);
    record.old_bytes = *old_bytes;
    record.new_bytes.assign(static_cast<const char*>(buffer), static_cast<std::size_t>(amount));
    state.log->Append(record);
    return Noted(state, "write", real->pMethods->xWrite(real, buffer, amount, offset));
  } catch (const std::exception&) {
    return SQLITE_IOERR_WRITE;
  }
}

int ShimTruncate(sqlite3_file* file, sqlite3_int64 new_size) noexcept {
  sqlite3_file* real = Real(file);
  FileState& state = State(file);
  if (const int rc = InjectedFault(state, "truncate", SQLITE_IOERR_TRUNCATE); rc != SQLITE_OK)
    return rc;
  if (!state.log) return real->pMethods->xTruncate(real, new_size);
  try {
    SideLog::Lock lock(*state.log);
    const auto size = FileSize(real);
    if (!size) return SQLITE_IOERR_TRUNCATE;
    LogRecord record;
    record.type = LogRecordType::kChange;
    record.pid = static_cast<std::int32_t>(getpid());
    record.path = state.path;
    record.offset = std::min(new_size, *size);
    record.old_size = *size;
    record.new_size = new_size;
    const auto old_bytes = ReadExisting(real, record.offset, *size - record.offset, *size);
    if (!old_bytes) return SQLITE_IOERR_TRUNCATE;
    record.old_bytes = *old_bytes;
    state.log->Append(record);
    return Noted(state, "truncate", real->pMethods->xTruncate(real, new_size));
  } catch (const std::exception&) {
    return SQLITE_IOERR_TRUNCATE;
  }
}

// Appends a kSynced or kSyncFailed record for state's file covering the log up to upto.
void NoteSync(const FileState& state, LogRecordType type, std::int64_t upto) {
  SideLog::Lock lock(*state.log);
  LogRecord record;
  record.type = type;
  record.pid = static_cast<std::int32_t>(getpid());
  record.path = state.path;
  record.offset = upto;
  state.log->Append(record);
  // Compact: when nothing in the log is unsynced any more, it can start over.
  if (type == LogRecordType::kSynced && UnsyncedChanges(state.log->Read().records).empty())
    state.log->Clear();
}

int ShimSync(sqlite3_file* file, int flags) noexcept {
  sqlite3_file* real = Real(file);
  FileState& state = State(file);
  if (!state.log) return real->pMethods->xSync(real, flags);
  try {
    // Only what was logged before the fsync started is made durable by it.
    std::int64_t upto = 0;
    {
      SideLog::Lock lock(*state.log);
      upto = state.log->Size();
    }
    // An injected failure stands for an fsync that reported EIO after the
    // kernel dropped the dirty pages: nothing is synced, and the changes stay
    // pinned as lost to a power cut.
    int rc = InjectedFault(state, "sync", SQLITE_IOERR_FSYNC);
    if (rc == SQLITE_OK) rc = Noted(state, "sync", real->pMethods->xSync(real, flags));
    NoteSync(state, rc == SQLITE_OK ? LogRecordType::kSynced : LogRecordType::kSyncFailed, upto);
    return rc;
  } catch (const std::exception&) {
    return SQLITE_IOERR_FSYNC;
  }
}

int ShimFileSize(sqlite3_file* file, sqlite3_int64* size) noexcept {
  return Real(file)->pMethods->xFileSize(Real(file), size);
}
int ShimLock(sqlite3_file* file, int level) noexcept {
  return Real(file)->pMethods->xLock(Real(file), level);
}
int ShimUnlock(sqlite3_file* file, int level) noexcept {
  return Real(file)->pMethods->xUnlock(Real(file), level);
}
int ShimCheckReservedLock(sqlite3_file* file, int* out) noexcept {
  return Real(file)->pMethods->xCheckReservedLock(Real(file), out);
}
int ShimFileControl(sqlite3_file* file, int op, void* arg) noexcept {
  return Real(file)->pMethods->xFileControl(Real(file), op, arg);
}
int ShimSectorSize(sqlite3_file* file) noexcept {
  return Real(file)->pMethods->xSectorSize(Real(file));
}
int ShimDeviceCharacteristics(sqlite3_file* file) noexcept {
  return Real(file)->pMethods->xDeviceCharacteristics(Real(file));
}
int ShimShmMap(sqlite3_file* file, int page, int page_size, int extend, void volatile** out) noexcept {
  return Real(file)->pMethods->xShmMap(Real(file), page, page_size, extend, out);
}
int ShimShmLock(sqlite3_file* file, int offset, int n, int flags) noexcept {
  return Real(file)->pMethods->xShmLock(Real(file), offset, n, flags);
}
void ShimShmBarrier(sqlite3_file* file) noexcept { Real(file)->pMethods->xShmBarrier(Real(file)); }
int ShimShmUnmap(sqlite3_file* file, int delete_flag) noexcept {
  return Real(file)->pMethods->xShmUnmap(Real(file), delete_flag);
}
int ShimFetch(sqlite3_file* file, sqlite3_int64 offset, int amount, void** out) noexcept {
  return Real(file)->pMethods->xFetch(Real(file), offset, amount, out);
}
int ShimUnfetch(sqlite3_file* file, sqlite3_int64 offset, void* page) noexcept {
  return Real(file)->pMethods->xUnfetch(Real(file), offset, page);
}

// Version 3, as the unix VFS's files (PowerlossVfs checks that).
constexpr sqlite3_io_methods kIoMethods = {
    3,           ShimClose,          ShimRead,     ShimWrite,       ShimTruncate,
    ShimSync,    ShimFileSize,       ShimLock,     ShimUnlock,      ShimCheckReservedLock,
    ShimFileControl, ShimSectorSize, ShimDeviceCharacteristics,     ShimShmMap,
    ShimShmLock, ShimShmBarrier,     ShimShmUnmap, ShimFetch,       ShimUnfetch,
};

// --- vfs methods --------------------------------------------------------------------------------

FileKind KindOf(int flags) {
  if (flags & SQLITE_OPEN_MAIN_DB) return FileKind::kDb;
  if (flags & SQLITE_OPEN_WAL) return FileKind::kWal;
  if (flags & SQLITE_OPEN_MAIN_JOURNAL) return FileKind::kJournal;
  return FileKind::kOther;
}

int ShimOpen(sqlite3_vfs* vfs, sqlite3_filename name, sqlite3_file* file, int flags,
             int* out_flags) noexcept {
  ShimFile* shim = Shim(file);
  char* bytes = reinterpret_cast<char*>(file);
  shim->base.pMethods = nullptr;  // until open succeeded: SQLite then skips xClose
  shim->real = reinterpret_cast<sqlite3_file*>(bytes + kRealOffset);
  sqlite3_vfs* real_vfs = RealVfs(vfs);
  const int rc = real_vfs->xOpen(real_vfs, name, shim->real, flags, out_flags);
  if (rc != SQLITE_OK) return rc;
  try {
    shim->state = new (bytes + kStateOffset) FileState();
  } catch (const std::exception&) {
    shim->real->pMethods->xClose(shim->real);
    return SQLITE_NOMEM;
  }
  FileState& state = *shim->state;
  state.owner = Owner(vfs);
  state.kind = name ? KindOf(flags) : FileKind::kOther;
  try {
    if (state.kind != FileKind::kOther) {
      state.path = name;
      const std::string db =
          state.kind == FileKind::kDb ? state.path : sqlite3_filename_database(name);
      state.log.emplace(SideLogPath(db));
    }
  } catch (const std::exception&) {
    state.~FileState();
    shim->real->pMethods->xClose(shim->real);
    return SQLITE_CANTOPEN;
  }
  shim->base.pMethods = &kIoMethods;
  return SQLITE_OK;
}

// The database a WAL or journal path belongs to, or empty for other files.
std::string DatabaseOf(const std::string& path) {
  for (const char* suffix : {"-wal", "-journal"}) {
    const std::size_t n = std::strlen(suffix);
    if (path.size() > n && path.compare(path.size() - n, n, suffix) == 0)
      return path.substr(0, path.size() - n);
  }
  return {};
}

// Before a WAL or journal with unsynced changes is deleted, log its whole
// content, so that a power cut brings it back (the unlink was not durable either).
void LogDelete(const std::string& path) {
  const std::string db = DatabaseOf(path);
  if (db.empty()) return;
  struct stat st {};
  if (::stat(SideLogPath(db).c_str(), &st) != 0 || ::stat(path.c_str(), &st) != 0) return;
  SideLog log(SideLogPath(db));
  SideLog::Lock lock(log);
  bool unsynced = false;
  for (const LogRecord& change : UnsyncedChanges(log.Read().records))
    unsynced = unsynced || change.path == path;
  if (!unsynced) return;
  LogRecord record;
  record.type = LogRecordType::kDelete;
  record.pid = static_cast<std::int32_t>(getpid());
  record.path = path;
  record.old_size = st.st_size;
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    const int error = errno;
    throw SystemError(fmt::format("open '{}' before delete: {}", path, std::strerror(error)), error);
  }
  record.old_bytes.resize(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < record.old_bytes.size()) {
    const ssize_t n = ::pread(fd.get(), record.old_bytes.data() + done,
                              record.old_bytes.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : EIO;
      throw SystemError(fmt::format("read '{}' before delete: {}", path, std::strerror(error)), error);
    }
    done += static_cast<std::size_t>(n);
  }
  log.Append(record);
}

int ShimDelete(sqlite3_vfs* vfs, const char* name, int sync_dir) noexcept {
  try {
    LogDelete(name);
  } catch (const std::exception&) {
    return SQLITE_IOERR_DELETE;
  }
  return RealVfs(vfs)->xDelete(RealVfs(vfs), name, sync_dir);
}

int ShimAccess(sqlite3_vfs* vfs, const char* name, int flags, int* out) noexcept {
  return RealVfs(vfs)->xAccess(RealVfs(vfs), name, flags, out);
}
int ShimFullPathname(sqlite3_vfs* vfs, const char* name, int size, char* out) noexcept {
  return RealVfs(vfs)->xFullPathname(RealVfs(vfs), name, size, out);
}
void* ShimDlOpen(sqlite3_vfs* vfs, const char* name) noexcept {
  return RealVfs(vfs)->xDlOpen(RealVfs(vfs), name);
}
void ShimDlError(sqlite3_vfs* vfs, int size, char* out) noexcept {
  RealVfs(vfs)->xDlError(RealVfs(vfs), size, out);
}
void (*ShimDlSym(sqlite3_vfs* vfs, void* handle, const char* symbol))(void) {
  return RealVfs(vfs)->xDlSym(RealVfs(vfs), handle, symbol);
}
void ShimDlClose(sqlite3_vfs* vfs, void* handle) noexcept {
  RealVfs(vfs)->xDlClose(RealVfs(vfs), handle);
}
int ShimRandomness(sqlite3_vfs* vfs, int size, char* out) noexcept {
  return RealVfs(vfs)->xRandomness(RealVfs(vfs), size, out);
}
int ShimSleep(sqlite3_vfs* vfs, int us) noexcept { return RealVfs(vfs)->xSleep(RealVfs(vfs), us); }
int ShimCurrentTime(sqlite3_vfs* vfs, double* out) noexcept {
  return RealVfs(vfs)->xCurrentTime(RealVfs(vfs), out);
}
int ShimGetLastError(sqlite3_vfs* vfs, int size, char* out) noexcept {
  return RealVfs(vfs)->xGetLastError(RealVfs(vfs), size, out);
}
int ShimCurrentTimeInt64(sqlite3_vfs* vfs, sqlite3_int64* out) noexcept {
  return RealVfs(vfs)->xCurrentTimeInt64(RealVfs(vfs), out);
}
int ShimSetSystemCall(sqlite3_vfs* vfs, const char* name, sqlite3_syscall_ptr call) noexcept {
  return RealVfs(vfs)->xSetSystemCall(RealVfs(vfs), name, call);
}
sqlite3_syscall_ptr ShimGetSystemCall(sqlite3_vfs* vfs, const char* name) noexcept {
  return RealVfs(vfs)->xGetSystemCall(RealVfs(vfs), name);
}
const char* ShimNextSystemCall(sqlite3_vfs* vfs, const char* name) noexcept {
  return RealVfs(vfs)->xNextSystemCall(RealVfs(vfs), name);
}

}  // namespace

std::string PowerlossVfs::LastFault() const {
  std::lock_guard lock(mutex_);
  return last_fault_;
}

void PowerlossVfs::NoteFault(const char* operation, const std::string& path,
                             const char* why) noexcept {
  try {
    std::lock_guard lock(mutex_);
    last_fault_ = fmt::format("{} '{}': {}", operation, path, why);
  } catch (...) {
    // Only the message gets poorer; the error code still reaches SQLite.
  }
}

PowerlossVfs::PowerlossVfs() : real_(sqlite3_vfs_find(nullptr)) {
  if (!real_) throw DbError("register the power-loss VFS: SQLite has no default VFS", SQLITE_ERROR);
  if (real_->iVersion < 3)
    throw DbError(fmt::format("register the power-loss VFS: VFS '{}' is version {}, need 3",
                              real_->zName, real_->iVersion),
                  SQLITE_ERROR);
  vfs_.iVersion = 3;
  vfs_.szOsFile = static_cast<int>(kRealOffset) + real_->szOsFile;
  vfs_.mxPathname = real_->mxPathname;
  vfs_.zName = kName;
  vfs_.pAppData = this;
  vfs_.xOpen = ShimOpen;
  vfs_.xDelete = ShimDelete;
  vfs_.xAccess = ShimAccess;
  vfs_.xFullPathname = ShimFullPathname;
  vfs_.xDlOpen = ShimDlOpen;
  vfs_.xDlError = ShimDlError;
  vfs_.xDlSym = ShimDlSym;
  vfs_.xDlClose = ShimDlClose;
  vfs_.xRandomness = ShimRandomness;
  vfs_.xSleep = ShimSleep;
  vfs_.xCurrentTime = ShimCurrentTime;
  vfs_.xGetLastError = ShimGetLastError;
  vfs_.xCurrentTimeInt64 = ShimCurrentTimeInt64;
  vfs_.xSetSystemCall = ShimSetSystemCall;
  vfs_.xGetSystemCall = ShimGetSystemCall;
  vfs_.xNextSystemCall = ShimNextSystemCall;
  if (const int rc = sqlite3_vfs_register(&vfs_, 1); rc != SQLITE_OK)
    throw DbError(fmt::format("register the power-loss VFS: {}", sqlite3_errstr(rc)), rc);
}

PowerlossVfs::~PowerlossVfs() {
  sqlite3_vfs_unregister(&vfs_);
  // Unregistering the default makes the next one in SQLite's list the default;
  // make sure that is the unix VFS we wrapped.
  sqlite3_vfs_register(real_, 1);
}

void RequireNoVfsFailpoints() {
  for (const std::string& name : ConfiguredFailpoints())
    if (name.rfind("vfs.", 0) == 0)
      throw ConfigError(fmt::format(
          "OUTBOX_FAILPOINTS sets {}, which can never fire here: vfs.* failpoints need --vfs "
          "powerloss (or OUTBOX_VFS=powerloss)",
          name));
}

}  // namespace outbox::lab
