#include "lab/history.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "outbox/error.h"

namespace outbox::lab {

History::History(const std::string& path, Clock& clock) : clock_(clock) {
  fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) ThrowSystemError(fmt::format("open history '{}'", path), errno);
}

History::~History() { close(fd_); }

void History::Record(std::string_view type, std::string_view f, std::string_view value,
                     std::string_view error) {
  nlohmann::ordered_json op;
  op["process"] = getpid();
  op["time_ms"] = clock_.EpochMs();
  op["type"] = type;
  op["f"] = f;
  op["value"] = value;
  if (!error.empty()) op["error"] = error;
  const std::string line = op.dump() + "\n";
  // Best effort: a history that cannot be written must not change the run.
  [[maybe_unused]] const ssize_t n = write(fd_, line.data(), line.size());
}

std::vector<HistoryOp> ReadHistories(const std::vector<std::string>& paths, std::int64_t* malformed) {
  std::vector<HistoryOp> ops;
  for (const std::string& path : paths) {
    std::ifstream in(path);
    if (!in) ThrowSystemError(fmt::format("read history '{}'", path), errno);
    for (std::string line; std::getline(in, line);) {
      const auto json = nlohmann::json::parse(line, nullptr, false);
      if (!json.is_object() || !json.contains("type") || !json.contains("f") || !json.contains("value") ||
          !json["type"].is_string() || !json["f"].is_string() || !json["value"].is_string()) {
        if (malformed && !line.empty()) ++*malformed;
        continue;
      }
      HistoryOp op;
      op.process = json.value("process", std::int64_t{0});
      op.type = json["type"].get<std::string>();
      op.f = json["f"].get<std::string>();
      op.value = json["value"].get<std::string>();
      ops.push_back(std::move(op));
    }
  }
  return ops;
}

}  // namespace outbox::lab
