// The outbox on PostgreSQL (issue 12): the same rows, claims and settles as the SQLite Store,
// with the database server's rules where they differ.
//
// - Claims are `SELECT ... FOR UPDATE SKIP LOCKED` inside one short transaction, so relays on
//   many hosts share the work without waiting on each other (chapter 7.1: racing relays multiply
//   duplicates; the cure is SKIP LOCKED or sharding;
//   https://www.postgresql.org/docs/15/sql-select.html#SQL-FOR-UPDATE-SHARE).
// - Lease and backoff times are the server's clock (now()), never a relay's own: clocks on
//   different hosts disagree, and a relay whose clock runs ahead must not steal a live lease.
// - Ids come from a sequence, so transactions commit out of id order. A relay that keeps a
//   keyset cursor ("claim ids above the last one I saw") skips forever a row whose transaction
//   took a smaller id and committed later. The claim therefore keeps no cursor: it scans the
//   unpublished rows (a partial index) every time. PgClaimMode::kNaiveCursor keeps the cursor on
//   purpose, so a class can watch the bug lose an event.
// - Leader mode (relay --coordination leader) keeps one lease row, outbox_lease, judged on the
//   server's clock like the claims (see "Leader mode" below).
// - Schema changes run under an advisory lock, so two processes that start together do not race
//   to create the tables.
// Implements OutboxStore (outbox_store.h), so the relay and the lab run on it unchanged.
// Not thread-safe: one PgStore (one connection) per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "outbox/event.h"
#include "outbox/pg/connection.h"
#include "outbox/store.h"

namespace outbox {

// How ClaimBatch finds rows.
enum class PgClaimMode {
  kScan,  // every unpublished row, whatever its id: late commits are never skipped
  // The classic bug, kept for the lesson: the relay keeps an offset (table outbox_offset, the
  // highest id it has claimed) and claims only ids above it, like a poller that stores its
  // position. A row whose transaction took a smaller id and committed after the offset passed it
  // is never claimed, and Snapshot() counts every row at or below the offset as published (that
  // is what the offset says), so `check` reports it lost.
  kNaiveCursor,
};

// The oldest transaction of the server holding back the MVCC horizon (the xmin below which
// VACUUM may remove dead rows): while it stays open, every published, purged or updated outbox
// row stays in the table and its indexes as a dead tuple, whatever the relay does.
// https://www.postgresql.org/docs/15/routine-vacuuming.html#VACUUM-FOR-SPACE-RECOVERY
struct HorizonHolder {
  int pid = 0;                   // pg_stat_activity.pid
  std::string application_name;  // may be empty
  std::string state;             // "idle in transaction", "active", ...
  std::string database;          // the database it is connected to (the horizon is cluster-wide)
  std::int64_t xmin_age = 0;     // age() of its backend_xmin (or backend_xid), in transactions
  std::int64_t transaction_age_ms = 0;  // server's now() - xact_start
  std::int64_t outbox_dead_tuples = 0;  // pg_stat_user_tables.n_dead_tup of this outbox
};

class PgStore : public OutboxStore {
 public:
  // Connects and, when a table of the schema is missing, creates it under
  // pg_advisory_lock(kMigrationLockKey), waiting for it at most lock_timeout (see
  // kMigrationLockWaitMs). An existing schema is not touched: no DDL and no lock, so no wait
  // behind the writers' open transactions. clock (not owned, must outlive the store; null: the
  // system clock) is what clock() returns; leases and backoffs never read it (the server's now()).
  // mode: how ClaimBatch(request) finds rows.
  // Throws pg::PgError: the server is unreachable, refuses the login, or the database does not
  // exist (sqlstate "3D000"); "55P03" when another session holds the schema lock past the wait
  // (the message names its PID).
  explicit PgStore(const std::string& url, Clock* clock = nullptr,
                   PgClaimMode mode = PgClaimMode::kScan);

  Backend backend() const noexcept override { return Backend::kPostgres; }

  // The advisory lock key that serializes schema changes (any fixed bigint; "outbox" in ASCII).
  static constexpr std::int64_t kMigrationLockKey = 0x6f7574626f78;
  // How long a schema change waits for kMigrationLockKey when the session sets no lock_timeout
  // (ms). A longer or shorter wait: lock_timeout in the URL (`?options=-clock_timeout%3D2000`).
  static constexpr std::int64_t kMigrationLockWaitMs = 10000;

  // Drops and recreates the outbox, its archive, the naive offset and the run table, empty, and
  // starts a new run (RunId). The lab's business table is the lab's (lab/chapter/loans.h,
  // ResetLabStore). Returns what it dropped, counted in the drop's transaction (lab_table false:
  // the table named outbox has no boolean published column, so published is 0). Takes the
  // schema lock (see the constructor) before it drops anything. All of it is ONE transaction, so
  // another session never finds a table missing: a relay's or a writer's statement that meets
  // the drop waits for its commit and then runs on the new tables (docs/postgres-sessions.md,
  // "reset while relays and writers run"); the DROP waits for every transaction open on these
  // tables, without bound unless the URL sets lock_timeout. The fencing sequence stays (a claim
  // token is never given twice), and so does the leader lease row, its term ended and its token
  // stepped past it (owner kResetLeaseOwner): a settle of rows read before the reset marks none
  // of the new outbox, whose ids start again at 1. Every publication that listed the outbox or
  // outbox_run by name (the WAL relay's, wal_relay.h) lists the new tables of those names in the
  // same transaction: a DROP TABLE takes the table out of its publications, and an insert that
  // commits while its table is in none is never streamed, even once the table is added.
  // also (may be empty): more work in that
  // transaction, first (the lab drops and creates its business table there, first as its
  // writers lock it first). Throws pg::PgError ("55P03" naming the lock's holder), or what also
  // throws; nothing is dropped then.
  ResetCounts ResetSchema(const std::function<void(pg::Connection&)>& also = nullptr);
  // True when every table of the outbox schema exists. Throws pg::PgError.
  bool HasSchema() { return SchemaCurrent(); }

  // Closes the connection and opens a new one to the same URL: after the server crashed or
  // restarted. Throws pg::PgError while the server is still down (ConnectionLost is then true).
  // ClaimBatch, HasClaimable, ReadPage, SettleBatch, SettleUnderLease and the lease calls do it
  // by themselves first when the server ended the session while it sat idle
  // (ReopenIfClosedWhileIdle), and then throw the connect's pg::PgError when it fails.
  void Reconnect() override;
  // e is a pg::PgError whose connection_lost() is true: no SQLSTATE (the socket broke), class 08
  // (connection exception) or 57P01..57P03 (admin shutdown, crash shutdown, cannot connect now).
  bool ConnectionLost(const std::exception& e) const noexcept override;

  // Begins a transaction for a business write and its outbox rows. Throws pg::PgError.
  pg::Transaction BeginWrite() { return pg::Transaction(connection_); }
  // Begins a REPEATABLE READ transaction: the caller's reads of its own tables through
  // txn.connection() and Snapshot(txn) see one snapshot of the database. Throws pg::PgError.
  pg::Transaction BeginRead();

  // Inserts one outbox row inside txn (the business row's transaction: they commit or roll back
  // together, chapter 7.1). created_at is the server's clock when event.created_at_ms is 0;
  // event.headers is stored as given (empty: NULL). Returns the row's id (from the
  // sequence: committed rows are NOT in id order). event.not_before_ms is written as it is
  // (epoch ms, compared with the server's clock); event.delay_ms > 0 writes not_before = the
  // server's clock at the INSERT + delay_ms. Throws ConfigError for a delay
  // DelayErrorMessage refuses; pg::PgError: sqlstate "23505" when event_id exists already.
  // In the same statement (no extra round trip) it sends pg_notify(wake_channel(), ''), which the
  // server delivers to the listening relays when txn commits and drops when it rolls back; the
  // notifications of one transaction are folded into one. A relay waiting in NotifyWatcher wakes
  // on it. https://www.postgresql.org/docs/15/sql-notify.html
  std::int64_t Enqueue(pg::Transaction& txn, const OutboxEvent& event);

  // The channel Enqueue notifies on commit and a relay LISTENs on: "outbox_" and the schema of
  // this store's outbox table (schemas of one database do not wake each other's relays), cut to
  // 63 bytes (NAMEDATALEN - 1, the longest channel name). A writer of its own wakes the relays
  // with `SELECT pg_notify('outbox_public', '')` in its transaction (writing-to-the-outbox.md).
  const std::string& wake_channel() const noexcept { return wake_channel_; }
  // "outbox_" + schema, cut to 63 bytes.
  static std::string WakeChannel(const std::string& schema);

  // OutboxStore. RunId: empty before the first ResetSchema. NextId: from the id sequence.
  // Snapshot: in one REPEATABLE READ transaction. Every one throws pg::PgError.
  std::string RunId() override;
  void NoteBrokerIncarnation(const std::string& incarnation) override;
  std::vector<std::string> BrokerIncarnations() override;
  void NotePartitionMapping(const PartitionMapping& mapping) override;
  std::optional<PartitionMapping> ReadPartitionMapping(const std::string& topic) override;
  // Broker outages (outbox_store.h), in src/outbox/pg_store_outage.cc: the times given, not
  // the server's (they only inform status).
  void NoteOutage(const BrokerOutage& outage) override;
  bool ClearOutage() override;
  std::optional<BrokerOutage> ReadOutage() override;
  std::int64_t NextId() override;
  OutboxCounts Count() override;
  std::vector<std::string> EventTypes() override;
  OutboxSnapshot Snapshot() override;
  // Every outbox and archive row, read in txn (from BeginRead()). Throws pg::PgError.
  OutboxSnapshot Snapshot(pg::Transaction& txn);
  std::vector<OutboxRow> FetchUnpublished(std::optional<std::int64_t> after_id,
                                          std::int64_t limit) override;
  bool MarkPublished(std::int64_t id) override;

  // The operator's commands (OutboxStore): parked, unpark, purge, on the server's clock.
  // ListTroubled reads in one REPEATABLE READ transaction; age_ms is the server's now() minus
  // created_at, next_attempt_at_ms is now_ms plus the server's time left until next_attempt_at.
  // PurgeOlderThan fixes its cutoff once from the server's now() and deletes (with archive:
  // copies to outbox_archive, published true, archived_at the server's epoch ms, then deletes)
  // in one statement per batch. Each throws ConfigError for a bad limit, age or batch size,
  // FailpointError (purge.mid_batch), pg::PgError; a purge's PgError keeps the SQLSTATE and says
  // how many batches and rows were committed before it.
  TroubledRows ListTroubled(std::int64_t now_ms, std::int64_t limit) override;
  std::vector<Stall> Stalls(std::int64_t limit) override;
  bool Unpark(std::int64_t id) override;
  std::int64_t UnparkAll() override;
  PurgeReport PurgeOlderThan(std::int64_t older_than_ms, std::int64_t batch_size,
                             bool archive) override;

  // Claims up to request.limit claimable rows (unpublished, not parked, no live lease, backoff
  // over; with block_key only the oldest unpublished row of each aggregate) for lease_ms of the
  // server's clock. request.now_ms, after_id and up_to_id are ignored: the server's clock and the
  // mode decide. Rows come back in id order with a fencing token greater than every earlier
  // claim's (a sequence). With block_key (scan mode) it walks the aggregates' heads first (one
  // index probe per aggregate, up to 1,000 aggregates), so a backlog stalled behind failed heads
  // costs per aggregate, not per stalled row; past 1,000 aggregates, the id-order scan (and the
  // next 16 claims and looks go straight to the scan before walking again). One statement, one
  // round trip (the token, the walk or the scan, the update); the naive mode keeps a transaction
  // of four statements (it moves its offset too). Throws pg::PgError.
  Claim ClaimBatch(const ClaimRequest& request, PgClaimMode mode);
  // The same in the mode given to the constructor.
  Claim ClaimBatch(const ClaimRequest& request) override { return ClaimBatch(request, mode_); }
  // Whether ClaimBatch(request) in the constructor's mode would claim a row now (no lock taken,
  // so a row another relay is claiming this instant may still answer true). Throws pg::PgError.
  bool HasClaimable(const ClaimRequest& request) override;

  // Marks acked rows published and records failed ones (backoff on the server's clock, parked at
  // max_attempts), each only while token still owns the row; rows claimed since by another relay
  // are counted as fenced and left untouched. One transaction. Throws pg::PgError.
  SettleReport SettleBatch(std::int64_t token, const std::vector<std::int64_t>& acked,
                           const std::vector<FailedDelivery>& failed, const SettlePolicy& policy);
  // OutboxStore's settle: now_ms is ignored (the server's clock).
  SettleReport SettleBatch(std::int64_t token, const std::vector<std::int64_t>& acked,
                           const std::vector<FailedDelivery>& failed, const SettlePolicy& policy,
                           std::int64_t /*now_ms*/) override {
    return SettleBatch(token, acked, failed, policy);
  }

  // The OutboxStore reads on the server's clock (now_ms judges nothing). Backoffs'
  // first_due_ms is in the caller's clock: now_ms + the wait the server says is left (0 when no
  // row waits). Status leaves bad_created_at 0: the column is a bigint with a default, there is
  // no text to misread.
  // Each throws pg::PgError.
  std::int64_t WaitingCount(std::int64_t now_ms) override;
  std::int64_t PendingCount() override;
  std::int64_t ParkedCount() override;
  // One REPEATABLE READ transaction around reads: now() is its start, and every statement in it
  // sees the snapshot of the first.
  void ReadAtOneInstant(const std::function<void()>& reads) override;
  BackoffWait Backoffs(std::int64_t now_ms) override;
  std::vector<ClaimOwner> ClaimOwners(std::int64_t now_ms) override;
  std::int64_t ReleaseClaimsOf(const std::string& owner, std::int64_t up_to_token) override;
  OutboxStatus Status(std::int64_t now_ms) override;

  // The oldest open transaction of this database that holds a snapshot or a transaction id
  // (other than this store's own session; other databases' sessions do not hold back its tables), when its transaction is at least threshold_ms (>= 0) old on the
  // server's clock; nullopt otherwise. Prepared transactions and replication slots can hold the
  // horizon too and are not looked at. Throws pg::PgError.
  std::optional<HorizonHolder> OldestHorizonHolder(std::int64_t threshold_ms);

  // --- Leader mode (relay --coordination leader) ---
  //
  // The rules of Store's leader mode (outbox/store.h: one lease row, table outbox_lease, a
  // fencing token that grows by one per term, a page read without claims, a settle that commits
  // only while its token is the lease's), with every time judged on the server's clock (now()):
  // a relay whose clock runs an hour ahead sees a live lease as live and does not take it
  // (issue 12). The token check and the lease renewal share one UPDATE of the lease row, whose
  // row lock a takeover needs too. The now_ms arguments are not used to judge anything; a
  // LeaderLease returned carries the server's times moved into the caller's clock (until_ms =
  // now_ms + the ms the server says are left; acquired_at_ms = now_ms - the term's age; ReadLease
  // uses clock()), so LeaderLease::Live(now_ms) and "lease left" are the server's verdict on any
  // host. ResetSchema keeps the lease row (the token keeps growing across runs) and ends its term.
  //
  // ReadLease: the lease as it stands (read only, no lock); never held: owner "", token 0,
  // until_ms 0. Throws pg::PgError.
  LeaderLease ReadLease() override;
  // Takes the lease for owner for lease_ms (> 0) of the server's clock when it is free (never
  // held, released, or until <= now()). Reads first without a lock, so a standby polling a live
  // lease writes nothing; then checks again under the row lock (SELECT ... FOR UPDATE), so two
  // relays never both acquire one term. Acquired: token = previous + 1. Not acquired: the lease
  // is live (the same owner name included). Throws ConfigError for lease_ms <= 0, pg::PgError.
  LeaseAcquisition AcquireLease(const std::string& owner, std::int64_t lease_ms,
                                std::int64_t now_ms) override;
  // Extends term token's lease to the server's now() + lease_ms (never shortens it). Returns
  // false, writing nothing, when token is no longer the lease's token. A term that ran out
  // without a takeover is renewed. Throws ConfigError for lease_ms <= 0, pg::PgError.
  bool RenewLease(std::int64_t token, std::int64_t lease_ms, std::int64_t now_ms) override;
  // Ends term token at once (until = -infinity, token kept). Returns false when token is no
  // longer current. Throws pg::PgError.
  bool ReleaseLease(std::int64_t token) override;
  // Up to request.limit rows a leader may send now, in id order: unpublished, not parked, next
  // attempt due on the server's clock, id above after_id (any, when it is empty) and at or below
  // up_to_id, not under a live claim of a claims-mode relay; with block_key, no earlier
  // unpublished row of the same aggregate (as Store::ReadPage). request.now_ms is ignored. Read
  // only. Ids commit out of order on PostgreSQL: a row committed behind the caller's cursor is
  // returned once the caller reads from the first row again (no after_id: the relay's next pass,
  // when it has caught up); claims mode has no cursor and no such delay (README "PostgreSQL").
  // With block_key, a first statement reads the rows in id order while that fills the page;
  // once it has stepped over PageRequest::scan_budget unpublished rows it could not take
  // (default a quarter page, at least 64), a second one takes the page from each aggregate's
  // oldest unpublished row instead (a loose index scan of outbox_pending_by_aggregate, one seek
  // per aggregate: the same rows, on that statement's snapshot), unless more aggregates than
  // its cap have unpublished rows (scan_budget again; default two pages, at least 128): then
  // that statement reads the page row by row without a budget, and so do the next 16 block-key
  // pages with no larger cap, in one statement each. After a page from the heads, a page whose
  // cap is at least the aggregates that walk saw starts with the heads. Otherwise a backlog of
  // a few hot aggregates (at most one row each per page) would be read whole for every page, in
  // time growing with the square of its size. request.in_flight is ignored. Throws pg::PgError.
  std::vector<OutboxRow> ReadPage(const PageRequest& request) override;
  // How many ReadPage calls took their page from the aggregates' heads (for tests and the
  // profile).
  std::int64_t pages_by_heads() const noexcept { return pages_by_heads_; }
  // Settles a leader's batch in ONE transaction, only while token is the lease's token: renews
  // the lease to the server's now() + lease_ms (> 0), marks every acked id still unpublished
  // (one UPDATE over the ids), records failures as SettleBatch does (backoff on the server's
  // clock). Token no longer current: writes nothing, sets fenced_out, reports every id fenced.
  // An acked id already published is reported fenced. now_ms is ignored. Throws ConfigError for
  // lease_ms <= 0, pg::PgError (nothing written then).
  SettleReport SettleUnderLease(std::int64_t token, const std::vector<std::int64_t>& acked,
                                const std::vector<FailedDelivery>& failed,
                                const SettlePolicy& policy, std::int64_t now_ms,
                                std::int64_t lease_ms) override;

  // No WAL file of the lab's on PostgreSQL (OutboxStore): nothing done, -1 frames; 0 bytes.
  CheckpointReport CheckpointPassive() override { return CheckpointReport{}; }
  std::int64_t WalSizeBytes() const override { return 0; }

  Clock& clock() const noexcept override { return *clock_; }
  PgClaimMode mode() const noexcept { return mode_; }
  // The server process of this store's connection (pg_stat_activity.pid, PQbackendPID).
  int backend_pid() const noexcept { return PQbackendPID(connection_.get()); }
  // Sessions ReopenIfClosedWhileIdle opened again since this store was made (Reconnect after a
  // lost connection is not counted). Read it on the thread that uses the store, or after that
  // thread's work was collected.
  std::int64_t SessionsReopened() const noexcept override { return sessions_reopened_; }
  // The URL without its password, for messages.
  const std::string& display_url() const noexcept { return connection_.display_url(); }

 private:
  void Migrate();
  // pg_advisory_lock(kMigrationLockKey), waiting at most the session's lock_timeout (or
  // kMigrationLockWaitMs when it is 0). Throws pg::PgError "55P03" naming the key and the holder
  // (PID, application_name, state, from pg_locks and pg_stat_activity) with the
  // pg_terminate_backend hint when the wait ran out.
  void LockMigration();
  // "PID n application_name 'a' state 's' for n s; end that session or run ..." of the other
  // session holding kMigrationLockKey; empty when none does. Throws pg::PgError.
  std::string MigrationLockHolder();
  void UnlockMigration();
  // ResetSchema's body, under the schema lock.
  ResetCounts ResetLocked(const std::function<void(pg::Connection&)>& also);
  bool SchemaCurrent();  // every table of the schema exists

  void ReadWakeChannel();  // sets wake_channel_ from the outbox table's schema
  // Reconnect() when the session ended while it sat idle (pg::Connection::ClosedWhileIdle), so
  // the relay's next statement runs instead of failing on a closed socket. Called first by the
  // relay's per-batch and per-poll operations (claim, page, look, settle, lease): the relay's
  // second connection, which marks batches, is idle whenever the relay is, and a server or
  // pooler that ends idle sessions (idle_session_timeout) would otherwise fail the first mark
  // after every quiet spell, leaving that batch to be sent again. The session holds nothing
  // those operations need across statements: named statements are prepared again, the lease and
  // the claims are rows. Does nothing inside a transaction (ReadAtOneInstant's). Throws
  // pg::PgError (ConnectionLost true) when the new connection cannot be made.
  void ReopenIfClosedWhileIdle();
  Claim NaiveClaim(const ClaimRequest& request);  // PgClaimMode::kNaiveCursor's claim
  // With block key: whether this claim or look walks the aggregates' heads (see ClaimBatch), and
  // what the walk found (gave_up: more aggregates than its cap).
  bool WalkHeadsNow();
  void NoteHeadsWalk(bool gave_up);

  std::string url_;
  SystemClock system_clock_;  // used when no clock is given
  Clock* clock_;              // not owned
  PgClaimMode mode_;
  pg::Connection connection_;
  std::int64_t sessions_reopened_ = 0;  // by ReopenIfClosedWhileIdle
  int heads_walk_skips_ = 0;  // claims and looks left that skip the heads walk (it gave up)
  // ReadPage: the block-key pages left that are read row by row (a walk of the heads gave up).
  int page_heads_skips_ = 0;
  std::int64_t page_heads_skip_cap_ = 0;  // ... those with a cap up to the one that gave up
  // ReadPage: the aggregates the last walk of the heads saw, when it saw them all.
  std::optional<std::int64_t> heads_last_seen_;
  std::int64_t pages_by_heads_ = 0;  // ReadPage: pages taken from the heads
  std::string wake_channel_;  // WakeChannel of the outbox table's schema, read once at open
};

}  // namespace outbox
