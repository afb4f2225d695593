#include "outbox/failpoint.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

namespace outbox {
namespace {

enum class Action { kOff, kKill, kHold, kSleep, kError };

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
Registry& TheRegistry() {
  static Registry registry;
  return registry;
}

const std::vector<FailpointInfo> kFailpoints = {
    {"write.before_commit", "nothing of this loan: its business and outbox rows roll back together"},
    {"write.after_commit", "the loan and its outbox row; nothing sent"},
    {"relay.after_claim", "the claim (lease + token) on the batch; nothing sent"},
    {"relay.after_produce", "the claim; records handed to librdkafka, maybe sent, none acknowledged"},
    {"relay.after_ack_before_mark", "records acknowledged by the broker; rows not marked: re-sent later"},
    {"relay.after_mark", "the batch is marked published"},
    {"purge.mid_batch", "earlier purge batches; this batch's deletes roll back"},
    {"consume.after_effect", "the consumer's effect and processed_event row; offset not committed: re-delivered, deduplicated"},
};

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
  else if (text == "error") term.action = Action::kError;
  else if (text == "sleep") term.action = Action::kSleep;
  else Malformed(entry, fmt::format("unknown action '{}'; use off, kill, hold, sleep(ms), error", text));
  if (term.action == Action::kSleep) term.arg = ParseNumber(entry, arg);
  else if (has_parens) Malformed(entry, fmt::format("action '{}' takes no argument", text));
  return term;
}

}  // namespace

const std::vector<FailpointInfo>& AllFailpoints() { return kFailpoints; }

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
    for (const auto& fp : kFailpoints) known = known || name == fp.name;
    if (!known) Malformed(entry, fmt::format("unknown failpoint '{}'; see `outbox-lab failpoints`", name));
    std::vector<Term> terms;
    std::string rest = entry.substr(eq + 1);
    for (;;) {
      const auto arrow = rest.find("->");
      terms.push_back(ParseTerm(entry, rest.substr(0, arrow)));
      if (arrow == std::string::npos) break;
      rest = rest.substr(arrow + 2);
    }
    points[name] = std::move(terms);
  }
  Registry& registry = TheRegistry();
  std::lock_guard lock(registry.mutex);
  registry.points = std::move(points);
  g_enabled.store(!registry.points.empty(), std::memory_order_relaxed);
}

void ConfigureFailpointsFromEnv() {
  if (const char* spec = std::getenv("OUTBOX_FAILPOINTS")) ConfigureFailpoints(spec);
}

void HitFailpoint(std::string_view name) {
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
      kill(getpid(), SIGKILL);
      for (;;) pause();
    case Action::kHold:
      fmt::print("[failpoint] {} HOLD; kill -9 me\n", name);
      std::fflush(stdout);
      for (;;) pause();
    case Action::kSleep:
      std::this_thread::sleep_for(std::chrono::milliseconds(arg));
      return;
    case Action::kError:
      throw FailpointError(fmt::format("failpoint {}: injected error", name));
  }
}

}  // namespace outbox
