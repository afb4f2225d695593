// PgStore's leader page under block key (PgStore::ReadPage): the rows of the per-row rule
// (each sendable row with no earlier unpublished row of its aggregate, in id order, at most
// limit), whether the one statement found them in id order, from the aggregates' heads once the
// page stepped over its scan budget, or in id order again past a walk that found too many
// aggregates. Checked against a model on random tables, and through a relay draining a backlog
// of one hot aggregate. Needs OUTBOX_PG_URL (pg_test_support.h).
#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "outbox/id_range.h"
#include "outbox/pg/connection.h"
#include "outbox/pg_store.h"
#include "outbox/relay.h"
#include "pg_test_support.h"
#include "relay_test_support.h"

using namespace outbox;

namespace {

using Ids = std::vector<std::int64_t>;

enum class RowState { kPending, kPublished, kParked, kBackoff, kFailedDue, kDelayed, kClaimed };

// The columns of a row in state, as a foreign writer or an earlier relay left them, on the
// server's clock: published, attempts, next_attempt_at, parked_at, not_before (epoch ms),
// claim_token, claim_owner, claim_until.
std::string StateColumns(RowState state) {
  switch (state) {
    case RowState::kPending: return "false, 0, '-infinity', NULL, NULL, NULL, NULL, NULL";
    case RowState::kPublished: return "true, 0, '-infinity', NULL, NULL, NULL, NULL, NULL";
    case RowState::kParked: return "false, 3, '-infinity', now(), NULL, NULL, NULL, NULL";
    case RowState::kBackoff:
      return "false, 1, now() + interval '1 hour', NULL, NULL, NULL, NULL, NULL";
    case RowState::kFailedDue:
      return "false, 2, now() - interval '1 second', NULL, NULL, NULL, NULL, NULL";
    case RowState::kDelayed:
      return "false, 0, '-infinity', NULL, (extract(epoch FROM now()) * 1000)::bigint + 3600000, "
             "NULL, NULL, NULL";
    case RowState::kClaimed:
      return "false, 0, '-infinity', NULL, NULL, 7, 'other', now() + interval '1 hour'";
  }
  return "";
}

// The rows ReadPage must return, from the rule itself: rows ids[i] (ascending) in (after_id,
// up_to_id], each pending or failed and due, with no earlier row of its aggregate unpublished
// (any state but published, whatever its id), at most limit.
Ids ExpectedPage(const Ids& ids, const std::vector<std::string>& aggregates,
                 const std::vector<RowState>& states, std::optional<std::int64_t> after_id,
                 std::int64_t up_to_id, std::int64_t limit) {
  Ids page;
  const IdRange range = IdsAfter(after_id, up_to_id);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (static_cast<std::int64_t>(page.size()) == limit) break;
    if (ids[i] < range.first || ids[i] > range.last) continue;
    if (states[i] != RowState::kPending && states[i] != RowState::kFailedDue) continue;
    bool held = false;
    for (std::size_t j = 0; j < i; ++j)
      held = held || (aggregates[j] == aggregates[i] && states[j] != RowState::kPublished);
    if (!held) page.push_back(ids[i]);
  }
  return page;
}

}  // namespace

TEST_CASE("PostgreSQL leader page under block-key returns the rows of the per-row rule in id "
          "order and from the aggregates' heads",
          "[postgres][ordering]") {
  // 150 random tables of 40 rows (ids -4..35: a foreign writer's 0 and negative ids too) on 1
  // to 6 aggregates, each row in one state; a random cursor (none in one round in five), upper
  // bound and limit. In two rounds of three the scan budget is 1 to 8 rows (and as many
  // aggregates for the walk): past it the page comes from the heads when at most that many
  // aggregates have unpublished rows, else it is read row by row. Two such requests are read in
  // turn, four times each, on one connection: the server may plan a prepared statement once
  // for all calls from the sixth on (a generic plan); after a page from the heads the next may
  // start with them, after a walk that gave up the next are read row by row.
  testing::PgSchema schema("ph");
  pg::Connection sql(schema.url());
  std::mt19937 random(20261203);
  const std::vector<RowState> kStates = {
      RowState::kPending,   RowState::kPublished, RowState::kParked, RowState::kBackoff,
      RowState::kFailedDue, RowState::kDelayed,   RowState::kClaimed};
  std::int64_t by_heads = 0;
  int cut_rounds = 0;
  for (int round = 0; round < 150; ++round) {
    PgStore store(schema.url());
    const int aggregate_count = 1 + static_cast<int>(random() % 6);
    Ids ids;
    std::vector<std::string> aggregates;
    std::vector<RowState> states;
    std::string values;
    for (int i = 0; i < 40; ++i) {
      ids.push_back(i - 4);
      aggregates.push_back("L-" + std::to_string(random() % aggregate_count));
      // Mostly published or pending, as in a drain; now and then a failed or held row.
      const unsigned pick = random() % 20;
      states.push_back(pick < 8    ? RowState::kPublished
                       : pick < 14 ? RowState::kPending
                                   : kStates[pick % 7]);
      values += (i == 0 ? "(" : ", (") + std::to_string(ids.back()) + ", 'evt-" +
                std::to_string(i) + "', '" + aggregates.back() + "', 'LoanCreated', '\\x7b7d', " +
                StateColumns(states.back()) + ")";
    }
    sql.Exec("TRUNCATE outbox; INSERT INTO outbox(id, event_id, aggregate_id, event_type, "
             "payload, published, attempts, next_attempt_at, parked_at, not_before, claim_token, "
             "claim_owner, claim_until) VALUES " + values,
             "fill a random outbox");
    // Two requests on the table, read in turn: a page after one from the heads may start with
    // the heads, whatever its own budget.
    PageRequest requests[2];
    Ids expected[2];
    for (int r = 0; r < 2; ++r) {
      PageRequest& request = requests[r];
      if (round % 5 != 0) request.after_id = static_cast<std::int64_t>(random() % 41) - 5;
      request.up_to_id = random() % 4 == 0 ? static_cast<std::int64_t>(random() % 40) - 4
                                           : kHighestId;
      request.limit = 1 + static_cast<std::int64_t>(random() % 12);
      if (r == 0 ? round % 3 != 0 : random() % 2 == 0)
        request.scan_budget = 1 + static_cast<std::int64_t>(random() % 8);
      expected[r] = ExpectedPage(ids, aggregates, states, request.after_id, request.up_to_id,
                                 request.limit);
    }
    for (int read = 0; read < 8; ++read) {
      const PageRequest& request = requests[read % 2];
      INFO("round " << round << ", read " << read << ", after id "
                    << (request.after_id ? std::to_string(*request.after_id) : "none")
                    << ", up to id " << request.up_to_id << ", limit " << request.limit
                    << ", scan budget " << request.scan_budget << ", aggregates "
                    << aggregate_count);
      const std::int64_t before = store.pages_by_heads();
      CHECK(testing::IdsOf(store.ReadPage(request)) == expected[read % 2]);
      by_heads += store.pages_by_heads() - before;
      if (read == 0 && store.pages_by_heads() > before) ++cut_rounds;
    }
  }
  // The heads gave the first page in many rounds, and many pages in all.
  CHECK(cut_rounds >= 20);
  CHECK(by_heads >= 100);
}

TEST_CASE("PostgreSQL leader drains a backlog of one hot aggregate among cold ones through the "
          "aggregates' heads and sends each row once and in aggregate order",
          "[postgres][ordering]") {
  testing::PgSchema schema("ph");
  PgStore store(schema.url());
  // 1,200 rows: every third on the hot loan L-hot, the others each on a loan of its own.
  std::map<std::int64_t, std::string> aggregate_of;
  {
    pg::Transaction txn = store.BeginWrite();
    for (int i = 1; i <= 1200; ++i) {
      const std::string aggregate = i % 3 == 0 ? "L-hot" : "L-" + std::to_string(i);
      aggregate_of[store.Enqueue(txn, testing::EventOn(i, aggregate))] = aggregate;
    }
    txn.Commit();
  }
  testing::PipelineFakePublisher publisher;
  Ids sent;
  publisher.on_send = [&](const std::vector<OutboundMessage>& batch) {
    for (const OutboundMessage& message : batch) sent.push_back(message.outbox_id);
  };
  RelayOptions options;
  options.owner = "relay-a";
  options.coordination = Coordination::kLeader;
  options.on_failure = FailureMode::kBlockKey;
  options.lease_ms = 30000;
  options.batch_size = 20;
  Relay relay(store, publisher, options);
  testing::FakeWaiter waiter;
  LoopOptions loop;
  loop.mode = LoopMode::kUntilEmpty;
  loop.pipeline_depth = 2;

  const LoopReport report = RunRelayLoop(relay, waiter, loop, nullptr);

  CHECK(report.marked == 1200);
  CHECK(store.Count().unpublished == 0);
  REQUIRE(sent.size() == 1200);  // each row once
  CHECK(std::set<std::int64_t>(sent.begin(), sent.end()).size() == 1200);
  std::map<std::string, std::int64_t> last_sent;
  int out_of_order = 0;
  for (const std::int64_t id : sent) {
    std::int64_t& last = last_sent[aggregate_of.at(id)];
    if (id < last) ++out_of_order;
    last = id;
  }
  CHECK(out_of_order == 0);
  // Once the cold rows are gone, every page is one hot row before hundreds held back: while
  // more than 64 are left (the rows a page may step over), pages come from the heads.
  CHECK(store.pages_by_heads() >= 100);
}
