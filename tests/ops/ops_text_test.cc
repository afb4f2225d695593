// relay --http's pure parts: the Prometheus text (checked by promtool), the probes' verdicts,
// the parked rows' filter, paging and unpark request, the bearer tokens, the listen address,
// and the observer fed through ObservedWaiter.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "ops/bearer_tokens.h"
#include "ops/ops_server.h"
#include "ops/parked_api.h"
#include "ops/probes.h"
#include "ops/prometheus_text.h"
#include "outbox/error.h"
#include "outbox/relay_observer.h"
#include "test_support.h"

namespace {

using namespace outbox;
using namespace outbox::ops;
using outbox::testing::TempDir;

// Exit status of `promtool check metrics` over text, and what it printed.
int PromtoolCheck(const std::string& text, std::string& output) {
  TempDir dir;
  const std::string path = (dir.path() / "metrics.prom").string();
  std::ofstream(path) << text;
  FILE* p = popen(("promtool check metrics < " + path + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) output += buf;
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

RelaySnapshot BusySnapshot() {
  RelaySnapshot s;
  s.started_steady_ms = 1000;
  s.last_turn_steady_ms = 9000;
  s.turns = 40;
  s.batches = 7;
  s.acked = 700;
  s.failed = 3;
  s.marked = 700;
  s.parked = 1;
  s.in_flight = 2;
  s.leader_mode = true;
  s.lease_token = 4;
  s.lease_acquired = 1;
  return s;
}

TroubledRow Parked(std::int64_t id, const std::string& aggregate, const std::string& type,
                   const std::string& error, std::int64_t age_ms) {
  TroubledRow r;
  r.id = id;
  r.event_id = "evt-" + std::to_string(id);
  r.aggregate_id = aggregate;
  r.event_type = type;
  r.parked = true;
  r.attempts = 5;
  r.last_error = error;
  r.age_ms = age_ms;
  return r;
}

}  // namespace

TEST_CASE("The metrics text of the status and relay families passes promtool check metrics",
          "[ops]") {
  OutboxStatus status;
  status.unpublished = 12;
  status.pending = 10;
  status.parked = 2;
  status.delayed = 3;
  status.behind_delayed = 1;
  status.oldest_pending_age_ms = 4500;
  LeaderLease lease{"relay-1", 4, 1700000030000, 1700000000000};
  RelayVerdicts verdicts;
  verdicts.now_steady_ms = 10500;
  verdicts.healthy = true;
  const std::string text = StatusMetricsText(status, lease, {{3, "evt-3", "agg-3", 5}},
                                             1700000010000) +
                           RelayMetricsText(BusySnapshot(), verdicts);
  CHECK(text.find("\noutbox_oldest_pending_age_seconds 4.5\n") != std::string::npos);
  CHECK(text.find("\noutbox_stalled_rows 5\n") != std::string::npos);
  CHECK(text.find("\noutbox_delayed_rows 3\n") != std::string::npos);
  CHECK(text.find("\noutbox_behind_delayed_rows 1\n") != std::string::npos);
  CHECK(text.find("\noutbox_leader_lease_left_seconds 20\n") != std::string::npos);
  CHECK(text.find("\noutbox_relay_last_loop_age_seconds 1.5\n") != std::string::npos);
  CHECK(text.find("# TYPE outbox_relay_batches_total counter\noutbox_relay_batches_total 7\n") !=
        std::string::npos);
  CHECK(text.find("\noutbox_relay_in_flight_batches 2\n") != std::string::npos);
  CHECK(text.find("\noutbox_relay_leader 1\n") != std::string::npos);
  CHECK(text.find("\noutbox_relay_healthy 1\n") != std::string::npos);
  CHECK(text.find("\noutbox_relay_ready 0\n") != std::string::npos);
  std::string output;
  CHECK(PromtoolCheck(text, output) == 0);
  CHECK(output == "");
  // The check can fail: a counter without _total is reported.
  std::string bad_output;
  CHECK(PromtoolCheck("# HELP x_rows a\n# TYPE x_rows counter\nx_rows 1\n", bad_output) != 0);
  CHECK(bad_output.find("_total") != std::string::npos);
}

TEST_CASE("The WAL slot families pass promtool check metrics and leave out the limits a server does not set",
          "[ops][wal]") {
  WalProgress wal;
  wal.slot = "outbox_wal_outbox_lab_public";
  wal.lag_bytes = 123456;
  wal.wal_status = "reserved";
  wal.safe_wal_size_bytes = 1073618944;
  wal.keep_size_bytes = 1073741824;
  const std::string text = WalSlotMetricsText(wal);
  CHECK(text.find("\noutbox_wal_slot_lag_bytes{slot=\"outbox_wal_outbox_lab_public\"} 123456\n") !=
        std::string::npos);
  CHECK(text.find("\noutbox_wal_slot_active{slot=\"outbox_wal_outbox_lab_public\"} 0\n") !=
        std::string::npos);
  CHECK(text.find("\noutbox_wal_slot_status{slot=\"outbox_wal_outbox_lab_public\",wal_status=\"reserved\"} 1\n") !=
        std::string::npos);
  CHECK(text.find("\noutbox_wal_slot_safe_wal_size_bytes{slot=\"outbox_wal_outbox_lab_public\"} 1073618944\n") !=
        std::string::npos);
  CHECK(text.find("\noutbox_wal_slot_keep_size_bytes{slot=\"outbox_wal_outbox_lab_public\"} 1073741824\n") !=
        std::string::npos);
  std::string output;
  CHECK(PromtoolCheck(text, output) == 0);
  CHECK(output == "");
  // max_slot_wal_keep_size -1: no limit, so neither limit family is printed.
  wal.safe_wal_size_bytes.reset();
  wal.keep_size_bytes.reset();
  wal.active = true;
  const std::string unlimited = WalSlotMetricsText(wal);
  CHECK(unlimited.find("outbox_wal_slot_safe_wal_size_bytes") == std::string::npos);
  CHECK(unlimited.find("outbox_wal_slot_keep_size_bytes") == std::string::npos);
  CHECK(unlimited.find("\noutbox_wal_slot_active{slot=\"outbox_wal_outbox_lab_public\"} 1\n") !=
        std::string::npos);
  std::string unlimited_output;
  CHECK(PromtoolCheck(unlimited, unlimited_output) == 0);
}

TEST_CASE("Healthz fails once the loop has not turned for the stall limit and says for how long",
          "[ops]") {
  CHECK(HealthStallLimitMs(10, 1000, 10000) == 25000);
  RelaySnapshot s;
  s.started_steady_ms = 1000;
  // Before the first turn the start counts.
  CHECK(Healthz(s, 1000 + 25000, 25000).ok);
  const ProbeVerdict first = Healthz(s, 1000 + 25001, 25000);
  CHECK_FALSE(first.ok);
  CHECK(first.Body() ==
        "relay loop stalled: no first turn since the start for 25001ms (limit 25s: "
        "--health-factor x --idle-max + --delivery-timeout + 5s)\n");
  s.last_turn_steady_ms = 50000;
  CHECK(Healthz(s, 60000, 25000).ok);
  CHECK(Healthz(s, 60000, 25000).Body() == "ok\n");
  CHECK_FALSE(Healthz(s, 75001, 25000).ok);
}

TEST_CASE("Readyz names every reason a relay cannot publish", "[ops]") {
  RelaySnapshot s;
  s.started_steady_ms = 1000;
  s.last_turn_steady_ms = 5000;
  ReadyInputs in;
  in.now_steady_ms = 6000;
  in.stall_limit_ms = 25000;
  in.oldest_pending_age_ms = 1000;
  in.ready_max_age_ms = 60000;
  CHECK(Readyz(s, in).ok);

  SECTION("a standby in leader mode") {
    s.leader_mode = true;
    const ProbeVerdict v = Readyz(s, in);
    CHECK_FALSE(v.ok);
    REQUIRE(v.reasons.size() == 1);
    CHECK(v.reasons[0].rfind("standby: another relay holds the leader lease", 0) == 0);
    s.lease_token = 3;
    CHECK(Readyz(s, in).ok);
  }
  SECTION("a backlog older than the ready age and an unreachable broker") {
    in.oldest_pending_age_ms = 61000;
    in.broker_error = "no metadata answer within 800 ms: Local: Broker transport failure";
    const ProbeVerdict v = Readyz(s, in);
    CHECK_FALSE(v.ok);
    CHECK(v.Body() ==
          "broker unreachable: no metadata answer within 800 ms: Local: Broker transport "
          "failure\nbacklog too old: the oldest pending row is 61s old, above --ready-max-age "
          "1m\n");
    in.ready_max_age_ms = 0;  // no age rule
    in.broker_error.clear();
    CHECK(Readyz(s, in).ok);
  }
  SECTION("a lost database connection until its reconnect wait is over") {
    s.connection_lost_until_steady_ms = 6500;
    s.db_error = "server closed the connection unexpectedly";
    CHECK(Readyz(s, in).Body() ==
          "database unreachable: server closed the connection unexpectedly\n");
    in.now_steady_ms = 6500;
    CHECK(Readyz(s, in).ok);
  }
  SECTION("a failed status read and a stalled loop") {
    in.oldest_pending_age_ms.reset();
    in.status_error = "database is locked";
    in.now_steady_ms = 5000 + 25001;
    const ProbeVerdict v = Readyz(s, in);
    REQUIRE(v.reasons.size() == 2);
    CHECK(v.reasons[0].rfind("relay loop stalled: no turn for 25001ms", 0) == 0);
    CHECK(v.reasons[1] == "database read failed: database is locked");
  }
}

TEST_CASE("GET parked filters by aggregate and event type and error text and age and pages by id",
          "[ops]") {
  const std::vector<TroubledRow> rows = {
      Parked(9, "L-1", "LoanCreated", "Broker: Message size too large", 120000),
      Parked(3, "L-1", "LoanReturned", "Local: Message timed out", 5000),
      Parked(5, "L-2", "LoanCreated", "Broker: Message size too large", 600000),
      Parked(7, "L-3", "LoanCreated", "Broker: Message size too large", 30000)};
  const auto page = [&](std::multimap<std::string, std::string> params) {
    return ParkedPageJson(rows, 4, ParseParkedQuery(params));
  };
  const auto ids = [](const nlohmann::ordered_json& j) {
    std::vector<std::int64_t> out;
    for (const auto& r : j["rows"]) out.push_back(r["id"].get<std::int64_t>());
    return out;
  };
  CHECK(ids(page({})) == std::vector<std::int64_t>{3, 5, 7, 9});
  CHECK(ids(page({{"aggregate", "L-1"}})) == std::vector<std::int64_t>{3, 9});
  CHECK(ids(page({{"event_type", "LoanCreated"}, {"error", "too large"}})) ==
        std::vector<std::int64_t>{5, 7, 9});
  CHECK(ids(page({{"min_age", "1m"}})) == std::vector<std::int64_t>{5, 9});
  CHECK(ids(page({{"max_age", "30s"}})) == std::vector<std::int64_t>{3, 7});
  const nlohmann::ordered_json first = page({{"limit", "2"}});
  CHECK(ids(first) == std::vector<std::int64_t>{3, 5});
  CHECK(first["matched"] == 4);
  CHECK(first["next_after_id"] == 5);
  CHECK(first["truncated"] == false);
  const nlohmann::ordered_json second = page({{"limit", "2"}, {"after_id", "5"}});
  CHECK(ids(second) == std::vector<std::int64_t>{7, 9});
  CHECK(second["next_after_id"].is_null());
  CHECK(ParkedPageJson(rows, 10, ParkedPageRequest{})["truncated"] == true);
  // A foreign writer's ids 0 and below are listed first, and a cursor below 0 pages past them.
  const std::vector<TroubledRow> foreign = {Parked(2, "L-1", "LoanCreated", "e", 1000),
                                            Parked(-4, "L-1", "LoanCreated", "e", 1000),
                                            Parked(0, "L-2", "LoanCreated", "e", 1000)};
  const nlohmann::ordered_json low = ParkedPageJson(foreign, 3, ParseParkedQuery({{"limit", "2"}}));
  CHECK(ids(low) == std::vector<std::int64_t>{-4, 0});
  CHECK(low["next_after_id"] == 0);
  CHECK(ids(ParkedPageJson(foreign, 3, ParseParkedQuery({{"after_id", "-4"}}))) ==
        std::vector<std::int64_t>{0, 2});

  CHECK_THROWS_WITH(ParseParkedQuery({{"limit", "0"}}),
                    "limit '0': not a whole number from 1 to 1000");
  CHECK_THROWS_WITH(ParseParkedQuery({{"min_age", "5 minutes"}}),
                    Catch::StartsWith("min_age '5 minutes': not a duration"));
  CHECK_THROWS_WITH(ParseParkedQuery({{"aggregat", "L-1"}}),
                    Catch::StartsWith("aggregat: unknown parameter"));
  CHECK_THROWS_WITH(ParseParkedQuery({{"aggregate", "L-1"}, {"aggregate", "L-2"}}),
                    "aggregate: given more than once");
  CHECK_THROWS_WITH(ParseParkedQuery({{"min_age", "2h"}, {"max_age", "1h"}}),
                    "min_age must not exceed max_age");
}

TEST_CASE("POST parked unpark takes ids or a filter with a max and refuses anything else",
          "[ops]") {
  const UnparkRequest by_ids = ParseUnparkRequest(R"({"ids":[4,2,4]})");
  CHECK(by_ids.ids == std::vector<std::int64_t>{4, 2});
  CHECK_FALSE(by_ids.filter);
  const UnparkRequest by_filter =
      ParseUnparkRequest(R"({"filter":{"event_type":"LoanCreated","min_age":"1m"},"max":2})");
  REQUIRE(by_filter.filter);
  CHECK(by_filter.filter->event_type == "LoanCreated");
  CHECK(by_filter.filter->min_age_ms == 60000);
  CHECK(by_filter.max == 2);
  const std::vector<TroubledRow> rows = {Parked(9, "L-1", "LoanCreated", "x", 120000),
                                         Parked(3, "L-1", "LoanCreated", "x", 70000),
                                         Parked(5, "L-2", "LoanReturned", "x", 600000),
                                         Parked(7, "L-3", "LoanCreated", "x", 1000)};
  CHECK(SelectForUnpark(rows, *by_filter.filter, by_filter.max) ==
        std::vector<std::int64_t>{3, 9});
  CHECK(SelectForUnpark(rows, *by_filter.filter, 1) == std::vector<std::int64_t>{3});

  CHECK_THROWS_WITH(ParseUnparkRequest("{\"ids\":[1,"), Catch::StartsWith("body is not JSON: "));
  CHECK_THROWS_WITH(ParseUnparkRequest("[1,2]"), Catch::StartsWith("body must be a JSON object"));
  CHECK_THROWS_WITH(ParseUnparkRequest("{}"),
                    "give either ids or a filter (with max), not both or neither");
  CHECK_THROWS_WITH(ParseUnparkRequest(R"({"ids":[1],"filter":{}, "max":1})"),
                    "give either ids or a filter (with max), not both or neither");
  CHECK_THROWS_WITH(ParseUnparkRequest(R"({"filter":{}})"),
                    Catch::StartsWith("a filter needs max"));
  CHECK_THROWS_WITH(ParseUnparkRequest(R"({"filter":{},"max":0})"),
                    "max: must be a whole number from 1 to 10000");
  CHECK_THROWS_WITH(ParseUnparkRequest(R"({"ids":[9223372036854775808]})"),
                    "ids: 9223372036854775808 is not a 64-bit whole number");
  // A foreign writer's ids 0 and below are ids like any other.
  CHECK(ParseUnparkRequest(R"({"ids":[0,-5,9223372036854775807]})").ids ==
        std::vector<std::int64_t>{0, -5, 9223372036854775807});
  CHECK_THROWS_WITH(ParseUnparkRequest(R"({"ids":["3"]})"),
                    "ids: \"3\" is not a 64-bit whole number");
  CHECK_THROWS_WITH(ParseUnparkRequest(R"({"filter":{"colour":"red"},"max":1})"),
                    Catch::StartsWith("filter.colour: unknown field"));
  CHECK_THROWS_WITH(ParseUnparkRequest(R"({"all":true})"),
                    Catch::StartsWith("all: unknown field"));
}

TEST_CASE("Bearer tokens are read as name and token lines and only a listed token is accepted",
          "[ops]") {
  const std::vector<NamedToken> tokens =
      ParseTokens("# on-call\nalice: 0123456789abcdef0123\n\r\nci:fedcba9876543210\r\n", "test");
  REQUIRE(tokens.size() == 2);
  CHECK(tokens[0].name == "alice");
  CHECK(tokens[0].token == "0123456789abcdef0123");
  CHECK(Authorize(tokens, "Bearer fedcba9876543210") == std::optional<std::string>("ci"));
  CHECK(Authorize(tokens, "Bearer 0123456789abcdef0123") == std::optional<std::string>("alice"));
  CHECK_FALSE(Authorize(tokens, "Bearer fedcba987654321"));
  CHECK_FALSE(Authorize(tokens, "fedcba9876543210"));
  CHECK_FALSE(Authorize(tokens, ""));
  CHECK_FALSE(Authorize({}, "Bearer fedcba9876543210"));
  CHECK_THROWS_WITH(ParseTokens("alice\n", "file 'x'"),
                    "token file 'x' line 1: expected name:token");
  CHECK_THROWS_WITH(ParseTokens("\nalice:short\n", "file 'x'"),
                    Catch::StartsWith("token file 'x' line 2: the token of 'alice' is 5 bytes"));
  CHECK_THROWS_WITH(ParseTokens("a:0123456789abcdef\nb:0123456789abcdef\n", "env"),
                    "token env line 2: 'b' has the same token as 'a'");
}

TEST_CASE("The http address is loopback unless a host is given", "[ops]") {
  CHECK(ParseListenAddress("9464").host == "127.0.0.1");
  CHECK(ParseListenAddress("9464").port == 9464);
  CHECK(ParseListenAddress("0.0.0.0:0").host == "0.0.0.0");
  CHECK(ParseListenAddress("0.0.0.0:0").port == 0);
  CHECK(ParseListenAddress("[::1]:8080").host == "::1");
  CHECK(ParseListenAddress("[::1]:8080").port == 8080);
  CHECK_THROWS_AS(ParseListenAddress("65536"), ConfigError);
  CHECK_THROWS_AS(ParseListenAddress("localhost:"), ConfigError);
  CHECK_THROWS_AS(ParseListenAddress(":80"), ConfigError);
  CHECK_THROWS_AS(ParseListenAddress("::1:80"), ConfigError);
  CHECK_THROWS_WITH(ParseListenAddress("http"),
                    "--http 'http': the port is not a whole number from 0 to 65535 (expected "
                    "PORT, HOST:PORT or [IPV6]:PORT)");
}

namespace {

// An IdleWaiter that reports a stop after stop_after calls of StopRequested.
class CountingWaiter : public IdleWaiter {
 public:
  void ForgetWakeups() override {}
  Wake Wait(int) override { return Wake::kTimeout; }
  bool StopRequested() override { return ++asked > stop_after; }
  int asked = 0;
  int stop_after = 1000;
};

}  // namespace

TEST_CASE("The observer counts loop turns and batches and lease changes and database losses",
          "[ops]") {
  RelayObserver observer(true);
  CountingWaiter inner;
  ObservedWaiter waiter(inner, observer);
  CHECK(observer.Read().last_turn_steady_ms == 0);
  CHECK_FALSE(waiter.StopRequested());
  waiter.Wait(5);
  RelaySnapshot s = observer.Read();
  CHECK(s.turns == 2);
  CHECK(s.last_turn_steady_ms >= s.started_steady_ms);
  CHECK(s.leader_mode);

  RelayOptions relay_options;
  int leases_seen = 0;
  relay_options.on_lease = [&leases_seen](const LeaseEvent&) { ++leases_seen; };
  ObserveRelay(observer, relay_options);
  LeaseEvent acquired;
  acquired.lease.token = 7;
  relay_options.on_lease(acquired);
  CHECK(leases_seen == 1);  // the CLI's own callback still runs
  CHECK(observer.Read().lease_token == 7);
  LeaseEvent lost;
  lost.kind = LeaseEvent::Kind::kLost;
  relay_options.on_lease(lost);
  s = observer.Read();
  CHECK(s.lease_token == 0);
  CHECK(s.lease_acquired == 1);
  CHECK(s.lease_lost == 1);

  LoopOptions loop_options;
  int batches_seen = 0;
  const auto on_batch =
      ObserveLoop(observer, loop_options, [&batches_seen](const BatchReport&) { ++batches_seen; });
  BatchReport batch;
  batch.claimed = 3;
  batch.failed = 3;
  on_batch(batch);
  s = observer.Read();
  CHECK(batches_seen == 1);
  CHECK(s.batches == 1);
  CHECK(s.failed == 3);
  CHECK(s.last_batch_all_failed);
  loop_options.on_connection_lost("server closed the connection", 1, 100);
  s = observer.Read();
  CHECK(s.db_error == "server closed the connection");
  CHECK(s.connection_losses == 1);
  CHECK(s.connection_lost_until_steady_ms >= RelayObserver::SteadyNowMs() + 100);
  batch.acked = 2;
  batch.failed = 1;
  batch.settle.marked = 2;
  on_batch(batch);
  s = observer.Read();
  CHECK(s.acked == 2);
  CHECK(s.marked == 2);
  CHECK_FALSE(s.last_batch_all_failed);
  CHECK(s.connection_lost_until_steady_ms == 0);  // a settled batch reached the database
}

TEST_CASE("The leader gauge follows the lease row: 0 once this relay's term lapsed or passed on",
          "[ops]") {
  RelaySnapshot snapshot = BusySnapshot();
  snapshot.lease_token = 4;
  RelayVerdicts verdicts;
  verdicts.now_steady_ms = 10500;
  const auto leader_line = [&] {
    const std::string text = RelayMetricsText(snapshot, verdicts);
    const auto at = text.find("\noutbox_relay_leader ");
    REQUIRE(at != std::string::npos);
    return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
  };
  // No status read to compare with: the loop's own word.
  CHECK(leader_line() == "outbox_relay_leader 1");
  verdicts.lease = LeaderLease{"relay-1", 4, 1700000030000, 1700000000000};
  verdicts.lease_now_ms = 1700000010000;
  CHECK(leader_line() == "outbox_relay_leader 1");
  // A stalled loop still holds token 4, but the term ran out.
  verdicts.lease_now_ms = 1700000030000;
  CHECK(leader_line() == "outbox_relay_leader 0");
  // Another relay took over with token 5.
  verdicts.lease = LeaderLease{"relay-2", 5, 1700000060000, 1700000030001};
  verdicts.lease_now_ms = 1700000040000;
  CHECK(leader_line() == "outbox_relay_leader 0");
  snapshot.lease_token = 0;
  verdicts.lease.reset();
  CHECK(leader_line() == "outbox_relay_leader 0");
}
