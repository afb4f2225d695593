#include "lab/chapter/history.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>
#include <tuple>
#include <utility>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lab/broker/json_bytes.h"
#include "outbox/error.h"

namespace outbox::lab {

History::History(const std::string& path, Clock& clock, std::string process_name)
    : clock_(clock), process_name_(std::move(process_name)) {
  const auto open_history = [&path] {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    return std::pair{fd, fd < 0 ? errno : 0};
  };
  auto [fd, error] = open_history();
  if (fd < 0 && error == ENOENT) {
    // As reset creates the database's folder: OUTBOX_HISTORY=/tmp/class/history.jsonl on a
    // fresh machine must not fail the first command. A folder that cannot be made keeps the
    // open's own error.
    std::error_code ec;
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    if (!parent.empty() && std::filesystem::create_directories(parent, ec))
      std::tie(fd, error) = open_history();
  }
  if (fd < 0) ThrowSystemError(fmt::format("open history '{}'", path), error);
  fd_ = fd;
  path_ = path;
  if (!process_name_.empty()) Record("invoke", "process", process_name_);
}

History::~History() {
  // Best effort like every record, and a destructor must not throw: a history that cannot be
  // written must not change how the run ends.
  try {
    if (!process_name_.empty())
      Record(std::uncaught_exceptions() > 0 ? "fail" : "ok", "process", process_name_);
  } catch (const std::exception&) {
  }
  close(fd_);
}

void History::Record(std::string_view type, std::string_view f, std::string_view value,
                     std::string_view error, std::int64_t token) {
  Write(type, f, value, error, token, -1);
}

void History::RecordPhase(std::string_view phase, std::int64_t token) {
  Write("note", "phase", phase, {}, token, clock_.MonotonicUs());
}

void History::Write(std::string_view type, std::string_view f, std::string_view value,
                    std::string_view error, std::int64_t token, std::int64_t mono_us) {
  nlohmann::ordered_json op;
  op["process"] = getpid();
  op["time_ms"] = clock_.EpochMs();
  op["type"] = type;
  op["f"] = f;
  // Values come from outbox rows other programs wrote: never let their bytes
  // stop the run (BytesToJson keeps bytes that are not UTF-8 as text + hex).
  op["value"] = BytesToJson(value);
  if (!error.empty()) op["error"] = BytesToJson(error);
  if (token > 0) op["token"] = token;
  if (mono_us >= 0) op["mono_us"] = mono_us;
  const std::string line = op.dump() + "\n";
  // Best effort: a history that cannot be written must not change the run, but it says so
  // once, since check --history would otherwise judge a history with this process's steps
  // missing.
  const ssize_t n = write(fd_, line.data(), line.size());
  if (n == static_cast<ssize_t>(line.size()) || write_failed_) return;
  write_failed_ = true;
  fmt::print(stderr, "outbox-lab: warning: cannot write history '{}': {}; the run goes on, "
             "and check --history will miss this process's steps\n",
             path_, n < 0 ? std::strerror(errno) : "short write");
}

std::vector<HistoryOp> ReadHistories(const std::vector<std::string>& paths, std::int64_t* malformed) {
  std::vector<HistoryOp> ops;
  for (std::size_t file = 0; file < paths.size(); ++file) {
    const std::string& path = paths[file];
    std::ifstream in(path);
    if (!in) ThrowSystemError(fmt::format("read history '{}'", path), errno);
    for (std::string line; std::getline(in, line);) {
      auto json = nlohmann::json::parse(line, nullptr, false);
      if (!json.is_object() || !json.contains("type") || !json.contains("f") || !json.contains("value") ||
          !json["type"].is_string() || !json["f"].is_string()) {
        if (malformed && !line.empty()) ++*malformed;
        continue;
      }
      HistoryOp op;
      op.file = file;
      if (json.contains("process") && json["process"].is_number_integer())
        op.process = json["process"].get<std::int64_t>();
      if (json.contains("time_ms") && json["time_ms"].is_number_integer())
        op.time_ms = json["time_ms"].get<std::int64_t>();
      op.type = json["type"].get<std::string>();
      op.f = json["f"].get<std::string>();
      const auto& value = json["value"];
      const std::optional<std::string> bytes = BytesFromJson(value);
      op.value = bytes ? *bytes
                       : value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      if (json.contains("error"))
        op.error = BytesFromJson(json["error"]).value_or(std::string());
      for (const char* known : {"process", "time_ms", "type", "f", "value", "error"}) json.erase(known);
      if (!json.empty())
        op.details = json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      if (json.contains("token") && json["token"].is_number_integer()) op.token = json["token"].get<std::int64_t>();
      ops.push_back(std::move(op));
    }
  }
  return ops;
}

std::int64_t DropBeforeLastReset(std::vector<HistoryOp>& ops, const std::string& run_id) {
  const auto is_reset = [](const HistoryOp& op) { return op.type == "ok" && op.f == kResetOp; };
  // Per file, the position of its last reset record of this run.
  std::map<std::size_t, std::size_t> cut;
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (is_reset(ops[i]) && !run_id.empty() && ops[i].value == run_id) cut[ops[i].file] = i;
  std::int64_t dropped = 0;
  std::vector<HistoryOp> kept;
  kept.reserve(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (is_reset(ops[i])) continue;
    const auto at = cut.find(ops[i].file);
    if (at != cut.end() && i < at->second) {
      ++dropped;
      continue;
    }
    kept.push_back(std::move(ops[i]));
  }
  ops = std::move(kept);
  return dropped;
}

std::vector<std::string> OtherRunsInHistory(const std::vector<HistoryOp>& ops,
                                            const std::string& run_id) {
  const auto is_reset = [](const HistoryOp& op) { return op.type == "ok" && op.f == kResetOp; };
  std::map<std::size_t, std::size_t> cut;  // per file, its last reset record of this run
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (is_reset(ops[i]) && !run_id.empty() && ops[i].value == run_id) cut[ops[i].file] = i;
  std::set<std::string> others;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (!is_reset(ops[i]) || ops[i].value == run_id) continue;
    const auto at = cut.find(ops[i].file);
    if (at == cut.end() || i > at->second) others.insert(ops[i].value);
  }
  return {others.begin(), others.end()};
}

void RecordSettle(History* history, std::int64_t token, const std::vector<std::string>& marked,
                  const std::vector<std::string>& parked, const std::vector<std::string>& fenced) {
  if (!history) return;
  for (const auto& id : marked) history->Record("ok", "mark", id, {}, token);
  for (const auto& id : fenced) history->Record("fail", "mark", id, "fenced", token);
  for (const auto& id : parked) history->Record("ok", "park", id, {}, token);
}

}  // namespace outbox::lab
