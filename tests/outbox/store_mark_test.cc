// Store, the mark and what the bench reads back: publish delays.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "outbox/store.h"
#include "relay_test_support.h"
#include "test_support.h"

namespace {

using outbox::Claim;
using outbox::ClaimRequest;
using outbox::OpenMode;
using outbox::SettlePolicy;
using outbox::Store;
using outbox::testing::EnqueueRange;
using outbox::testing::FastStoreOptions;
using outbox::testing::kNowMs;
using outbox::testing::TempDir;
using Ids = std::vector<std::int64_t>;

ClaimRequest AllRows(std::int64_t now_ms) {
  ClaimRequest request;
  request.owner = "relay-test";
  request.limit = 1000;
  request.now_ms = now_ms;
  request.block_key = false;
  return request;
}

class MarkFixture {
 public:
  MarkFixture() : store(dir.File("lab.db"), FastStoreOptions(), OpenMode::kCreate) {
    store.ResetSchema();
  }
  TempDir dir;
  Store store;
};

}  // namespace

TEST_CASE("PublishDelaysMs gives published_at minus created_at of published rows past after_id",
          "[store]") {
  MarkFixture f;
  EnqueueRange(f.store, 1, 4);  // created_at 1700000000000 + i
  const Claim claim = f.store.ClaimBatch(AllRows(kNowMs));
  f.store.SettleBatch(claim.token, {1, 2, 4}, {}, SettlePolicy{}, 1700000000050);

  // Row 3 is unpublished: left out. Row 1 is at or before after_id = 1: left out.
  CHECK(f.store.PublishDelaysMs(1) == Ids{48, 46});
  CHECK(f.store.PublishDelaysMs(0) == Ids{49, 48, 46});
  CHECK(f.store.PublishDelaysMs(4).empty());
}

TEST_CASE("SettleBatch marks exactly the acked rows of a non-contiguous batch by id and by range",
          "[store]") {
  const outbox::MarkMethod method =
      GENERATE(outbox::MarkMethod::kById, outbox::MarkMethod::kByRange);
  INFO("method " << (method == outbox::MarkMethod::kById ? "by id" : "by range"));
  TempDir dir;
  outbox::StoreOptions options = FastStoreOptions();
  options.mark = method;
  Store store(dir.File("lab.db"), options, OpenMode::kCreate);
  store.ResetSchema();
  EnqueueRange(store, 1, 12);
  ClaimRequest first = AllRows(kNowMs);
  first.limit = 6;
  const Claim a = store.ClaimBatch(first);  // rows 1..6
  ClaimRequest second = AllRows(kNowMs);
  second.after_id = 6;
  second.limit = 4;
  const Claim b = store.ClaimBatch(second);  // rows 7..10; 11 and 12 stay unclaimed
  REQUIRE(a.rows.size() == 6);
  REQUIRE(b.rows.size() == 4);

  // Runs 1-3 and 5-8 (7 and 8 are b's) and a lone 11 (unclaimed); 4 and 9 to 12 not acked.
  const auto report =
      store.SettleBatch(a.token, {5, 1, 3, 2, 6, 7, 8, 11}, {}, SettlePolicy{}, kNowMs + 1);

  CHECK(report.marked == 5);
  CHECK(report.marked_ids == Ids{5, 1, 3, 2, 6});
  CHECK(report.fenced == 3);
  CHECK(report.fenced_ids == Ids{7, 8, 11});
  for (std::int64_t id = 1; id <= 12; ++id) {
    INFO("row " << id);
    const bool should_be_published = id <= 6 && id != 4;
    CHECK(outbox::testing::IsPublished(store, id) == should_be_published);
  }
  // b's rows keep b's claim: a's settle did not clear it.
  for (std::int64_t id = 7; id <= 10; ++id)
    CHECK(outbox::testing::IntColumn(store, "claim_token", id) == b.token);
  CHECK(outbox::testing::IntColumn(store, "claim_token", 4) == a.token);
  CHECK(store.Count().published == 5);
}

TEST_CASE("CheckpointPassive copies the WAL into the database and WalSizeBytes reports the -wal file",
          "[store]") {
  MarkFixture f;
  EnqueueRange(f.store, 1, 50);
  const std::int64_t wal_bytes = f.store.WalSizeBytes();
  CHECK(wal_bytes > 0);
  const outbox::CheckpointReport report = f.store.CheckpointPassive();
  CHECK_FALSE(report.busy);
  CHECK(report.wal_frames > 0);
  CHECK(report.checkpointed == report.wal_frames);  // no reader holds any frame back
  // PASSIVE does not truncate: the file keeps its size for reuse.
  CHECK(f.store.WalSizeBytes() == wal_bytes);
}

TEST_CASE("WalSizeBytes is 0 after the last connection closed cleanly", "[store]") {
  TempDir dir;
  {
    Store store(dir.File("lab.db"), FastStoreOptions(), OpenMode::kCreate);
    store.ResetSchema();
  }  // the last close checkpoints and removes -wal
  Store reopened(dir.File("lab.db"), FastStoreOptions(), OpenMode::kReadOnly);
  CHECK(reopened.WalSizeBytes() == 0);
}
