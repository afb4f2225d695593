// Store: opening the SQLite file (modes, read-only media, immutable reopen, the open error's
// words), PRAGMA synchronous, and the write and read transactions' connection.
#include "outbox/store.h"

#include <fmt/format.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "outbox/error.h"

#include "internal.h"

namespace outbox {

using namespace sqlite_store;  // this folder's shared helpers (internal.h)

namespace {

const char* SynchronousPragma(Synchronous s) {
  switch (s) {
    case Synchronous::kOff: return "PRAGMA synchronous=OFF";
    case Synchronous::kNormal: return "PRAGMA synchronous=NORMAL";
    case Synchronous::kFull: return "PRAGMA synchronous=FULL";
    case Synchronous::kExtra: return "PRAGMA synchronous=EXTRA";
  }
  return "PRAGMA synchronous=FULL";
}

constexpr const char* kReadingCommands = "status, metrics, parked, verify, check and report";

// Why this process cannot write the database, or empty when it can: the
// file, and without a -wal file its directory too (SQLite must create F-wal
// and F-shm there). access(2) answers for this process: EROFS on read-only
// media, EACCES for another user's file (root passes: it can write).
struct WriteRefusal {
  std::string message;  // "open database 'F' for writing: ... (SQLITE_READONLY...)"
  int code = SQLITE_OK;
};

WriteRefusal WhyReadOnly(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(path, ec) && ::access(path.c_str(), W_OK) != 0) {
    const int why = errno;
    return {fmt::format("open database '{}' for writing: the file is read-only ({}); the commands "
                        "that only read work on it: {} (SQLITE_READONLY)",
                        path, std::strerror(why), kReadingCommands),
            SQLITE_READONLY};
  }
  const fs::path parent = fs::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  if (!fs::exists(path + "-wal", ec) && ::access(dir.c_str(), W_OK) != 0) {
    const int why = errno;
    return {fmt::format("open database '{}' for writing: its directory '{}' is read-only ({}), "
                        "and SQLite must create '{}-wal' and '{}-shm' there; the commands that "
                        "only read work on it: {} (SQLITE_READONLY_DIRECTORY)",
                        path, dir, std::strerror(why), path, path, kReadingCommands),
            SQLITE_READONLY_DIRECTORY};
  }
  return {};
}

// For a mode that writes, before SQLite opens anything: sqlite3_open_v2 with
// SQLITE_OPEN_READWRITE quietly falls back to read-only on a file it cannot
// write, and a missing -wal is only found missing at the first statement.
void RequireWritable(const std::string& path) {
  WriteRefusal refusal = WhyReadOnly(path);
  if (refusal.code != SQLITE_OK) throw PhrasedDbError(refusal.message, refusal.code);
}

// kReadOnly opens read-write when this process can write, so that the last
// connection's close checkpoints and removes the -wal and -shm as before (a
// SQLITE_OPEN_READONLY connection in a writable directory creates both and
// leaves them behind); PRAGMA query_only then keeps the command from writing.
int OpenFlags(OpenMode mode, const std::string& path) {
  if (mode == OpenMode::kReadOnly && WhyReadOnly(path).code != SQLITE_OK)
    return SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
  if (mode == OpenMode::kCreate) flags |= SQLITE_OPEN_CREATE;
  return flags;
}

// What this user may not do to reach path's bytes, or null: search a folder on the path (stat
// fails with EACCES), or read the file itself (access(R_OK) fails with EACCES).
const char* PermissionDenied(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return errno == EACCES ? "search a folder on its path (the folder's x bit)" : nullptr;
  if (::access(path.c_str(), R_OK) != 0 && errno == EACCES) return "read the file";
  return nullptr;
}

// Runs before the connection exists, so the missing-file case never creates one.
const std::string& CheckPath(const std::string& path, OpenMode mode) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // SQLite says only "unable to open database file" for a folder.
  if (fs::is_directory(path, ec))
    throw DbError(fmt::format("open database '{}': '{}' is a folder, not a database file; give a "
                              "file path, such as '{}/outbox.db' (SQLITE_CANTOPEN)",
                              path, path, path),
                  SQLITE_CANTOPEN);
  // A device, FIFO or socket: SQLite would read /dev/null as an empty database (and reset would
  // write a journal beside it in /dev) or block on a FIFO.
  const fs::file_status status = fs::status(path, ec);
  if (!ec && fs::exists(status) && !fs::is_regular_file(status))
    throw DbError(fmt::format("open database '{}': it is not a regular file (a device, a FIFO or "
                              "a socket); give a database file path, such as 'outbox.db' "
                              "(SQLITE_CANTOPEN)",
                              path),
                  SQLITE_CANTOPEN);
  // Permission denied is not "no such file" (whose hint is a reset).
  if (const char* denied = PermissionDenied(path))
    throw DbError(fmt::format("open database '{}': permission denied: this user cannot {} "
                              "(SQLITE_CANTOPEN)",
                              path, denied),
                  SQLITE_CANTOPEN);
  if (mode != OpenMode::kCreate) {
    if (!fs::exists(path, ec))
      throw SchemaMissingError(
          fmt::format("open database '{}': no such file", path));
    if (mode == OpenMode::kExisting) RequireWritable(path);
    return path;
  }
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty() && !fs::create_directories(parent, ec) && ec)
    throw DbError(fmt::format("create directory '{}': {}", parent.string(), ec.message()),
                  SQLITE_CANTOPEN);
  RequireWritable(path);
  return path;
}

// "file:/abs/path?immutable=1" (https://www.sqlite.org/uri.html): every byte
// of the absolute path but unreserved ones and '/' percent-encoded, so '?',
// '#' and '%' in a file name stay part of it.
std::string ImmutableUri(const std::string& path) {
  std::error_code ec;
  const std::string absolute = std::filesystem::absolute(path, ec).string();
  std::string uri = "file:";
  for (const unsigned char c : ec ? path : absolute) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '.' || c == '_' || c == '~')
      uri += static_cast<char>(c);
    else
      uri += fmt::format("%{:02X}", c);
  }
  return uri + "?immutable=1";
}

}  // namespace

Synchronous ParseSynchronous(const std::string& text) {
  if (text == "off") return Synchronous::kOff;
  if (text == "normal") return Synchronous::kNormal;
  if (text == "full") return Synchronous::kFull;
  if (text == "extra") return Synchronous::kExtra;
  throw ConfigError(fmt::format("synchronous '{}': expected off, normal, full or extra", text));
}

namespace {

// "open database 'F': <what is wrong> (NAME)" for an error while opening,
// reading the schema or migrating: the problem and the file, not our SQL.
// errno (sqlite3_system_errno) says why a file could not be opened or grown.
std::string OpenFailure(const std::string& path, sqlite3* db, int code) {
  const int system_errno = db ? sqlite3_system_errno(db) : 0;
  const std::string why = system_errno ? std::string(": ") + std::strerror(system_errno) : "";
  std::string reason;
  switch (code) {
    case SQLITE_IOERR_SHMOPEN:
      reason = fmt::format("cannot create the shared-memory file '{}-shm'{}", path, why);
      break;
    case SQLITE_IOERR_SHMSIZE:
    case SQLITE_IOERR_SHMMAP:
      reason = fmt::format("cannot grow the shared-memory file '{}-shm'{}", path, why);
      break;
    default:
      switch (code & 0xff) {
        case SQLITE_NOTADB:
          reason = "not an SQLite database (its header is not \"SQLite format 3\": another "
                   "program's file, or not a database at all); the lab never overwrites it: move "
                   "it away or give another path";
          break;
        case SQLITE_CORRUPT: reason = "the database file is corrupt"; break;
        case SQLITE_FULL: reason = "disk full"; break;
        case SQLITE_READONLY: reason = "the database is read-only"; break;
        case SQLITE_BUSY:
        case SQLITE_LOCKED: reason = "locked by another process past the busy timeout"; break;
        case SQLITE_CANTOPEN: {
          // Name the cause: a folder where the file should be, or a folder that does not let
          // this user create or open the file.
          std::error_code ec;
          const std::filesystem::path file(path);
          const std::filesystem::path folder =
              file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
          if (std::filesystem::is_directory(file, ec)) {
            reason = fmt::format("'{}' is a folder, not a database file; give a file path, such "
                                 "as '{}/outbox.db'",
                                 path, path);
          } else if (system_errno == EACCES || system_errno == EPERM || system_errno == EROFS) {
            reason = std::filesystem::exists(file, ec)
                         ? fmt::format("this user may not open the file{}", why)
                         : fmt::format("cannot create the file in folder '{}'{} (a read-only "
                                       "folder or file system: give a path in a writable folder)",
                                       folder.string(), why);
          } else {
            reason = std::string(sqlite3_errstr(code)) + why;
          }
          break;
        }
        case SQLITE_IOERR: reason = std::string(sqlite3_errstr(code)) + why; break;
        default: reason = db ? sqlite3_errmsg(db) : sqlite3_errstr(code);
      }
  }
  return fmt::format("open database '{}': {} ({})", path, reason, sqlite::ResultCodeName(code));
}

}  // namespace

Store::Store(const std::string& path, const StoreOptions& options, OpenMode mode)
    : clock_(options.clock ? options.clock : &system_clock_),
      mark_(options.mark),
      connection_(CheckPath(path, mode), OpenFlags(mode, path)) {
  try {
    if (mode == OpenMode::kReadOnly) {
      OpenReadOnly(options);
    } else {
      Open(options, mode);
      // Writers of this file take turns for the write lock (Connection::EnableWriterTurns).
      if (path != ":memory:" && !path.empty()) connection_.EnableWriterTurns(path + "-turn");
    }
  } catch (const PhrasedDbError&) {
    throw;
  } catch (const DbError& e) {
    throw DbError(OpenFailure(path, connection_.get(), e.code()), e.code());
  }
}

void Store::Open(const StoreOptions& options, OpenMode mode) {
  const std::string& path = connection_.path();
  connection_.SetBusyTimeout(options.busy_timeout_ms);
  // Read the schema before any pragma that writes (journal_mode=WAL does), so
  // a file without our schema is left exactly as it was.
  if (mode == OpenMode::kExisting && !HasSchema())
    throw SchemaMissingError(fmt::format(
        "open database '{}': no outbox table", path));
  // A table of another design is refused before anything is written (reset
  // replaces it: it drops whatever is named outbox).
  const bool lab_table = HasSchema() && IsLabOutboxTable();
  if (mode != OpenMode::kCreate && HasSchema() && !lab_table) ThrowForeignOutboxTable();
  connection_.Exec("PRAGMA journal_mode=WAL");
  connection_.Exec(SynchronousPragma(options.synchronous));
  if (lab_table) Migrate();
}

void Store::OpenReadOnly(const StoreOptions& options) {
  const std::string path = connection_.path();
  if (!sqlite3_db_readonly(connection_.get(), "main")) {
    // This process can write (OpenFlags): open as kExisting does, then refuse every write.
    Open(options, OpenMode::kExisting);
    connection_.Exec("PRAGMA query_only = 1");
    return;
  }
  connection_.SetBusyTimeout(options.busy_timeout_ms);
  bool has_schema = false;
  try {
    has_schema = HasSchema();
  } catch (const DbError& e) {
    // SQLite could not open or create the -wal or -shm file (wal.html, "Read-Only Databases"):
    // CANTOPEN on read-only media, READONLY_DIRECTORY in a directory this user cannot write.
    if (e.primary_code() != SQLITE_CANTOPEN && e.code() != SQLITE_READONLY_DIRECTORY) throw;
    std::error_code ec;
    if (std::filesystem::exists(path + "-wal", ec))
      throw PhrasedDbError(
          fmt::format("open database '{}' read-only: its write-ahead log '{}-wal' may hold "
                      "commits, and the shared-memory file '{}-shm' needed to read them cannot be "
                      "opened or created here; open the database once where it can be written, "
                      "or copy the three files to a writable directory ({})",
                      path, path, path, sqlite::ResultCodeName(e.code())),
          e.code());
    // No -wal: the last connection closed cleanly and checkpointed every commit into the main file.
    connection_ = sqlite::Connection(path, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI,
                                     ImmutableUri(path));
    immutable_ = true;
    connection_.SetBusyTimeout(options.busy_timeout_ms);
    has_schema = HasSchema();
  }
  if (!has_schema)
    throw SchemaMissingError(fmt::format(
        "open database '{}': no outbox table; run `outbox-lab reset` first", path));
  if (!IsLabOutboxTable()) ThrowForeignOutboxTable();
  const std::int64_t version = connection_.QueryInt64("PRAGMA user_version");
  if (version < kSchemaVersion)
    throw PhrasedDbError(
        fmt::format("open database '{}': its schema version {} must be migrated to {} before it "
                    "can be read, and the file is read-only; run a writing command (say "
                    "`outbox-lab unpark --all`) on it once where it can be written "
                    "(SQLITE_READONLY)",
                    path, version, kSchemaVersion),
        SQLITE_READONLY);
}
}  // namespace outbox
