// Store, the production relay's side: claims with lease and fencing token,
// per-aggregate blocking, batch settle with backoff and parking, unpark,
// status, purge, and migrating the chapter's schema 1 file to schema 2.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "outbox/per_row_relay.h"
#include "outbox/error.h"
#include "outbox/sqlite/connection.h"
#include "outbox/store.h"
#include "relay_test_support.h"
#include "test_support.h"

namespace {

using outbox::Claim;
using outbox::ClaimRequest;
using outbox::FailedDelivery;
using outbox::OpenMode;
using outbox::SettlePolicy;
using outbox::Store;
using outbox::StoreOptions;
using outbox::testing::EnqueueAll;
using outbox::testing::EnqueueRange;
using outbox::testing::EventOn;
using outbox::testing::FastStoreOptions;
using outbox::testing::FakePublisher;
using outbox::testing::IdsOf;
using outbox::testing::IntColumn;
using outbox::testing::IsPublished;
using outbox::testing::kNowMs;
using outbox::testing::MakeEvent;
using outbox::testing::TempDir;
using outbox::testing::TextColumn;
using Ids = std::vector<std::int64_t>;

ClaimRequest Request(std::int64_t now_ms, std::int64_t limit = 100, std::int64_t after_id = 0,
                     bool block_key = true) {
  ClaimRequest request;
  request.owner = "relay-test";
  request.after_id = after_id;
  request.limit = limit;
  request.lease_ms = 30000;
  request.now_ms = now_ms;
  request.block_key = block_key;
  return request;
}

// A fresh schema-2 store in dir.
class StoreFixture {
 public:
  StoreFixture() : store(dir.File("lab.db"), FastStoreOptions(), OpenMode::kCreate) {
    store.ResetSchema();
  }

  // Claims exactly the rows ids (they must be the next claimable ones) and
  // fails them once at now_ms under policy.
  outbox::SettleReport FailOnce(const Ids& ids, std::int64_t now_ms, const SettlePolicy& policy,
                                std::int64_t after_id = 0) {
    const Claim claim = store.ClaimBatch(Request(now_ms, static_cast<std::int64_t>(ids.size()), after_id));
    REQUIRE(IdsOf(claim.rows) == ids);
    std::vector<FailedDelivery> failed;
    for (std::int64_t id : ids) failed.push_back({id, "broker said no"});
    return store.SettleBatch(claim.token, {}, failed, policy, now_ms);
  }

  // Claims exactly the rows ids and acknowledges them at now_ms.
  void Publish(const Ids& ids, std::int64_t now_ms, std::int64_t after_id = 0) {
    const Claim claim = store.ClaimBatch(Request(now_ms, static_cast<std::int64_t>(ids.size()), after_id));
    REQUIRE(IdsOf(claim.rows) == ids);
    const auto report = store.SettleBatch(claim.token, ids, {}, SettlePolicy{}, now_ms);
    REQUIRE(report.marked == static_cast<std::int64_t>(ids.size()));
  }

  TempDir dir;
  Store store;
};

SettlePolicy ParkOnFirstFailure() {
  SettlePolicy policy;
  policy.max_attempts = 1;
  return policy;
}

std::int64_t FenceToken(Store& store) {
  return store.BeginRead().connection().QueryInt64("SELECT token FROM outbox_fence WHERE id = 1");
}

}  // namespace

TEST_CASE("ClaimBatch returns rows in id order under a strictly increasing fencing token",
          "[store]") {
  StoreFixture f;
  EnqueueRange(f.store, 1, 5);

  const Claim first = f.store.ClaimBatch(Request(kNowMs, 3));
  const Claim second = f.store.ClaimBatch(Request(kNowMs, 3, /*after_id=*/3));
  const Claim third = f.store.ClaimBatch(Request(kNowMs, 3));

  REQUIRE(IdsOf(first.rows) == Ids{1, 2, 3});
  REQUIRE(first.attempts == Ids{0, 0, 0});
  REQUIRE(IdsOf(second.rows) == Ids{4, 5});
  REQUIRE(third.rows.empty());  // every row is under a lease
  CHECK(first.token >= 1);
  CHECK(second.token > first.token);
  CHECK(third.token > second.token);
  CHECK(FenceToken(f.store) == third.token);

  for (std::size_t i = 0; i < first.rows.size(); ++i) {
    const auto expected = MakeEvent(static_cast<int>(i) + 1);
    CHECK(first.rows[i].event.event_id == expected.event_id);
    CHECK(first.rows[i].event.aggregate_id == expected.aggregate_id);
    CHECK(first.rows[i].event.payload == expected.payload);
    CHECK(first.rows[i].event.created_at_ms == expected.created_at_ms);
  }
  CHECK(IntColumn(f.store, "claim_token", 2) == first.token);
  CHECK(IntColumn(f.store, "claim_until", 2) == kNowMs + 30000);
  CHECK(TextColumn(f.store, "claim_owner", 2) == std::string("relay-test"));
  CHECK(IntColumn(f.store, "claim_token", 5) == second.token);
}

TEST_CASE("A second relay's store claims none of the rows while the first relay's lease holds",
          "[store]") {
  StoreFixture f;
  EnqueueRange(f.store, 1, 3);
  Store other(f.dir.File("lab.db"), FastStoreOptions(), OpenMode::kExisting);

  const Claim mine = f.store.ClaimBatch(Request(kNowMs));
  REQUIRE(IdsOf(mine.rows) == Ids{1, 2, 3});

  // One millisecond before the lease ends it still holds.
  const std::int64_t before_expiry = kNowMs + 30000 - 1;
  CHECK_FALSE(other.HasClaimable(Request(before_expiry)));
  const Claim theirs = other.ClaimBatch(Request(before_expiry));
  CHECK(theirs.rows.empty());
  CHECK(theirs.token > mine.token);
  CHECK(other.Status(before_expiry).claimed == 3);
  // A row enqueued meanwhile is free for the second relay.
  EnqueueRange(f.store, 4, 4);
  CHECK(IdsOf(other.ClaimBatch(Request(before_expiry)).rows) == Ids{4});
}

TEST_CASE("After the lease expires another relay takes the rows with a bigger token and the "
          "first relay's settle is fenced",
          "[store]") {
  StoreFixture f;
  EnqueueRange(f.store, 1, 3);
  Store other(f.dir.File("lab.db"), FastStoreOptions(), OpenMode::kExisting);
  const Claim stalled = f.store.ClaimBatch(Request(kNowMs));
  REQUIRE(stalled.rows.size() == 3);

  const std::int64_t expiry = kNowMs + 30000;  // claim_until <= now: expired
  const Claim takeover = other.ClaimBatch(Request(expiry));
  REQUIRE(IdsOf(takeover.rows) == Ids{1, 2, 3});
  REQUIRE(takeover.token > stalled.token);

  // The stalled relay wakes up and settles what it sent: nothing changes.
  const auto late = f.store.SettleBatch(stalled.token, {1, 2}, {{3, "timed out"}}, SettlePolicy{},
                                        expiry + 1);
  CHECK(late.fenced == 3);
  CHECK(late.marked == 0);
  CHECK(late.retried == 0);
  CHECK(late.parked == 0);
  for (std::int64_t id : Ids{1, 2, 3}) {
    INFO("row " << id);
    CHECK_FALSE(IsPublished(f.store, id));
    CHECK(IntColumn(f.store, "claim_token", id) == takeover.token);
    CHECK(IntColumn(f.store, "attempts", id) == 0);
    CHECK_FALSE(TextColumn(f.store, "last_error", id).has_value());
  }

  const auto current = other.SettleBatch(takeover.token, {1, 2, 3}, {}, SettlePolicy{}, expiry + 2);
  CHECK(current.marked == 3);
  CHECK(current.fenced == 0);
  // Once the new claimer has settled, the stale token is still fenced.
  CHECK(f.store.SettleBatch(stalled.token, {1}, {}, SettlePolicy{}, expiry + 3).fenced == 1);
  CHECK(IntColumn(f.store, "published_at", 1) == expiry + 2);
}

TEST_CASE("SettleBatch settles a claim whose lease ran out when nobody claimed it again",
          "[store]") {
  StoreFixture f;
  EnqueueRange(f.store, 1, 2);
  const Claim claim = f.store.ClaimBatch(Request(kNowMs));
  const auto report =
      f.store.SettleBatch(claim.token, {1, 2}, {}, SettlePolicy{}, kNowMs + 60000);
  CHECK(report.marked == 2);
  CHECK(report.fenced == 0);
}

TEST_CASE("block_key holds back later rows of an aggregate behind an earlier row that is in "
          "backoff or parked or claimed but not rows of other aggregates",
          "[store]") {
  StoreFixture f;
  // Rows 1, 2 and 4 belong to aggregate A, row 3 to B.
  EnqueueAll(f.store, {EventOn(1, "A"), EventOn(2, "A"), EventOn(3, "B"), EventOn(4, "A")});
  const std::int64_t later = kNowMs + 1;

  SECTION("the earlier row is in backoff") {
    REQUIRE(f.FailOnce({1}, kNowMs, SettlePolicy{}).retried == 1);
    CHECK(IdsOf(f.store.ClaimBatch(Request(later)).rows) == Ids{3});
  }
  SECTION("the earlier row is parked") {
    REQUIRE(f.FailOnce({1}, kNowMs, ParkOnFirstFailure()).parked == 1);
    // Parked rows stay until someone unparks them: far in the future still blocked.
    CHECK(IdsOf(f.store.ClaimBatch(Request(later + 86400000)).rows) == Ids{3});
  }
  SECTION("the earlier row is claimed by another relay") {
    Store other(f.dir.File("lab.db"), FastStoreOptions(), OpenMode::kExisting);
    REQUIRE(IdsOf(other.ClaimBatch(Request(kNowMs, 1)).rows) == Ids{1});
    CHECK(IdsOf(f.store.ClaimBatch(Request(later)).rows) == Ids{3});
  }
  SECTION("without block_key the later rows flow") {
    REQUIRE(f.FailOnce({1}, kNowMs, ParkOnFirstFailure()).parked == 1);
    CHECK(f.store.HasClaimable(Request(later, 100, 0, /*block_key=*/false)));
    CHECK(IdsOf(f.store.ClaimBatch(Request(later, 100, 0, /*block_key=*/false)).rows) ==
          Ids{2, 3, 4});
  }
}

TEST_CASE("block_key lets later rows of an aggregate go once the earlier row is published",
          "[store]") {
  StoreFixture f;
  EnqueueAll(f.store, {EventOn(1, "A"), EventOn(2, "A")});
  REQUIRE(f.FailOnce({1}, kNowMs, SettlePolicy{}).retried == 1);
  REQUIRE_FALSE(f.store.HasClaimable(Request(kNowMs + 1)));

  f.Publish({1}, kNowMs + 200);  // backoff 200 ms done

  CHECK(IdsOf(f.store.ClaimBatch(Request(kNowMs + 201)).rows) == Ids{2});
}

TEST_CASE("SettleBatch marks acked rows published at now and clears their claim", "[store]") {
  StoreFixture f;
  EnqueueRange(f.store, 1, 3);
  const Claim claim = f.store.ClaimBatch(Request(kNowMs));

  const auto report = f.store.SettleBatch(claim.token, {1, 3}, {}, SettlePolicy{}, kNowMs + 7);

  CHECK(report.marked == 2);
  CHECK(report.retried == 0);
  CHECK(report.parked == 0);
  CHECK(report.fenced == 0);
  for (std::int64_t id : Ids{1, 3}) {
    INFO("row " << id);
    CHECK(IsPublished(f.store, id));
    CHECK(IntColumn(f.store, "published_at", id) == kNowMs + 7);
    CHECK_FALSE(IntColumn(f.store, "claim_token", id).has_value());
    CHECK_FALSE(IntColumn(f.store, "claim_until", id).has_value());
    CHECK_FALSE(TextColumn(f.store, "claim_owner", id).has_value());
    CHECK(IntColumn(f.store, "attempts", id) == 0);
  }
  // Row 2, neither acked nor failed, keeps its claim.
  CHECK_FALSE(IsPublished(f.store, 2));
  CHECK(IntColumn(f.store, "claim_token", 2) == claim.token);
  CHECK(f.store.Count().published == 2);
}

TEST_CASE("SettleBatch backs a failing row off by base then twice then four times base up to the "
          "cap and parks it at max_attempts",
          "[store]") {
  struct Case {
    std::int64_t base_ms;
    std::int64_t max_ms;
    int max_attempts;
    Ids delays_ms;  // expected next_attempt_at - now after failures 1 .. max_attempts-1
  };
  const Case c = GENERATE(values<Case>({
      {100, 60000, 6, {100, 200, 400, 800, 1600}},
      {100, 350, 5, {100, 200, 350, 350}},
      {200, 200, 3, {200, 200}},
      {1000, 60000, 1, {}},
  }));
  INFO("base " << c.base_ms << " ms, cap " << c.max_ms << " ms, max attempts " << c.max_attempts);
  StoreFixture f;
  EnqueueRange(f.store, 1, 1);
  SettlePolicy policy;
  policy.backoff_base_ms = c.base_ms;
  policy.backoff_max_ms = c.max_ms;
  policy.max_attempts = c.max_attempts;

  std::int64_t now = kNowMs;
  for (std::size_t k = 0; k < c.delays_ms.size(); ++k) {
    INFO("failure " << k + 1);
    const Claim claim = f.store.ClaimBatch(Request(now));
    REQUIRE(IdsOf(claim.rows) == Ids{1});
    REQUIRE(claim.attempts == Ids{static_cast<std::int64_t>(k)});
    const auto report =
        f.store.SettleBatch(claim.token, {}, {{1, "error " + std::to_string(k + 1)}}, policy, now);
    REQUIRE(report.retried == 1);
    REQUIRE(report.parked == 0);
    CHECK(IntColumn(f.store, "attempts", 1) == static_cast<std::int64_t>(k) + 1);
    CHECK(TextColumn(f.store, "last_error", 1) == "error " + std::to_string(k + 1));
    CHECK(IntColumn(f.store, "next_attempt_at", 1) == now + c.delays_ms[k]);
    CHECK_FALSE(IntColumn(f.store, "parked_at", 1).has_value());
    CHECK_FALSE(IntColumn(f.store, "claim_token", 1).has_value());
    // Not claimable one millisecond before the backoff ends; claimable at its end.
    CHECK(f.store.ClaimBatch(Request(now + c.delays_ms[k] - 1)).rows.empty());
    CHECK(f.store.Status(now + c.delays_ms[k] - 1).in_backoff == 1);
    now += c.delays_ms[k];
  }

  const Claim last = f.store.ClaimBatch(Request(now));
  REQUIRE(IdsOf(last.rows) == Ids{1});
  const auto report = f.store.SettleBatch(last.token, {}, {{1, "final"}}, policy, now);
  CHECK(report.parked == 1);
  CHECK(report.retried == 0);
  CHECK(IntColumn(f.store, "attempts", 1) == c.max_attempts);
  CHECK(IntColumn(f.store, "parked_at", 1) == now);
  CHECK(TextColumn(f.store, "last_error", 1) == std::string("final"));
  CHECK_FALSE(IsPublished(f.store, 1));

  const std::int64_t far_future = now + 365LL * 86400000;
  CHECK_FALSE(f.store.HasClaimable(Request(far_future)));
  CHECK(f.store.ClaimBatch(Request(far_future)).rows.empty());
  const auto status = f.store.Status(far_future);
  CHECK(status.parked == 1);
  CHECK(status.pending == 0);
  CHECK(status.in_backoff == 0);
  CHECK(f.store.PendingCount() == 0);
}

TEST_CASE("SettleBatch handles acked and retried and parked rows of one batch together",
          "[store]") {
  StoreFixture f;
  EnqueueRange(f.store, 1, 4);
  REQUIRE(f.FailOnce({4}, kNowMs, SettlePolicy{}, /*after_id=*/3).retried == 1);  // attempts 1
  SettlePolicy policy;
  policy.max_attempts = 2;
  const std::int64_t now = kNowMs + 1000;
  const Claim claim = f.store.ClaimBatch(Request(now));
  REQUIRE(IdsOf(claim.rows) == Ids{1, 2, 3, 4});
  REQUIRE(claim.attempts == Ids{0, 0, 0, 1});

  const auto report = f.store.SettleBatch(claim.token, {1, 2}, {{3, "x"}, {4, "y"}}, policy, now);

  CHECK(report.marked == 2);
  CHECK(report.retried == 1);
  CHECK(report.parked == 1);
  CHECK(report.fenced == 0);
  CHECK(IntColumn(f.store, "next_attempt_at", 3) == now + policy.backoff_base_ms);
  CHECK(IntColumn(f.store, "parked_at", 4) == now);
}

TEST_CASE("ParkedCount counts the unpublished parked rows as Status does and not the rest",
          "[store]") {
  StoreFixture f;
  EnqueueRange(f.store, 1, 6);
  CHECK(f.store.ParkedCount() == 0);
  REQUIRE(f.FailOnce({1, 2, 3}, kNowMs, ParkOnFirstFailure()).parked == 3);
  REQUIRE(f.FailOnce({6}, kNowMs, SettlePolicy{}, 5).retried == 1);  // in backoff, not parked
  f.Publish({4}, kNowMs);
  CHECK(f.store.ParkedCount() == 3);
  CHECK(f.store.ParkedCount() == f.store.Status(kNowMs).parked);
  REQUIRE(f.store.Unpark(2));
  CHECK(f.store.ParkedCount() == 2);
  CHECK(f.store.ParkedCount() == f.store.Status(kNowMs).parked);
}

TEST_CASE("Unpark makes one parked row claimable again with attempts reset and UnparkAll unparks "
          "every parked row",
          "[store]") {
  StoreFixture f;
  EnqueueRange(f.store, 1, 5);
  REQUIRE(f.FailOnce({1, 2, 3}, kNowMs, ParkOnFirstFailure()).parked == 3);
  f.Publish({4}, kNowMs);
  REQUIRE(f.store.Status(kNowMs).parked == 3);

  CHECK(f.store.Unpark(2));
  CHECK_FALSE(f.store.Unpark(2));    // no longer parked
  CHECK_FALSE(f.store.Unpark(99));   // no such row
  CHECK_FALSE(f.store.Unpark(4));    // published
  CHECK_FALSE(f.store.Unpark(5));    // unpublished, never parked
  CHECK(IntColumn(f.store, "attempts", 2) == 0);
  CHECK(IntColumn(f.store, "next_attempt_at", 2) == 0);
  CHECK_FALSE(IntColumn(f.store, "parked_at", 2).has_value());
  CHECK(TextColumn(f.store, "last_error", 2) == std::string("broker said no"));  // kept for the record
  CHECK(IdsOf(f.store.ClaimBatch(Request(kNowMs + 1)).rows) == Ids{2, 5});
  CHECK(f.store.Status(kNowMs + 1).parked == 2);

  CHECK(f.store.UnparkAll() == 2);
  CHECK(f.store.UnparkAll() == 0);
  CHECK(f.store.Status(kNowMs + 1).parked == 0);
  CHECK(IdsOf(f.store.ClaimBatch(Request(kNowMs + 1)).rows) == Ids{1, 3});
}

TEST_CASE("Status counts unpublished and in-backoff and parked and claimed and published rows at "
          "now",
          "[store]") {
  StoreFixture f;
  SECTION("an empty outbox") {
    const auto status = f.store.Status(kNowMs);
    CHECK(status.pending == 0);
    CHECK(status.oldest_pending_age_ms == 0);
    CHECK(status.in_backoff == 0);
    CHECK(status.parked == 0);
    CHECK(status.claimed == 0);
    CHECK(status.published == 0);
    CHECK(status.archived == 0);
    CHECK(f.store.PendingCount() == 0);
  }
  SECTION("one row in each state") {
    EnqueueRange(f.store, 1, 6);  // created_at 1700000000001 .. 006
    f.Publish({1}, kNowMs);
    REQUIRE(f.FailOnce({2}, kNowMs, ParkOnFirstFailure(), 1).parked == 1);
    REQUIRE(f.FailOnce({3}, kNowMs, SettlePolicy{}, 2).retried == 1);  // until kNowMs + 200
    REQUIRE(IdsOf(f.store.ClaimBatch(Request(kNowMs, 1, 3)).rows) == Ids{4});  // until +30000

    const auto status = f.store.Status(kNowMs);
    CHECK(status.pending == 4);  // rows 3, 4, 5, 6
    CHECK(status.unpublished == 5);  // and the parked row 2
    // The oldest pending (unpublished, unparked) row is row 3.
    CHECK(status.oldest_pending_age_ms == kNowMs - MakeEvent(3).created_at_ms);
    CHECK(status.in_backoff == 1);
    CHECK(status.parked == 1);
    CHECK(status.claimed == 1);
    CHECK(status.published == 1);
    CHECK(status.archived == 0);
    CHECK(f.store.PendingCount() == 4);

    // Backoff and lease end at their instants.
    CHECK(f.store.Status(kNowMs + 200).in_backoff == 0);
    CHECK(f.store.Status(kNowMs + 29999).claimed == 1);
    CHECK(f.store.Status(kNowMs + 30000).claimed == 0);
    // A clock behind every created_at gives age 0, never a negative age.
    CHECK(f.store.Status(MakeEvent(1).created_at_ms - 5000).oldest_pending_age_ms == 0);
    CHECK(f.store.Status(MakeEvent(3).created_at_ms).oldest_pending_age_ms == 0);
    CHECK(f.store.Status(MakeEvent(3).created_at_ms + 1).oldest_pending_age_ms == 1);
  }
}

TEST_CASE("HasClaimable is false while every pending row is claimed or parked or in backoff",
          "[store]") {
  StoreFixture f;
  EnqueueRange(f.store, 1, 3);
  REQUIRE(f.store.HasClaimable(Request(kNowMs)));
  REQUIRE(f.FailOnce({1}, kNowMs, ParkOnFirstFailure()).parked == 1);
  REQUIRE(f.FailOnce({2}, kNowMs, SettlePolicy{}, 1).retried == 1);
  const Claim claim = f.store.ClaimBatch(Request(kNowMs, 1, 2));
  REQUIRE(IdsOf(claim.rows) == Ids{3});

  CHECK_FALSE(f.store.HasClaimable(Request(kNowMs)));
  CHECK(f.store.ClaimBatch(Request(kNowMs)).rows.empty());
  CHECK(f.store.PendingCount() == 2);  // rows 2 and 3; row 1 is parked

  // The backoff ends: row 2 becomes claimable.
  CHECK(f.store.HasClaimable(Request(kNowMs + 200)));
  // Releasing the claim makes row 3 claimable at once.
  f.store.ReleaseClaim(claim.token);
  CHECK(f.store.HasClaimable(Request(kNowMs)));
  CHECK(IdsOf(f.store.ClaimBatch(Request(kNowMs)).rows) == Ids{3});
}

TEST_CASE("ReleaseClaim frees the rows of its token only and records nothing", "[store]") {
  StoreFixture f;
  EnqueueRange(f.store, 1, 3);
  const Claim a = f.store.ClaimBatch(Request(kNowMs, 2));
  const Claim b = f.store.ClaimBatch(Request(kNowMs, 2));
  REQUIRE(IdsOf(a.rows) == Ids{1, 2});
  REQUIRE(IdsOf(b.rows) == Ids{3});

  f.store.ReleaseClaim(a.token);

  for (std::int64_t id : Ids{1, 2}) {
    INFO("row " << id);
    CHECK_FALSE(IntColumn(f.store, "claim_token", id).has_value());
    CHECK_FALSE(IntColumn(f.store, "claim_until", id).has_value());
    CHECK(IntColumn(f.store, "attempts", id) == 0);
    CHECK(IntColumn(f.store, "next_attempt_at", id) == 0);
    CHECK_FALSE(IsPublished(f.store, id));
  }
  CHECK(IntColumn(f.store, "claim_token", 3) == b.token);
  const Claim again = f.store.ClaimBatch(Request(kNowMs));
  CHECK(IdsOf(again.rows) == Ids{1, 2});
  // The released token can no longer settle them.
  CHECK(f.store.SettleBatch(a.token, {1, 2}, {}, SettlePolicy{}, kNowMs).fenced == 2);
}

TEST_CASE("PurgePublished deletes published rows older than the cutoff in ceil(n/batch) "
          "batches and never unpublished or parked rows",
          "[store]") {
  const std::int64_t batch = GENERATE(as<std::int64_t>{}, 1, 2, 3, 6, 7, 100);
  const bool archive = GENERATE(false, true);
  INFO("batch " << batch << (archive ? ", archive" : ""));
  StoreFixture f;
  EnqueueRange(f.store, 1, 10);
  f.Publish({1, 2, 3, 4, 5, 6, 7}, kNowMs);              // older than the cutoff
  f.Publish({8}, kNowMs + 10, /*after_id=*/7);          // newer than the cutoff
  REQUIRE(f.FailOnce({9}, kNowMs, ParkOnFirstFailure(), 8).parked == 1);
  // Row 10 stays unpublished; its created_at is long before the cutoff.

  const auto report = f.store.PurgePublished(kNowMs + 1, batch, archive);

  CHECK(report.deleted == 7);
  CHECK(report.batches == (7 + batch - 1) / batch);
  CHECK(report.archived == (archive ? 7 : 0));
  Ids ids;
  for (const auto& row : f.store.Snapshot().rows)
    if (!row.archived) ids.push_back(row.id);
  CHECK(ids == Ids{8, 9, 10});
  const auto status = f.store.Status(kNowMs + 20);
  CHECK(status.published == 1);
  CHECK(status.parked == 1);
  CHECK(status.pending == 1);
  CHECK(status.archived == (archive ? 7 : 0));
  // Archived or only purged, each deleted row stays in the snapshot as a published event, so a
  // checker counts its record in Kafka as published, never as a phantom.
  const auto rows = f.store.Snapshot().rows;
  REQUIRE(rows.size() == 10);
  for (int i = 0; i < 7; ++i) {
    INFO("deleted row " << i + 1);
    CHECK(rows[i].id == i + 1);
    CHECK(rows[i].event_id == MakeEvent(i + 1).event_id);
    CHECK(rows[i].aggregate_id == MakeEvent(i + 1).aggregate_id);
    CHECK(rows[i].published);
    CHECK(rows[i].archived);
    CHECK(rows[i].purged == !archive);
  }
  CHECK(f.store.Count().total == 3);
  if (archive) {
    auto txn = f.store.BeginRead();
    auto copied = txn.connection().Prepare(
        "SELECT id, event_id, aggregate_id, payload, created_at, published_at "
        "FROM outbox_archive ORDER BY id");
    for (int i = 1; i <= 7; ++i) {
      INFO("archived row " << i);
      REQUIRE(copied.Step());
      const auto event = MakeEvent(i);
      CHECK(copied.ColumnInt64(0) == i);
      CHECK(copied.ColumnText(1) == event.event_id);
      CHECK(copied.ColumnText(2) == event.aggregate_id);
      CHECK(copied.ColumnText(3) == event.payload);
      CHECK(copied.ColumnInt64(4) == event.created_at_ms);
      CHECK(copied.ColumnInt64(5) == kNowMs);
    }
    CHECK_FALSE(copied.Step());
  }

  // Nothing more is old enough: a second purge does nothing.
  const auto again = f.store.PurgePublished(kNowMs + 1, batch, archive);
  CHECK(again.deleted == 0);
  CHECK(again.batches == 0);
}

TEST_CASE("Opening the chapter's schema 1 database with kExisting migrates it to the current schema and "
          "keeps its rows",
          "[store]") {
  TempDir dir;
  const std::string path = dir.File("chapter.db");
  {
    outbox::sqlite::Connection raw(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    raw.Exec(
        "CREATE TABLE outbox(id INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL UNIQUE, "
        "aggregate_id TEXT NOT NULL, event_type TEXT NOT NULL, payload TEXT NOT NULL, "
        "created_at INTEGER NOT NULL, published BOOLEAN NOT NULL DEFAULT 0)");
    raw.Exec(
        "INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at, published) "
        "VALUES ('evt-1001', 'L-1001', 'LoanCreated', '{\"n\":1}', 1700000000001, 1), "
        "       ('evt-1002', 'L-1002', 'LoanCreated', '{\"n\":2}', 1700000000002, 0), "
        "       ('evt-1003', 'L-1003', 'LoanCreated', '{\"n\":3}', 1700000000003, 0)");
    raw.Exec("PRAGMA user_version = 0");
    REQUIRE(raw.QueryInt64("PRAGMA user_version") == 0);
  }

  Store store(path, StoreOptions{}, OpenMode::kExisting);

  REQUIRE(store.BeginRead().connection().QueryInt64("PRAGMA user_version") == outbox::kSchemaVersion);
  REQUIRE(outbox::kSchemaVersion == 7);
  const auto counts = store.Count();
  CHECK(counts.total == 3);
  CHECK(counts.published == 1);
  CHECK(counts.unpublished == 2);
  for (std::int64_t id : Ids{1, 2, 3}) {
    INFO("row " << id);
    CHECK(IntColumn(store, "attempts", id) == 0);
    CHECK(IntColumn(store, "next_attempt_at", id) == 0);
    CHECK_FALSE(IntColumn(store, "published_at", id).has_value());
    CHECK_FALSE(IntColumn(store, "parked_at", id).has_value());
    CHECK_FALSE(IntColumn(store, "claim_token", id).has_value());
    CHECK_FALSE(TextColumn(store, "last_error", id).has_value());
  }
  CHECK(store.BeginRead().connection().QueryInt64("SELECT token FROM outbox_fence WHERE id = 1") == 0);
  CHECK(store.BeginRead().connection().QueryInt64("SELECT COUNT(*) FROM outbox_archive") == 0);

  SECTION("the production relay's claims work") {
    const Claim claim = store.ClaimBatch(Request(kNowMs));
    CHECK(IdsOf(claim.rows) == Ids{2, 3});
    CHECK(claim.token == 1);
    CHECK(claim.rows[0].event.event_id == "evt-1002");
    CHECK(store.SettleBatch(claim.token, {2, 3}, {}, SettlePolicy{}, kNowMs).marked == 2);
    CHECK(store.Count().unpublished == 0);
  }
  SECTION("the chapter's relay works") {
    FakePublisher publisher;
    outbox::PerRowRelayOptions options;
    options.limit = 10;
    const auto report = outbox::RunPerRowRelay(store, publisher, options, nullptr);
    CHECK(report.sent == 2);
    CHECK(report.marked == 2);
    CHECK(publisher.SentKeys() == std::vector<std::string>{"evt-1002", "evt-1003"});
    CHECK(store.Count().unpublished == 0);
    CHECK(IntColumn(store, "published_at", 2).has_value());
  }
  SECTION("a row published under schema 1 is purged by its created_at") {
    const auto report = store.PurgePublished(1700000000002, 10, true);
    CHECK(report.deleted == 1);
    CHECK(report.archived == 1);
    CHECK(store.Count().total == 2);
  }
  SECTION("reopening leaves schema 7 as it is") {
    Store again(path, StoreOptions{}, OpenMode::kExisting);
    CHECK(again.BeginRead().connection().QueryInt64("PRAGMA user_version") == 7);
    CHECK(again.Count().total == 3);
  }
}

TEST_CASE("A row whose lease or backoff lies beyond a day or is not a number is claimable and "
          "holds nothing back",
          "[store]") {
  StoreFixture f;
  EnqueueRange(f.store, 1, 5);
  {
    // What another program may write into the relay's columns.
    auto txn = f.store.BeginWrite();
    txn.connection().Exec(
        "UPDATE outbox SET next_attempt_at = 9223372036854775807 WHERE id = 1;"
        "UPDATE outbox SET claim_until = 9223372036854775807, claim_owner = 'gone', "
        "claim_token = 99 WHERE id = 2;"
        "UPDATE outbox SET next_attempt_at = 'soon' WHERE id = 3;"
        "UPDATE outbox SET claim_until = 9.22337381849346e+18, claim_owner = 'x' WHERE id = 4;");
    // A live lease an hour ahead is still a lease.
    auto live = txn.connection().Prepare(
        "UPDATE outbox SET claim_until = ?1, claim_owner = 'live', claim_token = 98 WHERE id = 5");
    live.Bind(1, kNowMs + 3'600'000).Run();
    txn.Commit();
  }
  CHECK(f.store.WaitingCount(kNowMs) == 1);
  CHECK(f.store.Backoffs(kNowMs).rows == 0);
  const auto owners = f.store.ClaimOwners(kNowMs);
  REQUIRE(owners.size() == 1);
  CHECK(owners[0].owner == "live");
  CHECK(f.store.Status(kNowMs).claimed == 1);
  CHECK(f.store.Status(kNowMs).in_backoff == 0);

  const Claim claim = f.store.ClaimBatch(Request(kNowMs, 100, 0, /*block_key=*/false));

  CHECK(IdsOf(claim.rows) == Ids{1, 2, 3, 4});
}

TEST_CASE("A foreign writer's attempts at either end of the 64-bit range never wrap and the row "
          "still reaches max attempts",
          "[store]") {
  StoreFixture f;
  REQUIRE(outbox::testing::EnqueueRange(f.store, 1, 2) == Ids{1, 2});
  {
    auto txn = f.store.BeginWrite();
    txn.connection().Exec(
        "UPDATE outbox SET attempts = -9223372036854775808 WHERE id = 1;"
        "UPDATE outbox SET attempts = 9223372036854775807 WHERE id = 2");
    txn.Commit();
  }
  SettlePolicy policy;
  policy.max_attempts = 2;

  const auto first = f.FailOnce({1, 2}, kNowMs, policy);

  CHECK(first.retried == 1);  // the negative count reads as 0: this was attempt 1 of 2
  CHECK(first.parked_ids == Ids{2});
  CHECK(IntColumn(f.store, "attempts", 1) == 1);
  CHECK(IntColumn(f.store, "attempts", 2) == 2147483647);
  const auto second = f.FailOnce({1}, kNowMs + 60000, policy);
  CHECK(second.parked_ids == Ids{1});
  CHECK(outbox::NextAttempt(std::numeric_limits<std::int64_t>::min()) == 1);
  CHECK(outbox::NextAttempt(std::numeric_limits<std::int64_t>::max()) == 2147483647);
  CHECK(outbox::NextAttempt(4) == 5);
}

TEST_CASE("BackoffMs never exceeds a day whatever backoff_max_ms says", "[store]") {
  SettlePolicy policy;
  policy.backoff_base_ms = 1000;
  policy.backoff_max_ms = std::numeric_limits<std::int64_t>::max();
  CHECK(outbox::BackoffMs(1, policy) == 1000);
  CHECK(outbox::BackoffMs(60, policy) == outbox::kMaxHoldMs);
  CHECK(outbox::kMaxHoldMs == 86'400'000);
}

TEST_CASE("The broker incarnations noted by publishers are kept once each in order until a reset",
          "[store]") {
  StoreFixture f;
  CHECK(f.store.BrokerIncarnations().empty());
  f.store.NoteBrokerIncarnation("embedded:00000000000000a1");
  f.store.NoteBrokerIncarnation("embedded:00000000000000b2");
  f.store.NoteBrokerIncarnation("embedded:00000000000000a1");
  CHECK(f.store.BrokerIncarnations() ==
        std::vector<std::string>{"embedded:00000000000000a1", "embedded:00000000000000b2"});
  f.store.ResetSchema();
  CHECK(f.store.BrokerIncarnations().empty());
}

TEST_CASE("Claim tokens given before a reset are never given again on SQLite and a late settle "
          "marks no new row of the same id",
          "[store]") {
  StoreFixture f;
  EnqueueRange(f.store, 1, 1);
  const Claim old_claim = f.store.ClaimBatch(Request(kNowMs));
  REQUIRE(IdsOf(old_claim.rows) == Ids{1});
  // Reset while that batch is in flight; another relay claims the new row of the same id.
  Store other(f.dir.File("lab.db"), FastStoreOptions(), OpenMode::kExisting);
  other.ResetSchema();
  EnqueueRange(other, 1, 1);
  const Claim new_claim = other.ClaimBatch(Request(kNowMs));
  REQUIRE(IdsOf(new_claim.rows) == Ids{1});
  CHECK(new_claim.token > old_claim.token);

  // The late settle matches nothing: the new row stays claimed by the other relay, unpublished.
  const auto late = f.store.SettleBatch(old_claim.token, {1}, {}, SettlePolicy{}, kNowMs + 1);
  CHECK(late.marked == 0);
  CHECK(late.fenced == 1);
  CHECK_FALSE(IsPublished(f.store, 1));
  CHECK(IntColumn(f.store, "claim_token", 1) == new_claim.token);
}

TEST_CASE("PurgePublished keeps a row both marked and parked and a row whose published is not the "
          "relay's 1 and Status counts the latter",
          "[store]") {
  StoreFixture f;
  {
    auto txn = f.store.BeginWrite();
    // A foreign writer's rows, all long before the cutoff: marked and parked at once, published
    // written as 2 and as 'false', and one ordinary published row as a control.
    txn.connection().Exec(
        "INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at, published, "
        "published_at, parked_at) VALUES "
        "('both', 'A-1', 'T', 'x', 1700000000000, 1, 1700000000000, 1700000000000), "
        "('two', 'A-2', 'T', 'x', 1700000000000, 2, 1700000000000, NULL), "
        "('text', 'A-3', 'T', 'x', 1700000000000, 'false', 1700000000000, NULL), "
        "('sent', 'A-4', 'T', 'x', 1700000000000, 1, 1700000000000, NULL)");
    txn.Commit();
  }
  const outbox::PurgeReport report = f.store.PurgePublished(kNowMs, 10, /*archive=*/false);
  CHECK(report.deleted == 1);
  std::vector<std::string> kept;
  for (const auto& row : f.store.Snapshot().rows)
    if (!row.archived) kept.push_back(row.event_id);
  CHECK(kept == std::vector<std::string>{"both", "two", "text"});
  // status names the two values the relay reads as published but never sent.
  CHECK(f.store.Status(kNowMs).bad_published == 2);
}
