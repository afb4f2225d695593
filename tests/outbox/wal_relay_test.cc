// The WAL relay against the PostgreSQL server in OUTBOX_PG_URL (started with wal_level=logical by
// scripts/postgres.sh): a slot and a publication per test schema, dropped at the end.
#include <catch2/catch.hpp>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "outbox/failpoint.h"
#include "outbox/pg/connection.h"
#include "outbox/pg_store.h"
#include "outbox/wal_progress.h"
#include "outbox/wal_relay.h"
#include "pg_test_support.h"
#include "test_support.h"
#include "wal_test_support.h"

namespace outbox {
namespace {

using testing::FakePublisher;
using testing::WalSchema;
constexpr int kPollTries = testing::kWalPollTries;

OutboxEvent Event(const std::string& id, std::string payload) {
  return OutboxEvent{id, "L-" + id, "LoanCreated", std::move(payload), 0};
}

void EnqueueOne(PgStore& store, const OutboxEvent& event) {
  auto txn = store.BeginWrite();
  store.Enqueue(txn, event);
  txn.Commit();
}

// Runs batches until n records were sent or 50 batches passed.
std::int64_t RunUntil(WalRelay& relay, std::int64_t n) {
  std::int64_t records = 0;
  for (int i = 0; i < 50 && records < n; ++i) records += relay.RunBatch().records;
  return records;
}

std::vector<std::string> Keys(const FakePublisher& publisher) { return publisher.SentKeys(); }

// Creates the schema's slot and publication with a relay that opens once and closes.
void CreateSlot(const WalSchema& schema, PgStore& store) {
  FakePublisher publisher;
  WalRelay creator(schema.url(), store, publisher, {});
  creator.Open();
}

// relay.Open(), retried while the slot is still active for a walsender that is going away (the
// previous relay's, closed a moment ago).
WalOpenReport OpenOnceFree(WalRelay& relay) {
  for (int i = 0;; ++i) {
    try {
      return relay.Open();
    } catch (const WalRelayError& e) {
      if (e.kind() != WalRelayError::Kind::kSlotActive || i + 1 >= kPollTries) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

}  // namespace

TEST_CASE("The WAL relay publishes committed outbox inserts in commit order with the polling relay's record fields", "[postgres][wal]") {
  WalSchema schema("wal");
  PgStore store(schema.url());
  FakePublisher publisher;
  WalRelay relay(schema.url(), store, publisher, {});
  const WalOpenReport open = relay.Open();
  CHECK(open.created_slot);
  CHECK(open.created_publication);
  CHECK(open.slot == schema.slot());
  CHECK(open.walsender_pid > 0);
  EnqueueOne(store, Event("evt-1001", std::string("{\"a\":1}\xff\x00", 9)));
  EnqueueOne(store, Event("evt-1002", "{}"));
  {
    // Two rows in one transaction: one commit, confirmed once.
    auto txn = store.BeginWrite();
    store.Enqueue(txn, Event("evt-1003", "{}"));
    store.Enqueue(txn, Event("evt-1004", "{}"));
    txn.Commit();
  }
  CHECK(RunUntil(relay, 4) == 4);
  CHECK(Keys(publisher) == std::vector<std::string>{"evt-1001", "evt-1002", "evt-1003", "evt-1004"});
  const OutboundMessage& first = publisher.calls.front().front();
  CHECK(first.outbox_id == 1);
  CHECK(first.event_id == "evt-1001");
  CHECK(first.event_type == "LoanCreated");
  CHECK(first.payload == std::string("{\"a\":1}\xff\x00", 9));
  CHECK(first.run_id == store.RunId());
  CHECK(relay.confirmed() > open.confirmed);
  // The standby status update moves the slot's confirmed_flush_lsn to the last commit's end.
  pg::Connection sql(schema.url());
  std::string confirmed;
  for (int i = 0; i < kPollTries; ++i) {
    confirmed = sql.Query("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                          {pg::Param::Text(schema.slot())}, "slot")
                    .Text(0, 0);
    if (pg::ParseLsn(confirmed) >= relay.confirmed()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(pg::ParseLsn(confirmed) >= relay.confirmed());
  // No UPDATE on the outbox: every row still carries published = false.
  CHECK(sql.QueryInt("SELECT count(*) FROM outbox WHERE NOT published", {}, "count") == 4);
}

TEST_CASE("A WAL relay that stops between the ack and the confirm gets the same commits again after a restart", "[postgres][wal]") {
  WalSchema schema("wal");
  PgStore store(schema.url());
  {
    FakePublisher publisher;
    WalRelayOptions options;
    options.batch_size = 2;
    options.linger_ms = 5000;  // one batch of both commits
    WalRelay relay(schema.url(), store, publisher, options);
    relay.Open();
    EnqueueOne(store, Event("evt-1001", "{}"));
    EnqueueOne(store, Event("evt-1002", "{}"));
    ConfigureFailpoints("relay.wal.after_ack_before_confirm=error");
    bool stopped = false;
    for (int i = 0; i < 50 && !stopped; ++i) {
      try {
        relay.RunBatch();
      } catch (const FailpointError&) {
        stopped = true;
      }
    }
    ConfigureFailpoints("");
    REQUIRE(stopped);
    CHECK(Keys(publisher) == std::vector<std::string>{"evt-1001", "evt-1002"});
    // The batch failed after its acks: the relay streams nothing more until it is opened again.
    CHECK_THROWS_AS(relay.RunBatch(), std::logic_error);
  }
  // Opens a new relay once the last stream's walsender has let go of the slot.
  const auto open_when_free = [&](WalRelay& relay) {
    for (int i = 0; i < kPollTries; ++i) {
      try {
        return relay.Open();
      } catch (const WalRelayError& e) {
        if (e.kind() != WalRelayError::Kind::kSlotActive) throw;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    return relay.Open();
  };
  {
    FakePublisher publisher;
    WalRelay relay(schema.url(), store, publisher, {});
    CHECK_FALSE(open_when_free(relay).created_slot);
    CHECK(RunUntil(relay, 2) == 2);
    CHECK(Keys(publisher) == std::vector<std::string>{"evt-1001", "evt-1002"});
  }
  // Confirmed now: a third start has nothing to send, and catches up.
  FakePublisher publisher;
  WalRelay third(schema.url(), store, publisher, {});
  open_when_free(third);
  for (int i = 0; i < 40 && !third.CaughtUp(); ++i) third.RunBatch();  // ends once caught up
  CHECK(third.CaughtUp());
  CHECK(publisher.calls.empty());
}

TEST_CASE("A second WAL relay on the same slot is refused in one line naming the PID", "[postgres][wal]") {
  WalSchema schema("wal");
  PgStore store(schema.url());
  FakePublisher publisher;
  WalRelay first(schema.url(), store, publisher, {});
  const WalOpenReport open = first.Open();
  WalRelay second(schema.url(), store, publisher, {});
  try {
    second.Open();
    FAIL("the second relay streamed the slot");
  } catch (const WalRelayError& e) {
    CHECK(e.kind() == WalRelayError::Kind::kSlotActive);
    const std::string message = e.what();
    CHECK(message.find("refused") != std::string::npos);
    CHECK(message.find("is active for PID " + std::to_string(open.walsender_pid)) != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
}

TEST_CASE("A WAL relay that starts while status peeks at its slot waits for the peek instead of being refused", "[postgres][wal]") {
  WalSchema schema("wal");
  PgStore store(schema.url());
  FakePublisher publisher;
  pg::Connection sql(schema.url());
  // No walsender holds the slot (a closed relay's exits a moment after its stream closed).
  const auto wait_no_walsender = [&sql, &schema]() {
    for (int i = 0; i < 200; ++i) {
      if (sql.QueryInt("SELECT count(*) FROM pg_replication_slots s JOIN pg_stat_activity a ON "
                       "a.pid = s.active_pid WHERE s.slot_name = $1 AND a.backend_type = "
                       "'walsender'",
                       {pg::Param::Text(schema.slot())}, "slot's walsender") == 0)
        return;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    FAIL("the slot's walsender did not exit within 5 s");
  };
  { WalRelay(schema.url(), store, publisher, {}).Open(); }  // creates the slot
  wait_no_walsender();
  // Pending inserts, so that each peek decodes for a while and holds the slot meanwhile.
  sql.Exec("INSERT INTO outbox(event_id, aggregate_id, event_type, payload) SELECT 'evt-'||i, "
           "'L-'||i, 'LoanCreated', convert_to('{}', 'UTF8') FROM generate_series(1, 5000) i",
           "insert 5000 rows");
  std::atomic<bool> stop{false};
  std::atomic<int> peeks{0};
  std::thread peeker([&]() {
    // What verify, check and status do: a peek whenever no WAL relay streams the slot.
    while (!stop) {
      try {
        const std::optional<WalProgress> progress = ReadWalProgress(schema.url());
        if (progress && progress->pending_ids) ++peeks;
      } catch (const std::exception&) {
        // The relay took the slot between the look and the peek: the peek's own refusal.
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  int opened = 0;
  for (int i = 0; i < 8; ++i) {
    try {
      WalRelay relay(schema.url(), store, publisher, {});
      relay.Open();
      ++opened;
    } catch (const WalRelayError& e) {
      UNSCOPED_INFO("attempt " << i << ": " << e.what());
    }
    wait_no_walsender();
  }
  stop = true;
  peeker.join();
  CHECK(peeks > 0);
  CHECK(opened == 8);
}

TEST_CASE("A dropped slot whose publication remains is a clear error with the resync", "[postgres][wal]") {
  WalSchema schema("wal");
  PgStore store(schema.url());
  FakePublisher publisher;
  {
    WalRelay relay(schema.url(), store, publisher, {});
    relay.Open();
  }
  pg::Connection sql(schema.url());
  bool dropped = false;
  for (int i = 0; i < 100 && !dropped; ++i) {
    try {
      sql.Query("SELECT pg_drop_replication_slot($1)", {pg::Param::Text(schema.slot())}, "drop");
      dropped = true;
    } catch (const pg::PgError&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  REQUIRE(dropped);
  WalRelay relay(schema.url(), store, publisher, {});
  try {
    relay.Open();
    FAIL("a relay streamed without its slot");
  } catch (const WalRelayError& e) {
    CHECK(e.kind() == WalRelayError::Kind::kSlotLost);
    CHECK_THAT(e.what(), Catch::Matchers::Contains("is gone (dropped)") &&
                             Catch::Matchers::Contains("resync"));
  }
}

TEST_CASE("A terminated walsender breaks the stream with a connection-lost error and Open streams again", "[postgres][wal]") {
  WalSchema schema("wal");
  PgStore store(schema.url());
  FakePublisher publisher;
  WalRelay relay(schema.url(), store, publisher, {});
  const WalOpenReport open = relay.Open();
  pg::Connection sql(schema.url());
  sql.Query("SELECT pg_terminate_backend($1)", {pg::Param::Int(open.walsender_pid)}, "terminate");
  bool lost = false;
  for (int i = 0; i < 20 && !lost; ++i) {
    try {
      relay.RunBatch();
    } catch (const pg::PgError& e) {
      lost = e.connection_lost();
    }
  }
  REQUIRE(lost);
  EnqueueOne(store, Event("evt-1001", "{}"));
  WalOpenReport again;
  for (int i = 0; i < kPollTries; ++i) {
    try {
      again = relay.Open();
      break;
    } catch (const WalRelayError&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  CHECK(again.walsender_pid != open.walsender_pid);
  CHECK(RunUntil(relay, 1) == 1);
  CHECK(Keys(publisher) == std::vector<std::string>{"evt-1001"});
}

}  // namespace outbox

namespace outbox {

TEST_CASE("The WAL relay's progress names the inserts still pending in an inactive slot and only the state of an active one", "[postgres][wal]") {
  WalSchema schema("wal");
  PgStore store(schema.url());
  CHECK_FALSE(ReadWalProgress(schema.url()).has_value());
  FakePublisher publisher;
  {
    WalRelay relay(schema.url(), store, publisher, {});
    const WalOpenReport open = relay.Open();
    EnqueueOne(store, Event("evt-1001", "{}"));
    CHECK(RunUntil(relay, 1) == 1);
    const std::optional<WalProgress> streaming = ReadWalProgress(schema.url());
    REQUIRE(streaming.has_value());
    CHECK(streaming->active);
    CHECK(streaming->active_pid == open.walsender_pid);
    CHECK_FALSE(streaming->pending_ids.has_value());
  }
  EnqueueOne(store, Event("evt-1002", "{}"));
  EnqueueOne(store, Event("evt-1003", "{}"));
  std::optional<WalProgress> stopped;
  for (int i = 0; i < kPollTries; ++i) {
    stopped = ReadWalProgress(schema.url());
    if (stopped && !stopped->active) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(stopped.has_value());
  CHECK_FALSE(stopped->active);
  CHECK(stopped->slot == schema.slot());
  REQUIRE(stopped->pending_ids.has_value());
  CHECK(*stopped->pending_ids == std::set<std::int64_t>{2, 3});
  CHECK(stopped->lag_bytes > 0);
}

}  // namespace outbox

namespace outbox {

TEST_CASE("A stop at each WAL relay failpoint loses nothing and re-sends only the unconfirmed batch", "[postgres][wal]") {
  for (const char* point : {"relay.wal.after_receive", "relay.wal.after_produce",
                            "relay.wal.after_ack_before_confirm"}) {
    INFO("failpoint " << point);
    WalSchema schema("wal");
    PgStore store(schema.url());
    WalRelayOptions options;
    options.batch_size = 2;
    options.linger_ms = 5000;
    FakePublisher first_publisher;
    {
      WalRelay relay(schema.url(), store, first_publisher, options);
      relay.Open();
      EnqueueOne(store, Event("evt-1001", "{}"));
      EnqueueOne(store, Event("evt-1002", "{}"));
      CHECK(RunUntil(relay, 2) == 2);  // confirmed
      EnqueueOne(store, Event("evt-1003", "{}"));
      EnqueueOne(store, Event("evt-1004", "{}"));
      ConfigureFailpoints(std::string(point) + "=error");
      bool stopped = false;
      for (int i = 0; i < 50 && !stopped; ++i) {
        try {
          relay.RunBatch();
        } catch (const FailpointError&) {
          stopped = true;
        }
      }
      ConfigureFailpoints("");
      REQUIRE(stopped);
    }
    FakePublisher second_publisher;
    WalRelay restarted(schema.url(), store, second_publisher, options);
    for (int i = 0; i < kPollTries; ++i) {
      try {
        restarted.Open();
        break;
      } catch (const WalRelayError&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    CHECK(RunUntil(restarted, 2) == 2);
    // Only the unconfirmed batch again: evt-1001 and evt-1002 were confirmed before the stop.
    CHECK(Keys(second_publisher) == std::vector<std::string>{"evt-1003", "evt-1004"});
    const std::vector<std::string> first = Keys(first_publisher);
    const bool produced = std::string(point) != "relay.wal.after_receive";
    CHECK(first.size() == (produced ? 4u : 2u));
  }
}

TEST_CASE("A row that keeps failing for its own sake stops the WAL relay with nothing confirmed past it", "[postgres][wal]") {
  WalSchema schema("wal");
  PgStore store(schema.url());
  FakePublisher publisher({false, false, false});
  WalRelayOptions options;
  options.max_attempts = 3;
  options.backoff_base_ms = 1;
  options.backoff_max_ms = 2;
  std::vector<std::int64_t> retries;
  options.on_retry = [&](std::int64_t failed, const std::string&, std::int64_t) { retries.push_back(failed); };
  {
    WalRelay relay(schema.url(), store, publisher, options);
    relay.Open();
    EnqueueOne(store, Event("evt-1001", "{}"));
    try {
      RunUntil(relay, 1);
      FAIL("an undeliverable row was passed over");
    } catch (const WalRelayError& e) {
      CHECK(e.kind() == WalRelayError::Kind::kUndeliverable);
      CHECK_THAT(e.what(), Catch::Matchers::Contains("outbox id 1 (event evt-1001) failed 3 times: "
                                                     "fake: scripted delivery failure"));
    }
  }
  CHECK(retries == std::vector<std::int64_t>{1, 1});
  CHECK(publisher.calls.size() == 3);
  // Nothing was confirmed past it: a restarted relay is streamed the row again.
  FakePublisher healthy;
  WalRelay restarted(schema.url(), store, healthy, {});
  for (int i = 0; i < kPollTries; ++i) {
    try {
      restarted.Open();
      break;
    } catch (const WalRelayError&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  CHECK(RunUntil(restarted, 1) == 1);
  CHECK(Keys(healthy) == std::vector<std::string>{"evt-1001"});
}

TEST_CASE("The WAL relay forwards a row's traceparent unchanged and skips a row whose headers are bad with the reason", "[postgres][wal][headers]") {
  WalSchema schema("wal");
  PgStore store(schema.url());
  FakePublisher publisher;
  WalRelayOptions options;
  std::vector<std::string> skipped;
  options.on_skipped = [&](std::int64_t id, const std::string& why) {
    skipped.push_back(std::to_string(id) + ": " + why);
  };
  WalRelay relay(schema.url(), store, publisher, options);
  relay.Open();
  const std::string traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  OutboxEvent traced = Event("evt-1001", "{}");
  traced.headers = R"({"traceparent":")" + traceparent + R"("})";
  EnqueueOne(store, traced);
  OutboxEvent bad = Event("evt-1002", "{}");
  bad.headers = R"({"traceparent":)";  // a foreign writer's invalid JSON
  EnqueueOne(store, bad);
  EnqueueOne(store, Event("evt-1003", "{}"));
  CHECK(RunUntil(relay, 2) == 2);
  CHECK(Keys(publisher) == std::vector<std::string>{"evt-1001", "evt-1003"});
  const OutboundMessage& first = publisher.calls.front().front();
  REQUIRE(first.headers.size() == 1);
  CHECK(first.headers[0].name == "traceparent");
  CHECK(first.headers[0].value == traceparent);
  for (const auto& call : publisher.calls)
    for (const OutboundMessage& m : call)
      if (m.event_id == "evt-1003") CHECK(m.headers.empty());
  CHECK(skipped == std::vector<std::string>{"2: headers column: invalid JSON: it ends after 15 bytes"});
}

}  // namespace outbox

namespace outbox {

TEST_CASE("The WAL slot lag warning fires at the threshold or on a dangerous wal_status and names the fix", "[wal]") {
  WalProgress wal;
  wal.slot = "s1";
  wal.wal_status = "reserved";
  wal.lag_bytes = 511;
  wal.keep_size_bytes = 1024;
  // No threshold given: half of max_slot_wal_keep_size.
  CHECK(WalLagWarnBytes(wal, 0) == 512);
  CHECK(WalSlotLagWarning(wal, 0) == "");
  wal.lag_bytes = 512;
  CHECK(WalSlotLagWarning(wal, 0) ==
        "WAL slot s1 lags 512 bytes (threshold 512 bytes, wal_status reserved, "
        "max_slot_wal_keep_size 1024 bytes, safe_wal_size unlimited): the server keeps this WAL "
        "and invalidates the slot past max_slot_wal_keep_size; no WAL relay streams it: start "
        "`relay --source wal`, or drop the slot and resync as docs/wal-relay.md says");
  // A threshold given wins; without a server limit the default is 1 GiB.
  CHECK(WalSlotLagWarning(wal, 513) == "");
  wal.keep_size_bytes.reset();
  CHECK(WalLagWarnBytes(wal, 0) == kWalLagWarnUnlimitedBytes);
  CHECK(WalSlotLagWarning(wal, 0) == "");
  // A slot the server is about to give up warns at any lag; an active one names its walsender.
  wal.wal_status = "unreserved";
  wal.active = true;
  wal.active_pid = 42;
  CHECK(WalSlotLagWarning(wal, 0).find("wal_status unreserved") != std::string::npos);
  CHECK(WalSlotLagWarning(wal, 0).find("walsender PID 42) is behind") != std::string::npos);
  wal.wal_status = "lost";
  CHECK(WalSlotLagWarning(wal, 0).find("is lost") != std::string::npos);
}

TEST_CASE("A WAL slot with no relay lags more with each insert and warns past the threshold", "[postgres][wal]") {
  WalSchema schema("wal");
  PgStore store(schema.url());
  FakePublisher publisher;
  {
    WalRelay relay(schema.url(), store, publisher, {});
    relay.Open();
  }
  // The relay is gone and its slot stays: each insert is WAL the slot keeps.
  std::optional<WalProgress> before;
  for (int i = 0; i < kPollTries; ++i) {
    before = ReadWalProgress(schema.url());
    if (before && !before->active) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(before.has_value());
  REQUIRE_FALSE(before->active);
  const std::int64_t lag0 = before->lag_bytes;
  // scripts/postgres.sh starts the server with max_slot_wal_keep_size=1GB: safe_wal_size is set.
  pg::Connection sql(schema.url());
  const std::int64_t keep =
      sql.Query("SELECT pg_size_bytes(current_setting('max_slot_wal_keep_size'))", {}, "keep")
          .Int(0, 0);
  if (keep >= 0) {
    REQUIRE(before->keep_size_bytes.has_value());
    CHECK(*before->keep_size_bytes == keep);
    CHECK(before->safe_wal_size_bytes.has_value());
  } else {
    CHECK_FALSE(before->keep_size_bytes.has_value());
  }
  CHECK(WalSlotLagWarning(*before, 0) == "");
  for (int i = 0; i < 20; ++i)
    EnqueueOne(store, Event("evt-" + std::to_string(2000 + i), std::string(1000, 'x')));
  const std::optional<WalProgress> after = ReadWalProgress(schema.url());
  REQUIRE(after.has_value());
  // 20 rows of 1,000-byte payloads: at least 20,000 bytes of WAL more.
  CHECK(after->lag_bytes >= lag0 + 20000);
  REQUIRE(after->pending_ids.has_value());
  CHECK(after->pending_ids->size() == 20);
  const std::string warning = WalSlotLagWarning(*after, 20000);
  CHECK(warning.find("WAL slot " + schema.slot() + " lags " + std::to_string(after->lag_bytes) +
                     " bytes (threshold 20000 bytes") != std::string::npos);
  CHECK(warning.find("start `relay --source wal`") != std::string::npos);
  CHECK(WalSlotLagWarning(*after, after->lag_bytes + 1) == "");
}

}  // namespace outbox

namespace outbox {

// relay --source wal --until-empty stops when CaughtUp. A walsender answers a status update that
// asks for a reply only between WAL records, and answers every one waiting at once. Stalled for
// two of the relay's idle batches (stopped here with SIGSTOP; descheduled on a loaded machine, or
// blocked reading WAL from a slow disk), it then sent two keepalives with one wal_end though it
// had not read past it, and CaughtUp took that for "had nothing more to send": the relay stopped
// before the outbox rows committed before it started (3 of 3 runs: 0 of 5 records sent).
TEST_CASE("A WAL relay run until caught up does not stop early after its walsender stalls", "[postgres][wal]") {
  WalSchema schema("wal");
  PgStore store(schema.url());
  CreateSlot(schema, store);  // what follows is in its stream
  pg::Connection sql(schema.url());
  // 300,000 rows of a table outside the publication before the outbox rows: the walsender reads
  // their WAL for a while, so it is still reading it when it is stopped below.
  sql.Exec("CREATE TABLE filler(id int, pad text); INSERT INTO filler SELECT g, repeat('x', 20) "
           "FROM generate_series(1, 300000) g",
           "fill a table outside the publication");
  for (int i = 0; i < 5; ++i) EnqueueOne(store, Event("evt-" + std::to_string(1001 + i), "{}"));

  FakePublisher publisher;
  WalRelayOptions options;
  options.wait_ms = 20;
  WalRelay relay(schema.url(), store, publisher, options);
  const WalOpenReport open = OpenOnceFree(relay);
  REQUIRE(open.walsender_pid > 0);
  {
    // The test runs as root or as the server's user (scripts/postgres.sh): it may signal it.
    REQUIRE(kill(open.walsender_pid, SIGSTOP) == 0);
    struct Continue {
      int pid;
      ~Continue() { kill(pid, SIGCONT); }
    } resume{open.walsender_pid};
    // Two idle batches, each asking for a reply that waits in the stopped walsender's socket.
    for (int i = 0; i < 2; ++i) CHECK(relay.RunBatch().idle);
    CHECK_FALSE(relay.CaughtUp());
  }
  // The bound only ends a failing test: the relay catches up in about a second here.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  std::int64_t records = 0;
  int batches = 0;
  while (!relay.CaughtUp() && std::chrono::steady_clock::now() < deadline) {
    records += relay.RunBatch().records;
    ++batches;
  }
  INFO(batches << " batches after the walsender went on");
  CHECK(relay.CaughtUp());
  CHECK(records == 5);
  CHECK(Keys(publisher) ==
        std::vector<std::string>{"evt-1001", "evt-1002", "evt-1003", "evt-1004", "evt-1005"});
}

}  // namespace outbox

namespace outbox {

// Another session idle in its transaction with a record that crosses a WAL page: the server
// writes the full page and no one flushes the rest of the record, so the walsender cannot read
// past pg_current_wal_lsn() until the server's next snapshot record (15 s on an idle server;
// relay --source wal --until-empty took 5.6 and 8.6 s on an otherwise idle server before Open
// committed a transaction of its own that wrote WAL; with one that only took an xid, an
// asynchronous commit, this check failed). On the shared test server other sessions' commits
// may flush it anyway; on an idle one, without Open's commit, the flush stays short of it.
TEST_CASE("A WAL relay's Open flushes the WAL past a record another session left unflushed", "[postgres][wal]") {
  WalSchema schema("wal");
  PgStore store(schema.url());
  // The slot first: creating one waits for every transaction with an xid to end, the idle one
  // below included.
  CreateSlot(schema, store);
  pg::Connection idle(schema.url());
  idle.Exec("CREATE TABLE bulk(t text)", "create a table outside the publication");
  idle.Exec("BEGIN", "begin the idle transaction");
  idle.Exec("INSERT INTO bulk SELECT string_agg(md5(random()::text), '') FROM "
            "generate_series(1, 3037)",
            "insert a row of about 97 KB, more than one WAL page");
  pg::Connection sql(schema.url());
  const std::string inserted =
      sql.Query("SELECT pg_current_wal_insert_lsn()::text", {}, "insert position").Text(0, 0);
  FakePublisher publisher;
  WalRelayOptions options;
  options.wait_ms = 20;
  WalRelay relay(schema.url(), store, publisher, options);
  const WalOpenReport open = OpenOnceFree(relay);
  REQUIRE(open.walsender_pid > 0);
  CHECK(sql.Query("SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn", {pg::Param::Text(inserted)},
                  "flushed past the insert")
            .Text(0, 0) == "t");
  // The bound only ends a failing test.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!relay.CaughtUp() && std::chrono::steady_clock::now() < deadline) relay.RunBatch();
  CHECK(relay.CaughtUp());
  idle.Exec("ROLLBACK", "end the idle transaction");
}

}  // namespace outbox
