// A leader's page from each aggregate's oldest unpublished row (Store::ReadPageByHeads): the
// rows of the block-key rule, at a cost per aggregate, once a page read in id order has stepped
// over its scan budget. A backlog of a few hot aggregates drains without rereading itself for
// every page. The rule itself is checked against a model in leader_lease_test.cc.
#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "outbox/relay.h"
#include "outbox/store.h"
#include "relay_test_support.h"
#include "test_support.h"

namespace {

using outbox::Coordination;
using outbox::FailureMode;
using outbox::OpenMode;
using outbox::OutboundMessage;
using outbox::PageRequest;
using outbox::Relay;
using outbox::RelayOptions;
using outbox::Store;
using outbox::testing::EnqueueAll;
using outbox::testing::EventOn;
using outbox::testing::FakeClock;
using outbox::testing::FastStoreOptions;
using outbox::testing::IdsOf;
using outbox::testing::PipelineFakePublisher;
using outbox::testing::TempDir;
using Ids = std::vector<std::int64_t>;

struct HeadsFixture {
  HeadsFixture() : store(dir.File("lab.db"), Options(clock), OpenMode::kCreate) {
    store.ResetSchema();
  }
  static outbox::StoreOptions Options(FakeClock& clock) {
    outbox::StoreOptions options = FastStoreOptions();
    options.clock = &clock;
    return options;
  }
  void Exec(const std::string& sql) {
    auto txn = store.BeginWrite();
    txn.connection().Exec(sql);
    txn.Commit();
  }
  PageRequest Request(std::int64_t limit, std::int64_t scan_budget) {
    PageRequest request;
    request.limit = limit;
    request.now_ms = clock.EpochMs();
    request.scan_budget = scan_budget;
    return request;
  }

  TempDir dir;
  FakeClock clock;
  Store store;
};

}  // namespace

TEST_CASE("A leader drains a backlog of one hot aggregate among cold ones through the "
          "aggregates' heads and sends each row once and in aggregate order",
          "[relay][ordering]") {
  HeadsFixture f;
  // 1,200 rows: every third on the hot loan L-hot, the others each on a loan of its own.
  std::vector<outbox::OutboxEvent> events;
  std::map<std::int64_t, std::string> aggregate_of;
  for (int i = 1; i <= 1200; ++i) {
    const std::string aggregate = i % 3 == 0 ? "L-hot" : "L-" + std::to_string(i);
    events.push_back(EventOn(i, aggregate));
    aggregate_of[i] = aggregate;
  }
  EnqueueAll(f.store, events);
  PipelineFakePublisher publisher;
  std::vector<std::int64_t> sent;
  publisher.on_send = [&](const std::vector<OutboundMessage>& batch) {
    for (const OutboundMessage& message : batch) sent.push_back(message.outbox_id);
  };
  RelayOptions options;
  options.owner = "relay-a";
  options.clock = &f.clock;
  options.coordination = Coordination::kLeader;
  options.on_failure = FailureMode::kBlockKey;
  options.batch_size = 20;
  Relay relay(f.store, publisher, options);
  outbox::testing::FakeWaiter waiter;
  outbox::LoopOptions loop;
  loop.mode = outbox::LoopMode::kUntilEmpty;
  loop.pipeline_depth = 2;

  const outbox::LoopReport report = outbox::RunRelayLoop(relay, waiter, loop, nullptr);

  CHECK(report.marked == 1200);
  CHECK(f.store.Count().unpublished == 0);
  REQUIRE(sent.size() == 1200);  // each row once
  CHECK(std::set<std::int64_t>(sent.begin(), sent.end()).size() == 1200);
  std::map<std::string, std::int64_t> last_sent;
  int out_of_order = 0;
  for (const std::int64_t id : sent) {
    std::int64_t& last = last_sent[aggregate_of[id]];
    if (id < last) ++out_of_order;
    last = id;
  }
  CHECK(out_of_order == 0);
  // Once the cold rows are gone, every page is one hot row before hundreds held back: while
  // more than 64 are left (the rows a page may step over), pages come from the heads.
  CHECK(f.store.pages_by_heads() >= 100);
}

TEST_CASE("ReadPageByHeads steps over a BLOB and a number stored as an aggregate id and finds "
          "each aggregate's oldest row once",
          "[store][ordering]") {
  // 40 rows on four aggregate ids in turn, as a foreign writer may store them: a BLOB x'5A',
  // the text 'A', an integer 17 (stored as the text '17' by the column's TEXT affinity) and
  // 'B'. A BLOB sorts after every text: a skip scan that bound it back as text would find it
  // again forever.
  const char* aggregates[] = {"x'5A'", "'A'", "17", "'B'"};
  // Budgets of 1 and 3: the page steps over more rows than that, then finds four aggregates,
  // more than the budget, and reads on in id order; 4: the page comes from the four heads.
  // The same rows every time.
  for (const std::int64_t budget : {std::int64_t{1}, std::int64_t{3}, std::int64_t{4}}) {
    HeadsFixture f;
    for (int i = 0; i < 40; ++i)
      f.Exec("INSERT INTO outbox(id, event_id, aggregate_id, event_type, payload) VALUES (" +
             std::to_string(i + 1) + ", 'evt-" + std::to_string(i + 1) + "', " +
             aggregates[i % 4] + ", 'LoanCreated', '{}')");
    INFO("scan budget " << budget);
    CHECK(IdsOf(f.store.ReadPage(f.Request(10, budget))) == Ids{1, 2, 3, 4});
    CHECK(f.store.pages_by_heads() == (budget == 4 ? 1 : 0));
    f.Exec("UPDATE outbox SET published = 1 WHERE id IN (1, 2)");
    CHECK(IdsOf(f.store.ReadPage(f.Request(10, budget))) == Ids{3, 4, 5, 6});
  }
}
