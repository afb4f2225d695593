// PgStore: leader mode (relay --coordination leader) on the server's clock: the lease and a
// leader's settle (its page: page.cc).
#include "outbox/pg_store.h"

#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "outbox/error.h"

#include "internal.h"

namespace outbox {

using namespace pg_store;  // this folder's shared helpers (internal.h)

namespace {

void RequirePositiveLease(std::int64_t lease_ms) {
  if (lease_ms <= 0) throw ConfigError(fmt::format("lease {} ms: must be positive", lease_ms));
}

// The lease row judged on the server's clock: owner, token, ms left until it runs out (NULL once
// released), ms since its term began (NULL before the first term).
constexpr const char* kLeaseSelect =
    "SELECT owner, token, "
    "CASE WHEN isfinite(until) THEN (extract(epoch FROM until - now()) * 1000)::bigint END, "
    "CASE WHEN isfinite(acquired_at) "
    "THEN (extract(epoch FROM now() - acquired_at) * 1000)::bigint END "
    "FROM outbox_lease WHERE id = 1";

// The row of kLeaseSelect with its times moved into the caller's clock: until_ms = now_ms + the
// time the server says is left, so lease.Live(now_ms) is the server's verdict whatever the
// caller's clock says.
LeaderLease LeaseAt(const pg::Result& row, std::int64_t now_ms) {
  LeaderLease lease;
  if (row.rows() == 0) return lease;
  lease.owner = row.Text(0, 0);
  lease.token = row.Int(0, 1);
  lease.until_ms = row.IsNull(0, 2) ? 0 : now_ms + row.Int(0, 2);
  lease.acquired_at_ms = row.IsNull(0, 3) ? 0 : now_ms - row.Int(0, 3);
  return lease;
}

// Extends term token's lease to the server's now() + lease_ms, never shortening it. Returns
// false (nothing written) when token is no longer the lease's token.
bool ExtendLease(pg::Connection& connection, std::int64_t token, std::int64_t lease_ms) {
  return connection
             .Query("UPDATE outbox_lease "
                    "SET until = GREATEST(until, now() + $2::bigint * interval '1 millisecond') "
                    "WHERE id = 1 AND token = $1",
                    {pg::Param::Int(token), pg::Param::Int(lease_ms)}, "renew the leader lease")
             .Affected() == 1;
}

}  // namespace

LeaderLease PgStore::ReadLease() {
  return LeaseAt(connection_.Query(kLeaseSelect, {}, "read the leader lease"), clock_->EpochMs());
}

LeaseAcquisition PgStore::AcquireLease(const std::string& owner, std::int64_t lease_ms,
                                       std::int64_t now_ms) {
  RequirePositiveLease(lease_ms);
  ReopenIfClosedWhileIdle();
  LeaseAcquisition out;
  out.previous = LeaseAt(connection_.Query(kLeaseSelect, {}, "read the leader lease"), now_ms);
  out.lease = out.previous;
  if (out.previous.Live(now_ms)) return out;  // a standby's poll writes nothing, locks nothing
  pg::Transaction txn(connection_);
  LimitIdleInTransaction(connection_, lease_ms);
  // Again under the row lock: of two relays that saw the lease free, the second reads the
  // first's new term here and stands by.
  out.previous = LeaseAt(connection_.Query(std::string(kLeaseSelect) + " FOR UPDATE", {},
                                           "lock the leader lease"),
                         now_ms);
  out.lease = out.previous;
  if (out.previous.Live(now_ms)) return out;  // rolled back by txn's destructor
  const std::int64_t token = connection_.QueryInt(
      "UPDATE outbox_lease SET owner = $1, token = token + 1, "
      "until = now() + $2::bigint * interval '1 millisecond', acquired_at = now() "
      "WHERE id = 1 RETURNING token",
      {pg::Param::Text(owner), pg::Param::Int(lease_ms)},
      fmt::format("acquire the leader lease for {}", owner));
  txn.Commit();
  out.lease = {owner, token, now_ms + lease_ms, now_ms};
  out.acquired = true;
  return out;
}

bool PgStore::RenewLease(std::int64_t token, std::int64_t lease_ms, std::int64_t /*now_ms*/) {
  RequirePositiveLease(lease_ms);
  ReopenIfClosedWhileIdle();
  return ExtendLease(connection_, token, lease_ms);
}

bool PgStore::ReleaseLease(std::int64_t token) {
  ReopenIfClosedWhileIdle();
  return connection_
             .Query("UPDATE outbox_lease SET until = '-infinity' WHERE id = 1 AND token = $1",
                    {pg::Param::Int(token)}, "release the leader lease")
             .Affected() == 1;
}

SettleReport PgStore::SettleUnderLease(std::int64_t token, const std::vector<std::int64_t>& acked,
                                       const std::vector<FailedDelivery>& failed,
                                       const SettlePolicy& policy, std::int64_t /*now_ms*/,
                                       std::int64_t lease_ms) {
  RequirePositiveLease(lease_ms);
  ReopenIfClosedWhileIdle();
  SettleReport report;
  // The token check, the renewal and the marks in ONE statement (one round trip, its own
  // transaction when no failure needs recording): the lease's UPDATE holds the lease row's lock
  // until the commit, so no takeover (AcquireLease locks the same row) can fall between check and
  // marks, and the marks run only when it renewed (EXISTS over its RETURNING). Failures too: one
  // transaction around it and the failures' rows.
  std::optional<pg::Transaction> txn;
  if (!failed.empty()) {
    txn.emplace(connection_);
    LimitIdleInTransaction(connection_, lease_ms);
  }
  static const std::string sql =
      std::string("WITH lease AS (UPDATE outbox_lease "
                  "SET until = GREATEST(until, now() + $2::bigint * interval '1 millisecond') "
                  "WHERE id = 1 AND token = $1 RETURNING token), "
                  "marked AS (UPDATE outbox SET published = true, published_at = ") +
      kEpochMsNow +
      " WHERE id = ANY($3::bigint[]) AND NOT published AND EXISTS (SELECT 1 FROM lease) "
      "RETURNING id) "
      "SELECT (SELECT count(*) FROM lease), m.id FROM (SELECT 1) one "
      "LEFT JOIN marked m ON true";
  const pg::Result result = connection_.QueryPrepared(
      sql, {pg::Param::Int(token), pg::Param::Int(lease_ms), IdArray(acked)},
      "settle a leader's batch");
  if (result.rows() == 0 || result.Int(0, 0) == 0) {
    // Another relay took over: its term's sends stand, ours are not recorded.
    report.fenced_out = true;
    for (std::int64_t id : acked) report.fenced_ids.push_back(id);
    for (const FailedDelivery& failure : failed) report.fenced_ids.push_back(failure.id);
    report.fenced = static_cast<std::int64_t>(report.fenced_ids.size());
    return report;  // nothing was written (txn's destructor rolls back, if any)
  }
  if (!acked.empty()) {
    std::vector<std::int64_t> marked_ids;
    for (int i = 0; i < result.rows(); ++i)
      if (!result.IsNull(i, 1)) marked_ids.push_back(result.Int(i, 1));
    TallyMarks(marked_ids, acked, report);  // fenced: published already (by another writer)
  }
  RecordFailures(connection_, std::nullopt, failed, policy, report);
  if (txn) txn->Commit();
  return report;
}

}  // namespace outbox
