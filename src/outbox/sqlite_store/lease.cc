// Store: leader mode (relay --coordination leader): the lease, a leader's page and its settle.
#include "outbox/store.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <memory_resource>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "outbox/error.h"
#include "outbox/id_range.h"

#include "internal.h"

namespace outbox {

using namespace sqlite_store;  // this folder's shared helpers (internal.h)

namespace {

LeaderLease ReadLeaseRow(sqlite::Connection& connection) {
  auto select = connection.Prepare(
      "SELECT owner, token, until_ms, acquired_at FROM outbox_lease WHERE id = 1");
  LeaderLease lease;
  if (!select.Step()) return lease;
  lease.owner = select.ColumnText(0);
  lease.token = select.ColumnInt64(1);
  lease.until_ms = select.ColumnInt64(2);
  lease.acquired_at_ms = select.ColumnInt64(3);
  return lease;
}

void RequirePositiveLease(std::int64_t lease_ms) {
  if (lease_ms <= 0) throw ConfigError(fmt::format("lease {} ms: must be positive", lease_ms));
}

}  // namespace

LeaderLease Store::ReadLease() {
  sqlite::ReadTransaction txn(connection_);
  return ReadLeaseRow(connection_);
}

LeaseAcquisition Store::AcquireLease(const std::string& owner, std::int64_t lease_ms,
                                     std::int64_t now_ms) {
  RequirePositiveLease(lease_ms);
  LeaseAcquisition out;
  out.previous = ReadLease();
  out.lease = out.previous;
  if (out.previous.Live(now_ms)) return out;  // a standby's poll writes nothing
  return Phrased(fmt::format("acquire the leader lease for {}", owner), path(), [&] {
    sqlite::Transaction txn(connection_);
    out.previous = ReadLeaseRow(connection_);  // again, under the write lock
    out.lease = out.previous;
    if (out.previous.Live(now_ms)) return out;
    auto take = connection_.Prepare(
        "UPDATE outbox_lease SET owner = ?1, token = token + 1, until_ms = ?2 + ?3, "
        "acquired_at = ?2 WHERE id = 1 RETURNING token");
    take.Bind(1, owner).Bind(2, now_ms).Bind(3, lease_ms);
    if (!take.Step()) throw DbError("the lease row is missing", SQLITE_CORRUPT);
    out.lease = {owner, take.ColumnInt64(0), now_ms + lease_ms, now_ms};
    take.Reset();
    txn.Commit();
    out.acquired = true;
    return out;
  });
}

bool Store::RenewLease(std::int64_t token, std::int64_t lease_ms, std::int64_t now_ms) {
  RequirePositiveLease(lease_ms);
  return Phrased(fmt::format("renew the leader lease of term {}", token), path(), [&] {
    sqlite::Transaction txn(connection_);
    auto renew = connection_.Prepare(
        "UPDATE outbox_lease SET until_ms = MAX(until_ms, ?2 + ?3) WHERE id = 1 AND token = ?1");
    renew.Bind(1, token).Bind(2, now_ms).Bind(3, lease_ms).Run();
    const bool current = connection_.Changes() == 1;
    txn.Commit();
    return current;
  });
}

bool Store::ReleaseLease(std::int64_t token) {
  return Phrased(fmt::format("release the leader lease of term {}", token), path(), [&] {
    sqlite::Transaction txn(connection_);
    auto release =
        connection_.Prepare("UPDATE outbox_lease SET until_ms = 0 WHERE id = 1 AND token = ?1");
    release.Bind(1, token).Run();
    const bool current = connection_.Changes() == 1;
    txn.Commit();
    return current;
  });
}

// Sendable rows o for a leader: ?1 and ?2 = the ids (id >= ?1 AND id <= ?2, IdsAfter), ?3 =
// now, ?4 = block_key. Claims of a claims-mode relay are respected, so a
// leader never sends what such a relay holds.
static const std::string& SendableWhere() {
  static const std::string where =
      SendableRowsWhere(/*first=*/1, /*last=*/2, /*now=*/3, /*block_key=*/4);
  return where;
}

namespace {

// How many unpublished rows ReadPage may step over in id order for one page without taking them
// (held back behind an earlier row of their aggregate, or not sendable) before it takes the page
// from the aggregates' heads (ReadPageByHeads): otherwise a backlog of a few hot aggregates (pages
// of at most one row per aggregate) would be read whole for every page. A quarter page: a page of
// mostly sendable rows never gets there. PageRequest::scan_budget, when set, replaces it.
std::int64_t WasteBudget(const PageRequest& request) {
  return request.scan_budget > 0 ? request.scan_budget
                                 : std::max<std::int64_t>(request.limit / 4, 64);
}

// How many aggregates the look at the heads may find (two index seeks each) before it gives up
// and the page is read on in id order: two pages' worth of seeks at most.
std::int64_t MaxHeadAggregates(const PageRequest& request) {
  return request.scan_budget > 0 ? request.scan_budget
                                 : std::max<std::int64_t>(2 * request.limit, 128);
}

// After a look at the heads that found more aggregates than the budget, the pages read in id
// order this many times before looking again: a backlog of many aggregates, some hot, does not
// pay for the look on every page.
constexpr int kPagesWithoutHeads = 16;

// ReadPage checks at most this many gaps between the runs of ids in flight for other
// unpublished rows; past it, it checks each row (ReadPagePerRow).
constexpr std::size_t kMaxPageGaps = 8;

// ReadPage's held-back set's first buffer: room for the aggregates of 4,000 rows (a node is
// about 64 bytes, an aggregate id up to 15 bytes is inside it) and the buckets.
constexpr std::size_t kPageArenaBytes = 320 * 1024;

// True when every unpublished row with id <= *after_id is one of in_flight's: one index probe of
// outbox_unpublished per gap between the runs of consecutive ids in flight (a leader's batches
// are pages of consecutive ids, so with one batch in flight that is two probes: below it and
// after it). False past kMaxPageGaps gaps. The first gap starts at the lowest id (kLowestId),
// not at 1: a foreign writer may insert id 0 or a negative id. True at once without after_id:
// a page from the first row on has no row below it.
bool OnlyInFlightAtOrBelow(sqlite::Connection& connection, std::optional<std::int64_t> after_id,
                           const std::vector<InFlightRow>& in_flight) {
  if (!after_id) return true;
  std::vector<std::int64_t> ids;
  ids.reserve(in_flight.size());
  for (const InFlightRow& row : in_flight)
    if (row.id <= *after_id) ids.push_back(row.id);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::vector<std::pair<std::int64_t, std::int64_t>> gaps;  // [from, to] of each gap
  std::int64_t from = kLowestId;  // the lowest id not covered
  bool rest = true;  // false once the ids in flight reach the largest id
  for (std::size_t i = 0; i < ids.size();) {
    std::size_t j = i + 1;
    while (j < ids.size() && ids[j] == ids[j - 1] + 1) ++j;
    if (ids[i] > from) gaps.emplace_back(from, ids[i] - 1);
    if (ids[j - 1] == kHighestId) {
      rest = false;
      break;
    }
    from = ids[j - 1] + 1;
    i = j;
  }
  if (rest && from <= *after_id) gaps.emplace_back(from, *after_id);
  if (gaps.size() > kMaxPageGaps) return false;
  static const std::string sql =
      "SELECT 1 FROM outbox WHERE published = 0 AND id BETWEEN ?1 AND ?2 LIMIT 1";
  auto probe = connection.Reuse(sql);
  for (const auto& [first, last] : gaps) {
    probe->Reset();
    probe->Bind(1, first).Bind(2, last);
    if (probe->Step()) return false;
  }
  return true;
}

// A read transaction around ReadPage's probes and page, with kept BEGIN and COMMIT statements
// (sqlite::ReadTransaction runs BEGIN and ROLLBACK through sqlite3_exec, prepared each time:
// about 90,000 instructions a page). Inside a caller's transaction (ReadAtOneInstant), nothing:
// that one is the snapshot.
class PageSnapshot {
 public:
  explicit PageSnapshot(sqlite::Connection& connection) : connection_(connection) {
    if (sqlite3_get_autocommit(connection_.get()) == 0) return;
    static const std::string begin = "BEGIN";
    connection_.Reuse(begin)->Run();
    open_ = true;
  }
  PageSnapshot(const PageSnapshot&) = delete;
  PageSnapshot& operator=(const PageSnapshot&) = delete;
  ~PageSnapshot() {
    if (!open_) return;
    static const std::string commit = "COMMIT";  // a read: nothing to write, the snapshot ends
    try {
      connection_.Reuse(commit)->Run();
    } catch (...) {
      sqlite3_exec(connection_.get(), "ROLLBACK", nullptr, nullptr, nullptr);
    }
  }

 private:
  sqlite::Connection& connection_;
  bool open_ = false;
};

}  // namespace

// The page with the hold-back of block_key in SQL, row by row: for each candidate row, a probe
// of outbox_pending_by_aggregate for an earlier unpublished row of its aggregate (about 3,500
// instructions a row). Under block_key the rows are stepped through here, sendable or not, so
// that a page that reads past its scan budget can turn to the aggregates' heads.
std::vector<OutboxRow> Store::ReadPagePerRow(const PageRequest& request) {
  const IdRange ids = IdsAfter(request.after_id, request.up_to_id);
  std::vector<OutboxRow> rows;
  rows.reserve(static_cast<std::size_t>(std::clamp<std::int64_t>(request.limit, 0, 4096)));
  if (!request.block_key) {
    static const std::string sql = fmt::format(
        "SELECT o.id, o.event_id, o.aggregate_id, o.event_type, o.payload, o.created_at, "
        "o.headers FROM outbox o WHERE {} ORDER BY o.id LIMIT ?5",
        SendableWhere());
    auto select = connection_.Reuse(sql);  // prepared once per connection
    select->Bind(1, ids.first).Bind(2, ids.last).Bind(3, request.now_ms).Bind(4, 0);
    select->Bind(5, request.limit);
    while (select->Step()) rows.push_back(ReadOutboxRow(*select, 6));
    return rows;
  }
  // The sendable test and the probe as a CASE WHEN (a jump: the probe runs only for a row
  // otherwise sendable), every unpublished row of the range stepped.
  static const std::string sql = fmt::format(
      "SELECT o.id, o.event_id, o.aggregate_id, o.event_type, o.payload, o.created_at, o.headers, "
      "CASE WHEN o.parked_at IS NULL AND {} AND {} AND NOT {} AND NOT EXISTS (SELECT 1 FROM "
      "outbox e WHERE e.aggregate_id = o.aggregate_id AND e.id < o.id AND e.published = 0) "
      "THEN 1 ELSE 0 END "
      "FROM outbox o WHERE o.published = 0 AND o.id >= ?1 AND o.id <= ?2 ORDER BY o.id",
      Due("o.", 3), Unclaimed("o.", 3), Delayed("o.", 3));
  auto select = connection_.Reuse(sql);
  select->Bind(1, ids.first).Bind(2, ids.last).Bind(3, request.now_ms);
  std::int64_t budget = WasteBudget(request);
  while (static_cast<std::int64_t>(rows.size()) < request.limit && select->Step()) {
    if (select->ColumnInt64(7) != 0) {
      rows.push_back(ReadOutboxRow(*select, 6));
    } else if (--budget < 0) {
      if (auto by_heads = TryPageByHeads(request)) return std::move(*by_heads);
      budget = std::numeric_limits<std::int64_t>::max();  // read on in id order
    }
  }
  return rows;
}

std::optional<std::vector<OutboxRow>> Store::TryPageByHeads(const PageRequest& request) {
  if (pages_without_heads_ > 0) {
    --pages_without_heads_;
    return std::nullopt;
  }
  auto rows = ReadPageByHeads(request, MaxHeadAggregates(request));
  if (!rows) pages_without_heads_ = kPagesWithoutHeads;
  return rows;
}

std::vector<OutboxRow> Store::ReadPage(const PageRequest& request) {
  if (!request.block_key || request.limit <= 0) return ReadPagePerRow(request);
  // One snapshot for the look below the cursor and the page: a row published = 0 again (or
  // written) in between would otherwise go unseen by both. Inside a caller's transaction
  // (ReadAtOneInstant), that one.
  PageSnapshot snapshot(connection_);
  if (!OnlyInFlightAtOrBelow(connection_, request.after_id, request.in_flight))
    return ReadPagePerRow(request);
  // Every unpublished row below the page is in flight: the aggregates held back at the page's
  // start are theirs. Past it, every unpublished row read (sendable or not: parked, in backoff,
  // delayed, claimed) holds back the later rows of its aggregate, as the per-row look at earlier
  // unpublished rows (SendableRowsWhere) does. The rows are read in id order until the page is
  // full, no LIMIT: held-back and unsendable rows do not count. The sendable test is a CASE
  // WHEN, not a bare AND of the conditions: SQLite evaluates a boolean result column whole
  // (about 3,400 instructions a row more here), a CASE WHEN's condition as a jump, as in WHERE.
  // In page_arena_ (a monotonic resource frees nothing until the page is done; past the buffer
  // it takes more from the heap).
  if (page_arena_.empty()) page_arena_.resize(kPageArenaBytes);
  std::pmr::monotonic_buffer_resource arena(page_arena_.data(), page_arena_.size());
  std::pmr::unordered_set<std::pmr::string> held(&arena);
  held.reserve(request.in_flight.size() +
               static_cast<std::size_t>(std::clamp<std::int64_t>(request.limit, 0, 4096)));
  if (request.after_id)
    for (const InFlightRow& row : request.in_flight)
      if (row.id <= *request.after_id) held.emplace(row.aggregate_id);
  static const std::string sql = fmt::format(
      "SELECT o.id, o.event_id, o.aggregate_id, o.event_type, o.payload, o.created_at, o.headers, "
      "CASE WHEN o.parked_at IS NULL AND {} AND {} AND NOT {} THEN 1 ELSE 0 END "
      "FROM outbox o WHERE o.published = 0 AND o.id >= ?1 AND o.id <= ?2 ORDER BY o.id",
      Due("o.", 3), Unclaimed("o.", 3), Delayed("o.", 3));
  auto select = connection_.Reuse(sql);
  const IdRange ids = IdsAfter(request.after_id, request.up_to_id);
  select->Bind(1, ids.first).Bind(2, ids.last).Bind(3, request.now_ms);
  std::vector<OutboxRow> rows;
  rows.reserve(static_cast<std::size_t>(std::clamp<std::int64_t>(request.limit, 0, 4096)));
  ++pages_held_back_once_;
  std::int64_t budget = WasteBudget(request);
  while (static_cast<std::int64_t>(rows.size()) < request.limit && select->Step()) {
    // The aggregate first, the rest of the row only when it is taken: a held-back row's payload
    // is never copied.
    const bool sendable = select->ColumnInt64(7) != 0;
    if (held.emplace(select->ColumnView(2)).second && sendable) {
      rows.push_back(ReadOutboxRow(*select, 6));
    } else if (--budget < 0) {
      if (auto by_heads = TryPageByHeads(request)) return std::move(*by_heads);
      budget = std::numeric_limits<std::int64_t>::max();  // read on in id order
    }
  }
  return rows;
}

namespace {

// SettleUnderLease's mark, in its transaction: each acked id still unpublished is marked at
// now_ms (report.marked_ids), any other counted fenced (report.fenced_ids), in acked's order.
// One UPDATE per run of consecutive ids in acked (a run [first, last] holds exactly last -
// first + 1 acked ids, so the BETWEEN touches no row outside acked): a leader's batch is
// usually one run, 1,000 rows in one statement instead of 1,000 statements.
//
// with_returning false (the first try): the UPDATE has no RETURNING, and each run must mark
// every row of it (sqlite3_changes, the rows it changed, equals its length); the first run that
// marks fewer returns false at once, and the caller rolls the transaction back and settles again
// with with_returning true, where RETURNING says which rows each run marked. A leader's runs are
// whole unless another relay published some of the rows (a term it lost), so the second try is
// rare; RETURNING costs about 4,000 instructions per row (SQLite collects the returned rows in an
// ephemeral table before the first is stepped), a quarter of the mark.
bool MarkAckedUnderLease(sqlite::Connection& connection, const std::vector<std::int64_t>& acked,
                         std::int64_t now_ms, bool with_returning, SettleReport& report) {
  std::vector<std::int64_t> sorted = acked;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::unordered_set<std::int64_t> marked;  // filled only once a run fell short
  bool all_marked = true;
  std::vector<std::int64_t> returned;
  // OR FAIL, not the default ABORT: an ABORT of a statement that writes many rows needs a
  // statement journal to undo its own rows (https://www.sqlite.org/lang_conflict.html), which
  // SQLite spilled past 64 KiB to a temporary file opened, written (~200 pwrite64) and unlinked
  // once per batch. Nothing is lost: any error throws and the settle's transaction rolls back.
  // NOT INDEXED: the run's rows by their rowid range, in one pass. Through outbox_unpublished,
  // an index the UPDATE itself changes, SQLite first collects the rowids in an ephemeral table
  // and updates in a second pass (about 1,700 instructions a row more); the range holds exactly
  // the run's rows, so the index saves no reads.
  static const std::string plain_sql =
      "UPDATE OR FAIL outbox NOT INDEXED SET published = 1, published_at = ?3 "
      "WHERE id BETWEEN ?1 AND ?2 AND published = 0";
  static const std::string returning_sql = plain_sql + " RETURNING id";
  auto run = connection.Reuse(with_returning ? returning_sql : plain_sql);
  for (std::size_t begin = 0; begin < sorted.size();) {
    std::size_t end = begin + 1;
    while (end < sorted.size() && sorted[end] == sorted[end - 1] + 1) ++end;
    returned.clear();
    run->Reset();
    run->Bind(1, sorted[begin]).Bind(2, sorted[end - 1]).Bind(3, now_ms);
    if (!with_returning) {
      run->Run();
      if (connection.Changes() != static_cast<std::int64_t>(end - begin)) return false;
      begin = end;
      continue;
    }
    while (run->Step()) returned.push_back(run->ColumnInt64(0));
    if (all_marked && returned.size() != end - begin) {
      all_marked = false;  // from here on, row by row: the runs so far were whole
      marked.insert(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(begin));
    }
    if (!all_marked) marked.insert(returned.begin(), returned.end());
    begin = end;
  }
  if (all_marked && sorted.size() == acked.size()) {  // every id once, every one marked
    report.marked += static_cast<std::int64_t>(acked.size());
    report.marked_ids.insert(report.marked_ids.end(), acked.begin(), acked.end());
    return true;
  }
  if (all_marked) marked.insert(sorted.begin(), sorted.end());
  for (std::int64_t id : acked) {
    if (marked.erase(id) == 1) {  // a duplicate id is marked once, then counted fenced
      ++report.marked;
      report.marked_ids.push_back(id);
    } else {
      ++report.fenced;
      report.fenced_ids.push_back(id);
    }
  }
  return true;
}

}  // namespace

SettleReport Store::SettleUnderLease(std::int64_t token, const std::vector<std::int64_t>& acked,
                                     const std::vector<FailedDelivery>& failed,
                                     const SettlePolicy& policy, std::int64_t now_ms,
                                     std::int64_t lease_ms) {
  RequirePositiveLease(lease_ms);
  return Phrased(fmt::format("settle a batch of leader term {} ({} acknowledged, {} failed)", token,
                             acked.size(), failed.size()),
                 path(), [&] {
    // First without RETURNING; again with it, in a new transaction, when a run fell short
    // (MarkAckedUnderLease).
    for (bool with_returning : {false, true}) {
      SettleReport report;
      sqlite::Transaction txn(connection_);
      static const std::string renew_sql =
          "UPDATE outbox_lease SET until_ms = MAX(until_ms, ?2 + ?3) WHERE id = 1 AND token = ?1";
      connection_.Reuse(renew_sql)->Bind(1, token).Bind(2, now_ms).Bind(3, lease_ms).Run();
      if (connection_.Changes() != 1) {
        // Another relay took over: its term's sends stand, ours are not recorded.
        report.fenced_out = true;
        for (std::int64_t id : acked) report.fenced_ids.push_back(id);
        for (const FailedDelivery& failure : failed) report.fenced_ids.push_back(failure.id);
        report.fenced = static_cast<std::int64_t>(report.fenced_ids.size());
        return report;  // the transaction rolls back: nothing written
      }
      if (!MarkAckedUnderLease(connection_, acked, now_ms, with_returning, report))
        continue;  // the transaction rolls back: settle again, with RETURNING
      RecordFailures(connection_, "published = 0", 0, failed, policy, now_ms, report);
      txn.Commit();
      return report;
    }
    throw std::logic_error("SettleUnderLease: the mark with RETURNING cannot fall short");
  });
}
}  // namespace outbox
