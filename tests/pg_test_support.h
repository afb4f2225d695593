// Test support for the [postgres] tests: the server from OUTBOX_PG_URL and a scratch schema.
// Without OUTBOX_PG_URL a test using them FAILS and says how to start a server
// (scripts/postgres.sh start; scripts/test.sh exports it).
#pragma once

#include <catch2/catch.hpp>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "outbox/pg/connection.h"
#include "outbox/pg_store.h"

namespace outbox::testing {

// The server URL in OUTBOX_PG_URL; REQUIREs it set and not empty.
inline std::string PgServerUrl() {
  const char* url = std::getenv("OUTBOX_PG_URL");
  INFO("OUTBOX_PG_URL is not set: run `export OUTBOX_PG_URL=$(scripts/postgres.sh start)`");
  REQUIRE(url != nullptr);
  REQUIRE(std::string(url).size() > 0);
  return url;
}

// A fresh schema named prefix_PID_N, dropped (CASCADE) at the end; url() connects with it as the
// search_path, plus extra_options (URL-encoded `options` text, e.g. "%20-clock_timeout%3D10000").
class PgSchema {
 public:
  explicit PgSchema(const std::string& prefix, const std::string& extra_options = "")
      : admin_(PgServerUrl()) {
    static std::atomic<int> counter{0};
    name_ = prefix + "_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
    admin_.Exec("DROP SCHEMA IF EXISTS " + name_ + " CASCADE; CREATE SCHEMA " + name_,
                "create a test schema");
    const std::string base = PgServerUrl();
    url_ = base + (base.find('?') == std::string::npos ? "?" : "&") + "options=-csearch_path%3D" +
           name_ + extra_options;
  }
  PgSchema(const PgSchema&) = delete;
  PgSchema& operator=(const PgSchema&) = delete;
  ~PgSchema() {
    try {
      admin_.Exec("DROP SCHEMA IF EXISTS " + name_ + " CASCADE", "drop a test schema");
    } catch (...) {  // a destructor must not throw; a leftover schema is harmless
    }
  }
  // Read once in the constructor: threads may call it, and Catch2's assertions are not thread-safe.
  const std::string& url() const { return url_; }
  const std::string& name() const { return name_; }

 private:
  pg::Connection admin_;
  std::string name_;
  std::string url_;
};

// The loan event with event id `id` (aggregate "L-" + id, a small JSON payload), and the same
// enqueued alone in its own committed write transaction of `store`.
inline OutboxEvent LoanEvent(const std::string& id) {
  return OutboxEvent{id, "L-" + id, "LoanCreated", "{\"id\":\"" + id + "\"}", 0};
}
inline void EnqueueLoanEvent(PgStore& store, const std::string& id) {
  auto txn = store.BeginWrite();
  store.Enqueue(txn, LoanEvent(id));
  txn.Commit();
}

}  // namespace outbox::testing
