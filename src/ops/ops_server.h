// OpsServer: relay --http's endpoint, on cpp-httplib (Debian's libcpp-httplib-dev), serving
//   GET  /metrics         Prometheus text: the status families and the relay loop's
//   GET  /healthz         200 while the loop turns, else 503 and why
//   GET  /readyz          200 while this relay can publish, else 503 and why
//   GET  /parked          the parked rows as JSON, filtered and paged
//   POST /parked/unpark   unparks by ids or by filter (bearer token; disabled without tokens)
// Its threads (httplib's listener and worker pool) never call into the relay: they read the
// RelayObserver's snapshot, and the database through connections of their own (one read-only
// connection shared under a mutex; a writable one per unpark request). A slow database, broker or
// client holds up only this endpoint's threads, never the relay loop.
//
// Bad input gets a 4xx and a one-line reason: unknown paths 404, malformed parameters or JSON 400,
// bodies above max_body_bytes 413, a missing or wrong token 401, unpark without configured tokens
// 403; a client that stalls mid-request is dropped after read_timeout_s.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ops/bearer_tokens.h"
#include "outbox/outbox_store.h"
#include "outbox/relay_observer.h"

namespace httplib {
class Server;
}

namespace outbox::ops {

struct OpsServerOptions {
  std::string host = "127.0.0.1";  // loopback unless told otherwise
  int port = 0;                    // 0: any free port (OpsServer::port() says which)
  std::int64_t stall_limit_ms = 30000;  // HealthStallLimitMs
  std::int64_t ready_max_age_ms = 0;    // --ready-max-age; 0: no age rule
  std::vector<NamedToken> tokens;       // empty: POST /parked/unpark disabled (403)
  std::size_t max_body_bytes = 64 * 1024;
  int read_timeout_s = 5;               // a client silent this long mid-request is dropped
  std::int64_t parked_read_cap = 20000; // parked rows read per GET /parked or filter unpark
  // The broker is probed on a thread of the server's own, once per this many ms (plus the
  // probe's own wait); /readyz and /metrics read its last answer and never wait for a broker.
  std::int64_t broker_probe_cache_ms = 1000;
};

struct OpsServerHooks {
  const RelayObserver* observer = nullptr;  // not owned; must outlive the server
  // Opens a connection of the endpoint's own: read_only for metrics, probes and listing, writable
  // for an unpark. Throws what the store throws.
  std::function<std::unique_ptr<OutboxStore>(bool read_only)> open_store;
  // Asks the broker for metadata: "" when it answered, else why not. May block (its own timeout);
  // runs on the server's probe thread only.
  std::function<std::string()> probe_broker;
  // One line for the relay's log (each unpark: who and how many). Any thread.
  std::function<void(const std::string& line)> log;
};

// relay --http's ADDR: "PORT" (on 127.0.0.1), "HOST:PORT" or "[IPV6]:PORT"; PORT 0..65535 (0: any
// free port). Throws ConfigError for anything else.
struct ListenAddress {
  std::string host;
  int port = 0;
};
ListenAddress ParseListenAddress(const std::string& text);

class OpsServer {
 public:
  // Binds host:port and starts serving on threads of its own. Throws ConfigError when the address
  // cannot be bound (in use, not local, bad host).
  OpsServer(OpsServerOptions options, OpsServerHooks hooks);
  // Stops listening and joins its threads; requests in progress finish first.
  ~OpsServer();
  OpsServer(const OpsServer&) = delete;
  OpsServer& operator=(const OpsServer&) = delete;

  int port() const noexcept { return port_; }
  const std::string& host() const noexcept { return options_.host; }

 private:
  struct State;
  OpsServerOptions options_;
  int port_ = 0;
  // Member order is destruction order in reverse: the thread is joined (in ~OpsServer) before
  // the server and the state its handlers use are freed.
  std::unique_ptr<State> state_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;   // httplib's listener (its workers are its own)
  std::thread prober_;   // the broker probe (State::ProbeLoop)
};

}  // namespace outbox::ops
