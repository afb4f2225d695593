// Store: claim and settle (claims mode of the relay, and the naive fetch-and-mark loop),
// what is claimable or waiting, and releasing claims.
#include "outbox/store.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "outbox/error.h"
#include "outbox/id_range.h"

#include "internal.h"

namespace outbox {

using namespace sqlite_store;  // this folder's shared helpers (internal.h)

std::vector<OutboxRow> Store::FetchUnpublished(std::optional<std::int64_t> after_id,
                                               std::int64_t limit) {
  auto select = connection_.Prepare(
      "SELECT id, event_id, aggregate_id, event_type, payload, created_at, headers FROM outbox "
      "WHERE published = 0 AND id >= ?1 AND id <= ?3 ORDER BY id LIMIT ?2");
  const IdRange ids = IdsAfter(after_id, kHighestId);
  select.Bind(1, ids.first).Bind(2, limit).Bind(3, ids.last);
  std::vector<OutboxRow> rows;
  while (select.Step()) rows.push_back(ReadOutboxRow(select, 6));
  return rows;
}

bool Store::MarkPublished(std::int64_t id) {
  return Phrased(fmt::format("mark outbox row {} published", id), path(), [&] {
    sqlite::Transaction txn(connection_);
    auto update = connection_.Prepare(
        "UPDATE outbox SET published = 1, published_at = ?2 WHERE id = ?1 AND published = 0");
    update.Bind(1, id).Bind(2, clock_->EpochMs()).Run();
    const bool changed = connection_.Changes() == 1;
    txn.Commit();
    return changed;
  });
}

std::int64_t Store::MarkPublished(const std::vector<std::int64_t>& ids) {
  sqlite::Transaction txn(connection_);
  auto update = connection_.Prepare(
      "UPDATE outbox SET published = 1, published_at = ?2 WHERE id = ?1 AND published = 0");
  const std::int64_t now_ms = clock_->EpochMs();
  std::int64_t marked = 0;
  for (std::int64_t id : ids) {
    update.Reset();
    update.Bind(1, id).Bind(2, now_ms).Run();
    marked += connection_.Changes();
  }
  txn.Commit();
  return marked;
}

namespace {

// Claimable rows o: ?3 = now, ?5 and ?8 = the ids (id >= ?5 AND id <= ?8, ClaimIds; a plain
// range, so SQLite bounds the index scan by it), ?6 = block_key. Under block_key only the oldest
// unpublished row of an aggregate is claimable, whatever the state of that row (due, in backoff,
// parked, claimed, or merely behind the cursor): so a batch holds at most one
// row per aggregate and a later row is never sent before an earlier one.
const std::string& ClaimableWhere() {
  static const std::string where =
      SendableRowsWhere(/*first=*/5, /*last=*/8, /*now=*/3, /*block_key=*/6);
  return where;
}

}  // namespace

static IdRange ClaimIds(const ClaimRequest& request) {
  return IdsAfter(request.after_id, request.up_to_id);
}

bool Store::HasClaimable(const ClaimRequest& request) {
  auto select = connection_.Prepare(
      fmt::format("SELECT 1 FROM outbox o WHERE {} LIMIT 1", ClaimableWhere()));
  const IdRange ids = ClaimIds(request);
  select.Bind(3, request.now_ms)
      .Bind(5, ids.first)
      .Bind(6, static_cast<std::int64_t>(request.block_key ? 1 : 0))
      .Bind(8, ids.last);
  return select.Step();
}

std::int64_t Store::WaitingCount(std::int64_t now_ms) {
  auto select = connection_.Prepare(
      fmt::format("SELECT COUNT(*) FROM outbox WHERE published = 0 AND parked_at IS NULL "
                  "AND NOT ({} AND {} AND NOT {})",
                  Due("", 1), Unclaimed("", 1), Delayed("", 1)));
  select.Bind(1, now_ms);
  select.Step();
  return select.ColumnInt64(0);
}

void Store::ReadAtOneInstant(const std::function<void()>& reads) {
  // One snapshot for every read in it (a WAL reader's snapshot is fixed by its first read):
  // another relay's settle committed between two of them is seen by neither. ReadPage's own
  // snapshot (PageSnapshot) joins this one.
  sqlite::ReadTransaction txn(connection_);
  reads();
}

std::int64_t Store::PendingCount() {
  return connection_.QueryInt64(
      "SELECT COUNT(*) FROM outbox WHERE published = 0 AND parked_at IS NULL");
}

std::int64_t Store::ParkedCount() {
  return connection_.QueryInt64(
      "SELECT COUNT(*) FROM outbox WHERE published = 0 AND parked_at IS NOT NULL");
}

Claim Store::ClaimBatch(const ClaimRequest& request) {
  return Phrased(fmt::format("claim a batch of up to {} rows for {}", request.limit, request.owner), path(), [&] {
    Claim claim;
    sqlite::Transaction txn(connection_);
    claim.token = connection_.QueryInt64("UPDATE outbox_fence SET token = token + 1 RETURNING token");
    // The IN (...) subquery is evaluated before any row is updated.
    auto update = connection_.Prepare(fmt::format(
        "UPDATE outbox SET claim_token = ?1, claim_owner = ?2, claim_until = ?3 + ?4, claimed_at = ?3 "
        "WHERE id IN (SELECT o.id FROM outbox o WHERE {} ORDER BY o.id LIMIT ?7) "
        "RETURNING id, event_id, aggregate_id, event_type, payload, created_at, attempts, headers",
        ClaimableWhere()));
    const IdRange ids = ClaimIds(request);
    update.Bind(1, claim.token)
        .Bind(2, request.owner)
        .Bind(3, request.now_ms)
        .Bind(4, request.lease_ms)
        .Bind(5, ids.first)
        .Bind(6, static_cast<std::int64_t>(request.block_key ? 1 : 0))
        .Bind(7, request.limit)
        .Bind(8, ids.last);
    std::vector<std::pair<OutboxRow, std::int64_t>> claimed;
    while (update.Step()) claimed.emplace_back(ReadOutboxRow(update, 7), update.ColumnInt64(6));
    txn.Commit();
    // RETURNING gives no order guarantee (https://www.sqlite.org/lang_returning.html).
    std::sort(claimed.begin(), claimed.end(),
              [](const auto& a, const auto& b) { return a.first.id < b.first.id; });
    for (auto& [row, attempts] : claimed) {
      claim.rows.push_back(std::move(row));
      claim.attempts.push_back(attempts);
    }
    return claim;
  });
}

namespace {

// SettleBatch's mark of the acknowledged ids, in the caller's transaction:
// each id held under token is marked published at now_ms and listed in
// report.marked_ids; any other (fenced: its claim was taken over) in
// report.fenced_ids, in the order of acked.
void MarkAcked(sqlite::Connection& connection, MarkMethod method, std::int64_t token,
               const std::vector<std::int64_t>& acked, std::int64_t now_ms,
               SettleReport& report) {
  const auto count = [&report](std::int64_t id, bool marked) {
    (marked ? report.marked : report.fenced) += 1;
    (marked ? report.marked_ids : report.fenced_ids).push_back(id);
  };
  if (method == MarkMethod::kById) {
    auto mark = connection.Prepare(
        "UPDATE outbox SET published = 1, published_at = ?3, claim_token = NULL, "
        "claim_owner = NULL, claim_until = NULL WHERE id = ?1 AND claim_token = ?2");
    for (std::int64_t id : acked) {
      mark.Reset();
      mark.Bind(1, id).Bind(2, token).Bind(3, now_ms).Run();
      count(id, connection.Changes() == 1);
    }
    return;
  }
  // Runs of consecutive ids in sorted order; a run [first, last] holds exactly
  // last - first + 1 acked ids, so the BETWEEN touches no row outside acked.
  std::vector<std::int64_t> sorted = acked;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  auto mark = connection.Prepare(
      "UPDATE outbox SET published = 1, published_at = ?4, claim_token = NULL, "
      "claim_owner = NULL, claim_until = NULL WHERE id BETWEEN ?1 AND ?2 AND claim_token = ?3 "
      "RETURNING id");
  std::unordered_set<std::int64_t> marked;
  for (std::size_t begin = 0; begin < sorted.size();) {
    std::size_t end = begin + 1;
    while (end < sorted.size() && sorted[end] == sorted[end - 1] + 1) ++end;
    mark.Reset();
    mark.Bind(1, sorted[begin]).Bind(2, sorted[end - 1]).Bind(3, token).Bind(4, now_ms);
    while (mark.Step()) marked.insert(mark.ColumnInt64(0));
    begin = end;
  }
  for (std::int64_t id : acked) count(id, marked.erase(id) == 1);
}

}  // namespace

namespace sqlite_store {

void RecordFailures(sqlite::Connection& connection, std::string_view still_ours,
                    std::int64_t token, const std::vector<FailedDelivery>& failed,
                    const SettlePolicy& policy, std::int64_t now_ms, SettleReport& report) {
  if (failed.empty()) return;
  const bool uses_token = still_ours.find("?2") != std::string_view::npos;
  auto attempts_of = connection.Prepare(
      fmt::format("SELECT attempts FROM outbox WHERE id = ?1 AND {}", still_ours));
  auto record = connection.Prepare(fmt::format(
      "UPDATE outbox SET attempts = ?3, last_error = ?4, next_attempt_at = ?5, parked_at = ?6, "
      "claim_token = NULL, claim_owner = NULL, claim_until = NULL WHERE id = ?1 AND {}",
      still_ours));
  for (const FailedDelivery& failure : failed) {
    attempts_of.Reset();
    attempts_of.Bind(1, failure.id);
    if (uses_token) attempts_of.Bind(2, token);
    if (!attempts_of.Step()) {
      ++report.fenced;
      report.fenced_ids.push_back(failure.id);
      continue;
    }
    const std::int64_t attempts = NextAttempt(attempts_of.ColumnInt64(0));
    attempts_of.Reset();
    const bool park = failure.park_now || attempts >= policy.max_attempts;
    record.Reset();
    record.Bind(1, failure.id).Bind(3, attempts).Bind(4, failure.error)
        .Bind(5, now_ms + BackoffMs(attempts, policy));
    if (uses_token) record.Bind(2, token);
    if (park) record.Bind(6, now_ms); else record.BindNull(6);
    record.Run();
    if (park) {
      ++report.parked;
      report.parked_ids.push_back(failure.id);
    } else {
      ++report.retried;
    }
  }
}

}  // namespace sqlite_store

SettleReport Store::SettleBatch(std::int64_t token, const std::vector<std::int64_t>& acked,
                                const std::vector<FailedDelivery>& failed,
                                const SettlePolicy& policy, std::int64_t now_ms) {
  return Phrased(fmt::format("settle the batch of claim {} ({} acknowledged, {} failed)", token, acked.size(), failed.size()), path(), [&] {
    SettleReport report;
    sqlite::Transaction txn(connection_);
    MarkAcked(connection_, mark_, token, acked, now_ms, report);
    RecordFailures(connection_, "claim_token = ?2", token, failed, policy, now_ms, report);
    txn.Commit();
    return report;
  });
}

std::vector<ClaimOwner> Store::ClaimOwners(std::int64_t now_ms) {
  auto select = connection_.Prepare(
      // A claim with no owner (another program's claim columns) holds its rows all the same:
      // listed under the owner "", as PostgreSQL's NULL group is.
      fmt::format("SELECT COALESCE(claim_owner, ''), COUNT(*), MIN(COALESCE(claimed_at, "
                  "claim_until)), MAX(claim_until), MAX(claim_token) FROM outbox WHERE "
                  "published = 0 AND NOT {} GROUP BY 1 ORDER BY 1",
                  Unclaimed("", 1)));
  select.Bind(1, now_ms);
  std::vector<ClaimOwner> owners;
  while (select.Step()) {
    ClaimOwner owner;
    owner.owner = select.ColumnText(0);
    owner.rows = select.ColumnInt64(1);
    owner.age_ms = std::max<std::int64_t>(0, now_ms - select.ColumnInt64(2));
    owner.expires_in_ms = std::max<std::int64_t>(0, select.ColumnInt64(3) - now_ms);
    owner.max_token = select.ColumnInt64(4);
    owners.push_back(std::move(owner));
  }
  return owners;
}

std::int64_t Store::ReleaseClaimsOf(const std::string& owner, std::int64_t up_to_token) {
  return Phrased(fmt::format("release the claims of {}", owner), path(), [&] {
    sqlite::Transaction txn(connection_);
    auto release = connection_.Prepare(
        "UPDATE outbox SET claim_token = NULL, claim_owner = NULL, claim_until = NULL "
        "WHERE claim_owner = ?1 AND claim_token <= ?2 AND published = 0");
    release.Bind(1, owner).Bind(2, up_to_token).Run();
    const std::int64_t released = connection_.Changes();
    txn.Commit();
    return released;
  });
}

void Store::ReleaseClaim(std::int64_t token) {
  return Phrased(fmt::format("release claim {}", token), path(), [&] {
    sqlite::Transaction txn(connection_);
    auto release = connection_.Prepare(
        "UPDATE outbox SET claim_token = NULL, claim_owner = NULL, claim_until = NULL "
        "WHERE claim_token = ?1 AND published = 0");  // published = 0: the partial index
    release.Bind(1, token).Run();
    txn.Commit();
  });
}
}  // namespace outbox
