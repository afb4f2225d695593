// Shared helpers for outbox_tests: a scratch directory, file bytes, exception
// capture and a scripted fake Publisher.
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "outbox/event.h"
#include "outbox/publisher.h"

namespace outbox::testing {

// A fresh directory under /tmp, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string templ = "/tmp/outbox-tests-XXXXXX";
    if (!mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed");
    path_ = templ;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }

  const std::filesystem::path& path() const noexcept { return path_; }
  // path()/name as a string, for APIs that take one.
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline std::string ReadFileBytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteFileBytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

// Names of the entries of dir, sorted (shows stray -wal/-shm/-journal files).
inline std::vector<std::string> ListDir(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Runs fn and returns the E it throws, or nullopt when it returns normally.
// Exceptions of other types propagate and fail the test with their message.
template <typename E, typename F>
std::optional<E> CaptureThrow(F&& fn) {
  try {
    std::forward<F>(fn)();
  } catch (const E& e) {
    return e;
  }
  return std::nullopt;
}

// The i-th test event: evt-i on aggregate agg-i.
inline OutboxEvent MakeEvent(int i) {
  const std::string n = std::to_string(i);
  return OutboxEvent{"evt-" + n, "agg-" + n, "TestEvent", "{\"n\":" + n + "}", 1700000000000 + i};
}

// A Publisher whose call k succeeds or fails as script[k] says (calls past
// the end of the script succeed). Records every call's messages; successful
// deliveries get partition 0 and consecutive offsets.
class FakePublisher : public Publisher {
 public:
  explicit FakePublisher(std::vector<bool> script = {}) : script_(std::move(script)) {}

  std::vector<DeliveryResult> Publish(const std::vector<OutboundMessage>& messages) override {
    const std::size_t call = calls.size();
    calls.push_back(messages);
    if (on_publish) on_publish(messages);
    const bool ok = call < script_.size() ? script_[call] : true;
    std::vector<DeliveryResult> results;
    for (const OutboundMessage& m : messages) {
      DeliveryResult r;
      r.outbox_id = m.outbox_id;
      r.ok = ok;
      if (ok) {
        r.partition = 0;
        r.offset = next_offset_++;
      } else {
        r.error = "fake: scripted delivery failure";
      }
      results.push_back(r);
    }
    return results;
  }

  // Keys of every message sent, in send order.
  std::vector<std::string> SentKeys() const {
    std::vector<std::string> keys;
    for (const auto& call : calls)
      for (const auto& m : call) keys.push_back(m.key);
    return keys;
  }

  std::vector<std::vector<OutboundMessage>> calls;
  // Runs inside Publish, before the results are returned (e.g. to interfere
  // with the database between the send and the mark).
  std::function<void(const std::vector<OutboundMessage>&)> on_publish;

 private:
  std::vector<bool> script_;
  std::int64_t next_offset_ = 0;
};

}  // namespace outbox::testing
