// The relay's exactly-once recovery (RelayOptions::committed_ids): at the start of a leader's
// term, ids a committed Kafka transaction already carried are marked, not sent again.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "outbox/relay.h"
#include "relay_test_support.h"

namespace {

using outbox::Coordination;
using outbox::OpenMode;
using outbox::Relay;
using outbox::RelayOptions;
using outbox::Store;
using outbox::testing::EnqueueRange;
using outbox::testing::FakeClock;
using outbox::testing::FakePublisher;
using outbox::testing::FastStoreOptions;
using outbox::testing::IdsOf;
using outbox::testing::IsPublished;
using outbox::testing::TempDir;

// A leader-mode relay's pieces over a fresh store holding rows 1..rows, on a fake clock.
struct LeaderFixture {
  explicit LeaderFixture(int rows)
      : store(dir.File("lab.db"), StoreOptionsOn(clock), OpenMode::kCreate) {
    store.ResetSchema();
    EnqueueRange(store, 1, rows);
    options.owner = "relay-a";
    options.clock = &clock;
    options.coordination = Coordination::kLeader;
  }
  static outbox::StoreOptions StoreOptionsOn(FakeClock& clock) {
    outbox::StoreOptions store_options = FastStoreOptions();
    store_options.clock = &clock;
    return store_options;
  }
  TempDir dir;
  FakeClock clock;
  Store store;
  FakePublisher publisher;
  RelayOptions options;
};

}  // namespace

TEST_CASE("A leader marks the ids a committed transaction carried and sends only the rest",
          "[relay]") {
  LeaderFixture f(5);
  Store& store = f.store;
  FakePublisher& publisher = f.publisher;
  RelayOptions& options = f.options;
  int recoveries = 0;
  // The chapter's first kill: 3 rows committed to Kafka, not marked; id 9 names no row.
  options.committed_ids = [&recoveries] {
    ++recoveries;
    return std::vector<std::int64_t>{1, 2, 3, 9};
  };
  std::vector<std::int64_t> found, marked;
  options.on_recovered = [&](std::int64_t, const std::vector<std::int64_t>& committed,
                             const std::vector<std::int64_t>& marked_now) {
    found = committed;
    marked = marked_now;
  };
  Relay relay(store, publisher, options);

  const auto batch = relay.RunBatch();

  CHECK(recoveries == 1);
  CHECK(found == std::vector<std::int64_t>{1, 2, 3, 9});
  CHECK(marked == std::vector<std::int64_t>{1, 2, 3});
  REQUIRE(publisher.calls.size() == 1);
  CHECK(IdsOf(publisher.calls[0]) == std::vector<std::int64_t>{4, 5});
  CHECK(batch.settle.marked == 2);
  for (std::int64_t id = 1; id <= 5; ++id) CHECK(IsPublished(store, id));
  // Once per term: the next batch does not ask again.
  relay.RunBatch();
  CHECK(recoveries == 1);
}

TEST_CASE("Exactly-once recovery under claims coordination is refused", "[relay]") {
  TempDir dir;
  Store store(dir.File("lab.db"), FastStoreOptions(), OpenMode::kCreate);
  store.ResetSchema();
  FakePublisher publisher;
  RelayOptions options;
  options.owner = "relay-a";
  options.coordination = Coordination::kClaims;
  options.committed_ids = [] { return std::vector<std::int64_t>{}; };
  CHECK_THROWS_AS(Relay(store, publisher, options), outbox::ConfigError);
}

TEST_CASE("A recovery that throws sends nothing", "[relay]") {
  LeaderFixture f(2);
  Store& store = f.store;
  FakePublisher& publisher = f.publisher;
  RelayOptions& options = f.options;
  options.committed_ids = []() -> std::vector<std::int64_t> {
    throw outbox::KafkaError("read relay-state topic: broker down", -195);
  };
  Relay relay(store, publisher, options);
  CHECK_THROWS_AS(relay.RunBatch(), outbox::KafkaError);
  CHECK(publisher.calls.empty());
  CHECK_FALSE(IsPublished(store, 1));
}

TEST_CASE("A batch whose mark failed within the term is recovered before the next send and "
          "not sent again",
          "[relay][failpoint]") {
  outbox::testing::FailpointReset reset;
  LeaderFixture f(3);
  Store& store = f.store;
  FakePublisher& publisher = f.publisher;
  RelayOptions& options = f.options;
  int recoveries = 0;
  // What the relay-state topic says: nothing at the term's start, then rows 1-3 (the batch whose
  // transaction committed before its mark failed, as after a lost database connection).
  options.committed_ids = [&recoveries] {
    return ++recoveries == 1 ? std::vector<std::int64_t>{} : std::vector<std::int64_t>{1, 2, 3};
  };
  Relay relay(store, publisher, options);
  outbox::ConfigureFailpoints("relay.after_ack_before_mark=1*error");

  CHECK_THROWS_AS(relay.RunBatch(), outbox::FailpointError);
  REQUIRE(publisher.calls.size() == 1);
  CHECK_FALSE(IsPublished(store, 1));

  relay.RunBatch();
  CHECK(recoveries == 2);  // the same term, recovered again
  CHECK(publisher.calls.size() == 1);  // not sent again
  for (std::int64_t id = 1; id <= 3; ++id) CHECK(IsPublished(store, id));
}

TEST_CASE("An aborted transaction counts an attempt for its failing record only and not for the "
          "rows rolled back with it",
          "[relay]") {
  // A transactional publisher's batch with a poison record: it fails on its own, and the
  // transaction's abort rolls back the others (DeliveryResult::rolled_back).
  class AbortingPublisher : public outbox::testing::RowFailingPublisher {
   public:
    std::vector<outbox::DeliveryResult> Publish(
        const std::vector<outbox::OutboundMessage>& messages) override {
      std::vector<outbox::DeliveryResult> results = RowFailingPublisher::Publish(messages);
      const bool aborted = std::any_of(results.begin(), results.end(),
                                       [](const outbox::DeliveryResult& r) { return !r.ok; });
      for (outbox::DeliveryResult& r : results) {
        if (!aborted || !r.ok) continue;
        r.ok = false;
        r.rolled_back = true;
        r.error = "transaction aborted: a record of the batch failed (fake: poison row)";
      }
      return results;
    }
  };
  LeaderFixture f(4);
  f.options.settle.max_attempts = 2;
  f.options.committed_ids = [] { return std::vector<std::int64_t>{}; };
  AbortingPublisher publisher;
  publisher.failing = {1};
  Relay relay(f.store, publisher, f.options);

  const auto first = relay.RunBatch();
  CHECK(first.failed == 4);
  CHECK(first.rolled_back == 3);
  CHECK(outbox::testing::IntColumn(f.store, "attempts", 1) == 1);
  for (std::int64_t id = 2; id <= 4; ++id) {
    INFO("row " << id);
    CHECK(outbox::testing::IntColumn(f.store, "attempts", id).value_or(0) == 0);
    CHECK_FALSE(IsPublished(f.store, id));
  }
  // The poison row backs off; the rows rolled back go out with the next transaction.
  const auto second = relay.RunBatch();
  CHECK(IdsOf(publisher.calls.back()) == std::vector<std::int64_t>{2, 3, 4});
  CHECK(second.settle.marked == 3);
  // Past its backoff it fails again and is parked alone.
  f.clock.AdvanceMs(f.options.settle.backoff_max_ms);
  const auto third = relay.RunBatch();
  CHECK(IdsOf(publisher.calls.back()) == std::vector<std::int64_t>{1});
  CHECK(third.settle.parked == 1);
  for (std::int64_t id = 2; id <= 4; ++id) {
    INFO("row " << id);
    CHECK(IsPublished(f.store, id));
    CHECK_FALSE(outbox::testing::IntColumn(f.store, "parked_at", id).has_value());
  }
}
