// OpsServer over a real socket (httplib's client) and an SQLite store: every endpoint's answer,
// and bad input (unknown paths, malformed JSON, huge bodies, missing tokens) refused with a 4xx
// while the server goes on answering.
#include <catch2/catch.hpp>
#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ops/ops_server.h"
#include "outbox/relay_observer.h"
#include "outbox/store.h"
#include "relay_test_support.h"
#include "test_support.h"

namespace {

using namespace outbox;
using namespace outbox::ops;
using outbox::testing::EnqueueRange;
using outbox::testing::FastStoreOptions;
using outbox::testing::TempDir;

constexpr const char* kToken = "0123456789abcdef0123";

// An outbox of 6 rows, ids 2, 4 and 5 parked (each failed once at max_attempts 1, the
// last with a different error), 1 published, 3 and 6 pending; a server over it.
struct ServerFixture {
  ServerFixture() {
    const std::string path = (dir.path() / "lab.db").string();
    {
      Store store(path, FastStoreOptions(), OpenMode::kCreate);
      store.ResetSchema();
      EnqueueRange(store, 1, 6);
      ClaimRequest request;
      request.owner = "test";
      request.limit = 6;
      request.now_ms = store.clock().EpochMs();
      const Claim claim = store.ClaimBatch(request);
      REQUIRE(claim.rows.size() == 6);
      SettlePolicy park;
      park.max_attempts = 1;
      REQUIRE(store.SettleBatch(claim.token, {1},
                                {{2, "Broker: Message size too large"},
                                 {4, "Broker: Message size too large"},
                                 {5, "Local: Message timed out"}},
                                park, request.now_ms)
                  .parked == 3);
      store.ReleaseClaimsOf("test", claim.token);
    }
    OpsServerOptions options;
    options.tokens = {{"alice", kToken}};
    options.max_body_bytes = 1024;
    options.read_timeout_s = 1;
    options.broker_probe_cache_ms = 20;
    OpsServerHooks hooks;
    hooks.observer = &observer;
    hooks.open_store = [this, path](bool read_only) -> std::unique_ptr<OutboxStore> {
      if (hold_open) ++held_opens;
      while (hold_open) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return std::make_unique<Store>(path, FastStoreOptions(),
                                     read_only ? OpenMode::kReadOnly : OpenMode::kExisting);
    };
    hooks.probe_broker = [this] {
      std::lock_guard lock(broker_mutex);
      return broker_error;
    };
    hooks.log = [this](const std::string& line) { log.push_back(line); };
    server = std::make_unique<OpsServer>(options, hooks);
    client = std::make_unique<httplib::Client>("127.0.0.1", server->port());
    client->set_read_timeout(5, 0);
  }

  TempDir dir;
  RelayObserver observer{false};
  std::atomic<bool> hold_open{false};  // while true, opening a connection waits (a stuck read)
  std::atomic<int> held_opens{0};      // opens that found hold_open set
  std::mutex broker_mutex;  // the probe runs on the server's thread
  std::string broker_error;
  void SetBrokerError(const std::string& error) {
    std::lock_guard lock(broker_mutex);
    broker_error = error;
  }
  // GET path until it answers status (every 10 ms, at most 1,000 tries: 10 s plus the requests;
  // the bound only ends a failing test, and a loaded machine slows what it waits for); the last
  // answer.
  httplib::Result WaitFor(const std::string& path, int status) {
    for (int i = 0;; ++i) {
      httplib::Result res = client->Get(path.c_str());
      if (!res || res->status == status || i == 1000) return res;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  std::vector<std::string> log;
  std::unique_ptr<OpsServer> server;
  std::unique_ptr<httplib::Client> client;
};

std::vector<std::int64_t> Ids(const nlohmann::json& rows) {
  std::vector<std::int64_t> out;
  for (const auto& r : rows) out.push_back(r["id"].get<std::int64_t>());
  return out;
}

}  // namespace

TEST_CASE("The endpoint serves metrics and probes from the snapshot and its own connection",
          "[ops]") {
  ServerFixture f;
  f.observer.Turn(1, 0, false);
  auto res = f.client->Get("/metrics");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->get_header_value("Content-Type") == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(res->body.find("\noutbox_parked_rows 3\n") != std::string::npos);
  CHECK(res->body.find("\noutbox_pending_rows 2\n") != std::string::npos);
  CHECK(res->body.find("\noutbox_relay_in_flight_batches 1\n") != std::string::npos);
  CHECK(res->body.find("\noutbox_relay_healthy 1\n") != std::string::npos);
  CHECK(res->body.find("\noutbox_relay_status_read_failed 0\n") != std::string::npos);
  res = f.client->Get("/healthz");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->body == "ok\n");
  // The pending rows were made in 2023 (MakeEvent): no age rule is set, so ready once the
  // broker probe (on the server's own thread) has answered.
  res = f.WaitFor("/readyz", 200);
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->body == "ok\n");
  f.SetBrokerError("no metadata answer within 800 ms: Local: Broker transport failure");
  res = f.WaitFor("/readyz", 503);
  REQUIRE(res);
  CHECK(res->status == 503);
  CHECK(res->body ==
        "broker unreachable: no metadata answer within 800 ms: Local: Broker transport failure\n");
  res = f.client->Get("/metrics");
  REQUIRE(res);
  CHECK(res->body.find("\noutbox_relay_ready 0\n") != std::string::npos);
}

TEST_CASE("The endpoint lists parked rows by filter and unparks them only for a valid token",
          "[ops]") {
  ServerFixture f;
  auto res = f.client->Get("/parked?error=too%20large&limit=1");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  nlohmann::json page = nlohmann::json::parse(res->body);
  CHECK(page["parked_total"] == 3);
  CHECK(page["matched"] == 2);
  CHECK(Ids(page["rows"]) == std::vector<std::int64_t>{2});
  CHECK(page["rows"][0]["last_error"] == "Broker: Message size too large");
  CHECK(page["next_after_id"] == 2);
  res = f.client->Get("/parked?error=too%20large&limit=1&after_id=2");
  REQUIRE(res);
  CHECK(Ids(nlohmann::json::parse(res->body)["rows"]) == std::vector<std::int64_t>{4});

  const std::string body = R"({"filter":{"error":"too large"},"max":5})";
  res = f.client->Post("/parked/unpark", body, "application/json");
  REQUIRE(res);
  CHECK(res->status == 401);
  CHECK(res->get_header_value("WWW-Authenticate") == "Bearer");
  res = f.client->Post("/parked/unpark", {{"Authorization", "Bearer wrong-token-0123456"}}, body,
                       "application/json");
  REQUIRE(res);
  CHECK(res->status == 401);
  CHECK(f.log.empty());

  res = f.client->Post("/parked/unpark", {{"Authorization", std::string("Bearer ") + kToken}},
                       body, "application/json");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  const nlohmann::json done = nlohmann::json::parse(res->body);
  CHECK(done["by"] == "alice");
  CHECK(done["unparked"] == 2);
  CHECK(done["ids"] == std::vector<std::int64_t>{2, 4});
  REQUIRE(f.log.size() == 1);
  CHECK(f.log[0] == "[relay] http: unpark by 'alice': 2 rows unparked (ids 2,4)");
  res = f.client->Post("/parked/unpark", {{"Authorization", std::string("Bearer ") + kToken}},
                       R"({"ids":[5,2,99]})", "application/json");
  REQUIRE(res);
  CHECK(nlohmann::json::parse(res->body)["ids"] == std::vector<std::int64_t>{5});
  CHECK(nlohmann::json::parse(res->body)["not_parked"] == std::vector<std::int64_t>{2, 99});
  res = f.client->Get("/parked");
  REQUIRE(res);
  CHECK(nlohmann::json::parse(res->body)["parked_total"] == 0);
}

TEST_CASE("The endpoint answers bad input with a 4xx and goes on serving", "[ops]") {
  ServerFixture f;
  const httplib::Headers auth = {{"Authorization", std::string("Bearer ") + kToken}};
  auto res = f.client->Get("/nope");
  REQUIRE(res);
  CHECK(res->status == 404);
  CHECK(res->body.rfind("no such endpoint: GET /nope", 0) == 0);
  res = f.client->Post("/metrics", "x", "text/plain");
  REQUIRE(res);
  CHECK(res->status == 404);
  res = f.client->Post("/parked/unpark", auth, "{\"ids\":[1,", "application/json");
  REQUIRE(res);
  CHECK(res->status == 400);
  CHECK(nlohmann::json::parse(res->body)["error"].get<std::string>().rfind("body is not JSON", 0) ==
        0);
  res = f.client->Post("/parked/unpark", auth, std::string(4096, '['), "application/json");
  REQUIRE(res);
  CHECK(res->status == 413);
  res = f.client->Get("/parked?limit=100000");
  REQUIRE(res);
  CHECK(res->status == 400);
  // A client that sends half a request and stalls is dropped after the read timeout (1 s
  // here); others are served meanwhile.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(f.server->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  const std::string half = "POST /parked/unpark HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n";
  REQUIRE(write(fd, half.data(), half.size()) == static_cast<ssize_t>(half.size()));
  res = f.client->Get("/healthz");
  REQUIRE(res);
  CHECK(res->status == 200);
  timeval wait{4, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  char buf[256];
  const ssize_t got = read(fd, buf, sizeof buf);  // 0: closed by the server; -1: still open at 4 s
  close(fd);
  CHECK(got >= 0);
  res = f.WaitFor("/readyz", 200);
  REQUIRE(res);
  CHECK(res->status == 200);
}

TEST_CASE("A stuck database read holds one request thread while healthz and readyz answer at once",
          "[ops]") {
  ServerFixture f;
  f.observer.Turn(1, 0, false);
  f.hold_open = true;  // the first read's connection never opens until released
  std::thread stuck([&f] {
    httplib::Client client("127.0.0.1", f.server->port());
    client.set_read_timeout(30, 0);
    const auto res = client.Get("/metrics");
    CHECK(res);
  });
  // The stuck request holds the read connection's lock once its open waits.
  for (int i = 0; i < 10000 && f.held_opens == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(f.held_opens == 1);
  // Ten more readers, each answered at once from the last read (none yet) instead of queuing.
  std::vector<std::thread> readers;
  std::atomic<int> not_ready{0};
  for (int i = 0; i < 10; ++i)
    readers.emplace_back([&f, &not_ready] {
      httplib::Client client("127.0.0.1", f.server->port());
      client.set_read_timeout(5, 0);
      const auto res = client.Get("/readyz");
      if (res && res->status == 503 &&
          res->body.find("the first database read is still in progress") != std::string::npos)
        ++not_ready;
    });
  for (std::thread& t : readers) t.join();
  CHECK(not_ready == 10);
  const auto healthz = f.client->Get("/healthz");
  REQUIRE(healthz);
  CHECK(healthz->status == 200);
  CHECK(f.held_opens == 1);  // nobody else waited for the connection
  f.hold_open = false;
  stuck.join();
  const auto ready = f.WaitFor("/readyz", 200);
  REQUIRE(ready);
  CHECK(ready->status == 200);
}

TEST_CASE("A second endpoint on a port already served is refused and not shared", "[ops]") {
  // httplib's default socket options add SO_REUSEPORT: two relays then listened on one --http
  // port and the kernel split the probes between them.
  ServerFixture f;
  OpsServerOptions options;
  options.port = f.server->port();
  CHECK_THROWS_WITH(OpsServer(options, OpsServerHooks{}),
                    Catch::Contains("cannot listen there (address in use"));
  auto res = f.client->Get("/healthz");
  REQUIRE(res);
  CHECK(res->status == 200);
}
