#include "outbox/failpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

namespace outbox {
namespace {

enum class Action { kOff, kKill, kHold, kPause, kSleep, kError, kEnospc };

struct Term {
  int percent = 100;
  long long remaining = -1;  // -1: unlimited
  Action action = Action::kOff;
  long long arg = 0;
};

struct Registry {
  std::mutex mutex;
  std::map<std::string, std::vector<Term>, std::less<>> points;
  std::mt19937_64 random{std::random_device{}()};
};

// The one global: the active configuration. enabled makes Hit() free when unset.
std::atomic<bool> g_enabled{false};
// Part of the registry: the write end of the pipe the SIGUSR1 handler writes one byte to, so a
// paused point can block in poll(2) until released (the self-pipe trick; write(2) is
// async-signal-safe). -1 until a spec with a pause action installs the handler.
std::atomic<int> g_release_write_fd{-1};
int g_release_read_fd = -1;  // guarded by the registry's mutex on setup; read only by Pause()

void OnRelease(int) {
  const int saved = errno;
  const int fd = g_release_write_fd.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const ssize_t written = write(fd, "r", 1);  // a full pipe already holds a release
    static_cast<void>(written);
  }
  errno = saved;
}

// Creates the pipe and installs the SIGUSR1 handler once; later calls do nothing.
void InstallReleaseHandler() {
  if (g_release_write_fd.load() >= 0) return;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
    throw ConfigError(fmt::format("failpoint pause: pipe2: {}", std::strerror(errno)));
  g_release_read_fd = fds[0];
  g_release_write_fd.store(fds[1]);
  struct sigaction action = {};
  action.sa_handler = OnRelease;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (sigaction(SIGUSR1, &action, nullptr) != 0)
    throw ConfigError(fmt::format("failpoint pause: sigaction(SIGUSR1): {}", std::strerror(errno)));
}

// Drops releases sent before this pause, prints the PAUSE line, then blocks until one SIGUSR1.
void Pause(std::string_view name) {
  char drained[64];
  while (read(g_release_read_fd, drained, sizeof drained) > 0) {
  }
  fmt::print("[failpoint] {} PAUSE; kill -USR1 {} to release\n", name, getpid());
  std::fflush(stdout);
  for (;;) {
    pollfd readable = {g_release_read_fd, POLLIN, 0};
    if (poll(&readable, 1, -1) < 0 && errno != EINTR)
      throw FailpointError(fmt::format("failpoint {}: pause: poll: {}", name, std::strerror(errno)));
    char byte;
    if (read(g_release_read_fd, &byte, 1) == 1) return;
  }
}
Registry& TheRegistry() {
  static Registry registry;
  return registry;
}

// The library's own points; programs add theirs with RegisterFailpoints.
const std::vector<FailpointInfo> kLibraryFailpoints = {
    {"relay.after_claim", "the claim (lease + token) on the batch; nothing sent"},
    {"relay.after_produce", "the claim; records handed to librdkafka, maybe sent, none acknowledged"},
    {"relay.after_ack_before_mark", "records acknowledged by the broker; rows not marked: re-sent later"},
    {"relay.after_mark", "the batch is marked published"},
    // Reached only by relay --exactly-once (kafka::TransactionalPublisher); the crash sweep
    // sweeps it with --exactly-once only.
    {"relay.txn_before_commit",
     "records acknowledged inside an open Kafka transaction, not committed: aborted at the next "
     "init_transactions or transaction timeout, never seen by read_committed; rows not marked"},
    // relay --source wal (WalRelay): the mark is the slot's confirmed LSN, not a row's flag.
    {"relay.wal.after_receive", "committed transactions received from the slot; nothing produced, nothing confirmed: streamed again"},
    {"relay.wal.after_produce", "records handed to librdkafka, maybe sent, none acknowledged; nothing confirmed"},
    {"relay.wal.after_ack_before_confirm", "records acknowledged by the broker; the slot's LSN not confirmed: the batch is streamed and sent again"},
    {"purge.mid_batch", "earlier purge batches; this batch's deletes roll back"},
    // The vfs.* points are evaluated by the power-loss VFS shim (lab/faults/powerloss_vfs.h, --vfs
    // powerloss) on every such call; NAME.db, NAME.wal, NAME.journal select one kind of file.
    {"vfs.read", "what the last sync made durable; a read fails (SQLITE_IOERR_READ)"},
    {"vfs.write", "what the last sync made durable; this write is not made (SQLITE_IOERR_WRITE, enospc: SQLITE_FULL)"},
    {"vfs.truncate", "what the last sync made durable; this truncate is not made (SQLITE_IOERR_TRUNCATE)"},
    {"vfs.sync", "earlier syncs only: this file's unsynced writes stay lost to a power cut even after a later successful sync (SQLITE_IOERR_FSYNC)"},
};

// Part of the registry: the points registered after the library's.
std::vector<FailpointInfo>& RegisteredFailpoints() {
  static std::vector<FailpointInfo> points;
  return points;
}

[[noreturn]] void Malformed(const std::string& entry, const std::string& why) {
  throw ConfigError(fmt::format("OUTBOX_FAILPOINTS entry '{}': {}", entry, why));
}

long long ParseNumber(const std::string& entry, const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 12)
    Malformed(entry, fmt::format("'{}' is not a non-negative integer", text));
  return std::stoll(text);
}

Term ParseTerm(const std::string& entry, std::string text) {
  Term term;
  if (const auto pct = text.find('%'); pct != std::string::npos) {
    term.percent = static_cast<int>(ParseNumber(entry, text.substr(0, pct)));
    if (term.percent > 100) Malformed(entry, "a probability is at most 100%");
    text = text.substr(pct + 1);
  }
  if (const auto star = text.find('*'); star != std::string::npos) {
    term.remaining = ParseNumber(entry, text.substr(0, star));
    text = text.substr(star + 1);
  }
  std::string arg;
  const bool has_parens = text.find('(') != std::string::npos;
  if (const auto open = text.find('('); open != std::string::npos) {
    if (text.back() != ')') Malformed(entry, "missing ')'");
    arg = text.substr(open + 1, text.size() - open - 2);
    text = text.substr(0, open);
  }
  if (text == "off") term.action = Action::kOff;
  else if (text == "kill") term.action = Action::kKill;
  else if (text == "hold") term.action = Action::kHold;
  else if (text == "pause") term.action = Action::kPause;
  else if (text == "error") term.action = Action::kError;
  else if (text == "sleep") term.action = Action::kSleep;
  else if (text == "enospc") term.action = Action::kEnospc;
  else Malformed(entry, fmt::format("unknown action '{}'; use off, kill, hold, pause, sleep(ms), error, enospc", text));
  if (term.action == Action::kSleep) term.arg = ParseNumber(entry, arg);
  else if (has_parens) Malformed(entry, fmt::format("action '{}' takes no argument", text));
  return term;
}

// "vfs.write.wal" for "vfs.write": one kind of file.
bool IsVfsKindPoint(const std::string& name, const std::string& point) {
  if (point.rfind("vfs.", 0) != 0) return false;
  for (const char* kind : {".db", ".wal", ".journal"})
    if (name == point + kind) return true;
  return false;
}

}  // namespace

std::vector<FailpointInfo> AllFailpoints() {
  std::vector<FailpointInfo> all = kLibraryFailpoints;
  const auto& registered = RegisteredFailpoints();
  all.insert(all.end(), registered.begin(), registered.end());
  return all;
}

void RegisterFailpoints(const std::vector<FailpointInfo>& points) {
  for (const FailpointInfo& point : points) {
    const std::string_view name = point.name;
    if (name.find('.') == std::string_view::npos)
      throw ConfigError(fmt::format("failpoint '{}': a name is dotted, like write.after_commit", name));
    bool known = false;
    for (const auto& fp : AllFailpoints()) known = known || name == fp.name;
    if (!known) RegisteredFailpoints().push_back(point);
  }
}

void ConfigureFailpoints(const std::string& spec) {
  std::map<std::string, std::vector<Term>, std::less<>> points;
  std::size_t start = 0;
  while (start <= spec.size()) {
    const std::size_t end = std::min(spec.find(';', start), spec.size());
    const std::string entry = spec.substr(start, end - start);
    start = end + 1;
    if (entry.empty()) continue;
    const auto eq = entry.find('=');
    if (eq == std::string::npos) Malformed(entry, "expected name=actions");
    const std::string name = entry.substr(0, eq);
    bool known = false;
    for (const auto& fp : AllFailpoints())
      known = known || name == fp.name || IsVfsKindPoint(name, fp.name);
    if (!known) Malformed(entry, fmt::format("unknown failpoint '{}'; see `outbox-lab failpoints`", name));
    std::vector<Term> terms;
    std::string rest = entry.substr(eq + 1);
    for (;;) {
      const auto arrow = rest.find("->");
      terms.push_back(ParseTerm(entry, rest.substr(0, arrow)));
      if (arrow == std::string::npos) break;
      rest = rest.substr(arrow + 2);
    }
    // A second entry would replace the first silently (a kill dropped by a later "off"):
    // chain the actions with -> in one entry instead.
    if (!points.emplace(name, std::move(terms)).second)
      Malformed(entry, fmt::format("failpoint '{}' given twice; chain its actions with -> in one "
                                   "entry",
                                   name));
  }
  for (const auto& [name, terms] : points)
    for (const Term& term : terms)
      if (term.action == Action::kPause) InstallReleaseHandler();
  Registry& registry = TheRegistry();
  std::lock_guard lock(registry.mutex);
  registry.points = std::move(points);
  g_enabled.store(!registry.points.empty(), std::memory_order_relaxed);
}

void ConfigureFailpointsFromEnv() {
  if (const char* spec = std::getenv("OUTBOX_FAILPOINTS")) ConfigureFailpoints(spec);
}

std::vector<std::string> ConfiguredFailpoints() {
  Registry& registry = TheRegistry();
  std::lock_guard lock(registry.mutex);
  std::vector<std::string> names;
  for (const auto& [name, terms] : registry.points) names.push_back(name);
  return names;
}

void HitFailpoint(std::string_view name, std::string_view hold_line) {
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  Action action = Action::kOff;
  long long arg = 0;
  {
    Registry& registry = TheRegistry();
    std::lock_guard lock(registry.mutex);
    const auto found = registry.points.find(name);
    if (found == registry.points.end()) return;
    for (Term& term : found->second) {
      if (term.remaining == 0) continue;  // exhausted: the next term takes over
      if (term.remaining > 0) --term.remaining;
      if (term.percent < 100 &&
          std::uniform_int_distribution<int>(1, 100)(registry.random) > term.percent)
        return;
      action = term.action;
      arg = term.arg;
      break;
    }
  }
  switch (action) {
    case Action::kOff: return;
    case Action::kKill:
      std::fflush(stdout);
      // Evidence that the point fired, for a script that must tell a kill here from a crash
      // elsewhere (stderr is unbuffered).
      fmt::print(stderr, "[failpoint] {} KILL\n", name);
      kill(getpid(), SIGKILL);
      for (;;) pause();
    case Action::kHold:
      if (hold_line.empty())
        fmt::print("[failpoint] {} HOLD; kill -9 {}\n", name, getpid());
      else
        fmt::print("{}; kill -9 {}\n", hold_line, getpid());
      std::fflush(stdout);
      for (;;) pause();
    case Action::kPause:
      Pause(name);
      return;
    case Action::kSleep:
      std::this_thread::sleep_for(std::chrono::milliseconds(arg));
      return;
    case Action::kError:
    case Action::kEnospc:
      throw FailpointError(fmt::format("failpoint {}: injected error", name));
  }
}

FailpointOutcome QueryFailpoint(std::string_view name) noexcept {
  if (!g_enabled.load(std::memory_order_relaxed)) return FailpointOutcome::kNone;
  Action action = Action::kOff;
  long long arg = 0;
  {
    Registry& registry = TheRegistry();
    std::lock_guard lock(registry.mutex);
    const auto found = registry.points.find(name);
    if (found == registry.points.end()) return FailpointOutcome::kNone;
    for (Term& term : found->second) {
      if (term.remaining == 0) continue;
      if (term.remaining > 0) --term.remaining;
      if (term.percent < 100 &&
          std::uniform_int_distribution<int>(1, 100)(registry.random) > term.percent)
        return FailpointOutcome::kNone;
      action = term.action;
      arg = term.arg;
      break;
    }
  }
  switch (action) {
    case Action::kOff: return FailpointOutcome::kNone;
    case Action::kError: return FailpointOutcome::kError;
    case Action::kEnospc: return FailpointOutcome::kEnospc;
    case Action::kSleep:
      std::this_thread::sleep_for(std::chrono::milliseconds(arg));
      return FailpointOutcome::kNone;
    case Action::kPause:
      Pause(name);
      return FailpointOutcome::kNone;
    case Action::kHold:
      fmt::print("[failpoint] {} HOLD; kill -9 {}\n", name, getpid());
      std::fflush(stdout);
      for (;;) pause();
    case Action::kKill:
      std::fflush(stdout);
      fmt::print(stderr, "[failpoint] {} KILL\n", name);
      kill(getpid(), SIGKILL);
      for (;;) pause();
  }
  return FailpointOutcome::kNone;
}

}  // namespace outbox
