#include "ops/ops_server.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <utility>

#include "ops/parked_api.h"
#include "ops/probes.h"
#include "ops/prometheus_text.h"
#include "outbox/duration.h"
#include "outbox/error.h"
#include "outbox/parse_integer.h"
#include "outbox/store.h"

namespace outbox::ops {

constexpr std::size_t kHttpWorkers = 32;  // threads serving requests (httplib's pool)

// What the handlers share, each part under its own mutex.
struct OpsServer::State {
  OpsServerOptions options;
  OpsServerHooks hooks;

  std::mutex db_mutex;  // the read-only connection: one request at a time on it
  std::unique_ptr<OutboxStore> reader;

  std::mutex unpark_mutex;  // one unpark at a time

  std::mutex probe_mutex;  // guards the probe's answer and stopping
  std::condition_variable probe_wake;
  std::string probe_error;
  bool probed = false;
  bool stopping = false;

  // What one read of the database gave: the status families' inputs, or why not.
  struct StatusRead {
    bool ok = false;
    std::string error;
    OutboxStatus status;
    LeaderLease lease;
    std::vector<Stall> stalls;
    std::optional<BrokerOutage> outage;
    std::int64_t now_ms = 0;
    std::int64_t steady_ms = 0;  // RelayObserver::SteadyNowMs() at now_ms, to age a cached read
  };

  std::mutex cache_mutex;  // guards the two below
  StatusRead last_read;    // the last status read, for requests that find a read in progress
  std::int64_t read_started_steady_ms = 0;  // the database read in progress; 0: none

  // Runs fn(store) on the read-only connection, opening it on first use; a failed call drops the
  // connection so the next request opens a new one. Returns fn's error message, or "". The
  // caller holds db_mutex; the read's start is kept for ReadStatus's waiters.
  template <class Fn>
  std::string WithReaderLocked(Fn&& fn) {
    {
      std::lock_guard cache(cache_mutex);
      read_started_steady_ms = std::max<std::int64_t>(1, RelayObserver::SteadyNowMs());
    }
    std::string error;
    try {
      if (!reader) reader = hooks.open_store(true);
      fn(*reader);
    } catch (const std::exception& e) {
      reader.reset();
      error = e.what();
    }
    std::lock_guard cache(cache_mutex);
    read_started_steady_ms = 0;
    return error;
  }

  // One database read at a time. A status request that finds one in progress answers from the
  // last status read instead of queuing behind it: a lock on an outbox table then holds one HTTP
  // worker, not all of them, and /healthz, which reads no database, always finds a worker (a
  // liveness probe must not restart a live relay). A read waiting longer than the stall limit
  // makes the answer a failed one, so /readyz says so.
  StatusRead ReadStatus() {
    std::unique_lock db(db_mutex, std::try_to_lock);
    if (!db.owns_lock()) {
      std::lock_guard cache(cache_mutex);
      StatusRead r = last_read;
      const std::int64_t waited = RelayObserver::SteadyNowMs() - read_started_steady_ms;
      if (read_started_steady_ms > 0 && waited > options.stall_limit_ms) {
        r.ok = false;
        r.error = fmt::format("a database read has waited {} (a lock on an outbox table?)",
                              FormatDuration(waited));
      } else if (!r.ok && r.error.empty()) {
        r.error = "the first database read is still in progress";
      }
      return r;
    }
    StatusRead r;
    r.error = WithReaderLocked([&r](OutboxStore& store) {
      // The lease first, then the instant it is judged at (cli/status.cc says why).
      r.lease = store.ReadLease();
      r.now_ms = store.clock().EpochMs();
      r.steady_ms = RelayObserver::SteadyNowMs();
      r.status = store.Status(r.now_ms);
      if (r.status.parked > 0) r.stalls = store.Stalls(10);
      r.outage = store.ReadOutage();
    });
    r.ok = r.error.empty();
    std::lock_guard cache(cache_mutex);
    last_read = r;
    return r;
  }

  // The broker probe runs on a thread of its own, every broker_probe_cache_ms, so no request
  // ever waits for a broker that does not answer; requests read its last answer.
  std::string ProbeBroker() {
    std::lock_guard lock(probe_mutex);
    return probed ? probe_error : std::string("not probed yet");
  }

  void ProbeLoop() {
    std::unique_lock lock(probe_mutex);
    while (!stopping) {
      lock.unlock();
      std::string error;
      try {
        error = hooks.probe_broker ? hooks.probe_broker() : std::string();
      } catch (const std::exception& e) {
        error = e.what();
      }
      lock.lock();
      probe_error = std::move(error);
      probed = true;
      probe_wake.wait_for(lock, std::chrono::milliseconds(options.broker_probe_cache_ms),
                          [this] { return stopping; });
    }
  }

  ProbeVerdict Ready(const RelaySnapshot& snapshot, const StatusRead& read, std::int64_t now) {
    ReadyInputs in;
    in.now_steady_ms = now;
    in.stall_limit_ms = options.stall_limit_ms;
    if (read.ok) in.oldest_pending_age_ms = read.status.oldest_pending_age_ms;
    in.status_error = read.error;
    in.ready_max_age_ms = options.ready_max_age_ms;
    in.broker_error = ProbeBroker();
    return Readyz(snapshot, in);
  }

  // All parked rows up to parked_read_cap, and how many there are in all. Never waits behind
  // another read (it would hold one more request thread): says so instead.
  std::string ReadParked(std::vector<TroubledRow>& rows, std::int64_t& total) {
    std::unique_lock db(db_mutex, std::try_to_lock);
    if (!db.owns_lock())
      return "another database read is in progress (a lock on an outbox table?); try again";
    return WithReaderLocked([&](OutboxStore& store) {
      const TroubledRows troubled = store.ListTroubled(store.clock().EpochMs(),
                                                       options.parked_read_cap);
      total = troubled.parked;
      for (const TroubledRow& row : troubled.rows)
        if (row.parked) rows.push_back(row);
    });
  }
};

namespace {

void Text(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "text/plain; charset=utf-8");
}

void Json(httplib::Response& res, int status, const nlohmann::ordered_json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
                  "application/json");
}

void JsonError(httplib::Response& res, int status, const std::string& message) {
  Json(res, status, nlohmann::ordered_json{{"error", message}});
}

}  // namespace

ListenAddress ParseListenAddress(const std::string& text) {
  const auto bad = [&text](const char* why) {
    return ConfigError(fmt::format("--http '{}': {} (expected PORT, HOST:PORT or [IPV6]:PORT)",
                                   text, why));
  };
  ListenAddress a;
  std::string port_text = text;
  a.host = "127.0.0.1";
  if (!text.empty() && text.front() == '[') {
    const std::size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      throw bad("an IPv6 host needs [HOST]:PORT");
    a.host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else if (const std::size_t colon = text.rfind(':'); colon != std::string::npos) {
    if (text.find(':') != colon) throw bad("an IPv6 host goes in brackets");
    a.host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  if (a.host.empty()) throw bad("empty host");
  const std::optional<std::int64_t> port = ParseInteger(port_text, 0, 65535);
  if (!port) throw bad("the port is not a whole number from 0 to 65535");
  a.port = static_cast<int>(*port);
  return a;
}

OpsServer::OpsServer(OpsServerOptions options, OpsServerHooks hooks)
    : options_(std::move(options)),
      state_(std::make_unique<State>()),
      server_(std::make_unique<httplib::Server>()) {
  state_->options = options_;
  state_->hooks = std::move(hooks);
  State* st = state_.get();
  httplib::Server& svr = *server_;
  // More workers than httplib's default 8: a client that connects and sends nothing holds one
  // until the read timeout, and /healthz must still find one free.
  svr.new_task_queue = [] { return new httplib::ThreadPool(kHttpWorkers); };
  svr.set_payload_max_length(options_.max_body_bytes);
  svr.set_read_timeout(options_.read_timeout_s, 0);
  svr.set_write_timeout(options_.read_timeout_s, 0);
  svr.set_keep_alive_timeout(options_.read_timeout_s);
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, with which a second relay given the
  // same --http port listened beside the first and the kernel split the probes between them.
  svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });

  svr.Get("/metrics", [st](const httplib::Request&, httplib::Response& res) {
    const State::StatusRead read = st->ReadStatus();
    const RelaySnapshot snapshot = st->hooks.observer->Read();
    const std::int64_t now = RelayObserver::SteadyNowMs();
    RelayVerdicts verdicts;
    verdicts.now_steady_ms = now;
    verdicts.healthy = Healthz(snapshot, now, st->options.stall_limit_ms).ok;
    verdicts.ready = st->Ready(snapshot, read, now).ok;
    verdicts.status_read_failed = !read.ok;
    if (read.ok) {
      verdicts.lease = read.lease;
      verdicts.lease_now_ms = read.now_ms + (now - read.steady_ms);  // a cached read ages
    }
    std::string body;
    if (read.ok) body = StatusMetricsText(read.status, read.lease, read.stalls, read.now_ms, read.outage);
    body += RelayMetricsText(snapshot, verdicts);
    res.status = 200;
    res.set_content(body, "text/plain; version=0.0.4; charset=utf-8");
  });

  svr.Get("/healthz", [st](const httplib::Request&, httplib::Response& res) {
    const ProbeVerdict v = Healthz(st->hooks.observer->Read(), RelayObserver::SteadyNowMs(),
                                   st->options.stall_limit_ms);
    Text(res, v.ok ? 200 : 503, v.Body());
  });

  svr.Get("/readyz", [st](const httplib::Request&, httplib::Response& res) {
    const State::StatusRead read = st->ReadStatus();
    const ProbeVerdict v =
        st->Ready(st->hooks.observer->Read(), read, RelayObserver::SteadyNowMs());
    Text(res, v.ok ? 200 : 503, v.Body());
  });

  svr.Get("/parked", [st](const httplib::Request& req, httplib::Response& res) {
    ParkedPageRequest request;
    try {
      request = ParseParkedQuery(req.params);
    } catch (const BadRequest& e) {
      return JsonError(res, 400, e.what());
    }
    std::vector<TroubledRow> rows;
    std::int64_t total = 0;
    const std::string error = st->ReadParked(rows, total);
    if (!error.empty()) return JsonError(res, 503, "database read failed: " + error);
    Json(res, 200, ParkedPageJson(rows, total, request));
  });

  svr.Post("/parked/unpark", [st](const httplib::Request& req, httplib::Response& res) {
    if (st->options.tokens.empty())
      return JsonError(res, 403,
                       "unpark over HTTP is disabled: start the relay with --http-token-file or "
                       "OUTBOX_HTTP_TOKEN");
    const std::optional<std::string> who =
        Authorize(st->options.tokens, req.get_header_value("Authorization"));
    if (!who) {
      res.set_header("WWW-Authenticate", "Bearer");
      return JsonError(res, 401, "a valid bearer token is required (Authorization: Bearer ...)");
    }
    UnparkRequest request;
    try {
      request = ParseUnparkRequest(req.body);
    } catch (const BadRequest& e) {
      return JsonError(res, 400, e.what());
    }
    std::lock_guard lock(st->unpark_mutex);
    std::vector<std::int64_t> ids = request.ids;
    if (request.filter) {
      std::vector<TroubledRow> rows;
      std::int64_t total = 0;
      const std::string error = st->ReadParked(rows, total);
      if (!error.empty()) return JsonError(res, 503, "database read failed: " + error);
      ids = SelectForUnpark(std::move(rows), *request.filter, request.max);
    }
    std::vector<std::int64_t> unparked;
    std::vector<std::int64_t> not_parked;
    std::string error;
    try {
      const std::unique_ptr<OutboxStore> store = st->hooks.open_store(false);
      for (std::int64_t id : ids) (store->Unpark(id) ? unparked : not_parked).push_back(id);
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (st->hooks.log)
      st->hooks.log(fmt::format("[relay] http: unpark by '{}': {} rows unparked{}{}{}", *who,
                                unparked.size(),
                                unparked.empty() ? "" : fmt::format(" (ids {})", fmt::join(unparked, ",")),
                                not_parked.empty() ? ""
                                                   : fmt::format(", {} not parked", not_parked.size()),
                                error.empty() ? "" : "; stopped by a database error: " + error));
    nlohmann::ordered_json out = {{"by", *who}, {"unparked", unparked.size()},
                                  {"ids", unparked}, {"not_parked", not_parked}};
    if (!error.empty()) {
      out["error"] = "database error: " + error;
      return Json(res, 503, out);
    }
    Json(res, 200, out);
  });

  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    // Bodies for the statuses httplib sets itself (404 unknown path, 413 too large, 400 bad
    // request line); a handler's own body stays.
    if (!res.body.empty()) return;
    if (res.status == 404)
      Text(res, 404, fmt::format("no such endpoint: {} {} (known: GET /metrics /healthz /readyz "
                                 "/parked, POST /parked/unpark)\n",
                                 req.method, req.path));
    else if (res.status == 413)
      Text(res, 413, "request body too large\n");
    else
      Text(res, res.status, fmt::format("HTTP {}\n", res.status));
  });
  svr.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        Text(res, 500, "internal error: " + what + "\n");
      });

  if (options_.port == 0) {
    port_ = svr.bind_to_any_port(options_.host);
    if (port_ < 0) port_ = 0;
  } else if (svr.bind_to_port(options_.host, options_.port)) {
    port_ = options_.port;
  }
  if (port_ <= 0)
    throw ConfigError(fmt::format("relay --http {}:{}: cannot listen there (address in use, not "
                                  "an address of this host, or a bad host name)",
                                  options_.host, options_.port));
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  prober_ = std::thread([st] { st->ProbeLoop(); });
  // stop() before the listener runs would be lost (the thread would then serve on, unjoinable):
  // wait for it, 1 ms at a time; it is up within a millisecond or two.
  for (int i = 0; i < 5000 && !server_->is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

OpsServer::~OpsServer() {
  {
    std::lock_guard lock(state_->probe_mutex);
    state_->stopping = true;
  }
  state_->probe_wake.notify_all();
  server_->stop();
  if (thread_.joinable()) thread_.join();
  if (prober_.joinable()) prober_.join();  // within one probe's timeout
}

}  // namespace outbox::ops
