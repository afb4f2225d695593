// Store: the outbox table in an SQLite file, and the only code that reads or
// writes the outbox tables (outbox, outbox_fence, outbox_archive,
// outbox_lease).
//
// The business transaction and the outbox insert share one local transaction
// (chapter 7.1, "同库同事务"): the caller begins it with BeginWrite(), runs its
// own business SQL on txn.connection(), adds the event with
// Enqueue(txn, event) and commits both or neither. The caller's SQL touches
// its own tables only; everything on the outbox tables is a Store operation.
// The store owns its connection; one Store per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "outbox/claim.h"
#include "outbox/clock.h"
#include "outbox/event.h"
#include "outbox/lease.h"
#include "outbox/outbox_store.h"
#include "outbox/sqlite/connection.h"
#include "outbox/status.h"

namespace outbox {

// PRAGMA synchronous (https://www.sqlite.org/pragma.html#pragma_synchronous).
// A committed transaction survives kill -9 at every setting: the process dies,
// the OS keeps its writes. Only power loss or an OS crash can undo a commit,
// and in WAL mode only below kFull.
enum class Synchronous { kOff, kNormal, kFull, kExtra };

// Parses "off", "normal", "full", "extra" (case-sensitive). Throws ConfigError.
Synchronous ParseSynchronous(const std::string& text);

// How SettleBatch marks a batch's acknowledged ids.
enum class MarkMethod {
  kById,     // one UPDATE ... WHERE id = ? per acked id
  // one UPDATE ... WHERE id BETWEEN ? AND ? ... RETURNING id per run of
  // consecutive acked ids (a settled batch is mostly one run). Exact: a run
  // holds every id between its ends, so no row outside the acked set is marked.
  kByRange,
};

struct StoreOptions {
  Synchronous synchronous = Synchronous::kFull;
  // sqlite3_busy_timeout: how long a write waits for another writer's lock
  // before failing with SQLITE_BUSY, in ms.
  int busy_timeout_ms = 5000;
  // Where MarkPublished and PurgePublished read the time (published_at,
  // archived_at). Not owned; must outlive the Store. Null: the system clock.
  Clock* clock = nullptr;
  // How SettleBatch marks acknowledged rows (MarkMethod). The bench compares both.
  MarkMethod mark = MarkMethod::kByRange;
};

enum class OpenMode {
  kExisting,  // the file and schema must exist; nothing is created
  kCreate,    // create parent directories and the file if missing (reset)
  // The file and schema must exist; opened with SQLITE_OPEN_READONLY, so it
  // works on read-only media and on a file owned by another user. Every
  // write throws DbError (SQLITE_READONLY). See the constructor for WAL files.
  kReadOnly,
};

// What ResetSchema removed.
struct ResetCounts {
  std::int64_t outbox_rows = 0;  // rows of the table named outbox
  std::int64_t published = 0;    // of them, published (0 when not the lab's table)
  std::int64_t archived = 0;     // rows of outbox_archive
  bool lab_table = true;         // false: a table of another design was named outbox
};

// The schema version kept in PRAGMA user_version. 1 is the chapter's table;
// 2 adds the relay's columns (published_at, attempts, last_error,
// next_attempt_at, parked_at, claim_*) and the fencing-token counter.
// 3 adds claimed_at (when a claim was taken, for its age in status), gives created_at a default from the database clock (epoch ms) and rejects
// an INSERT or UPDATE whose created_at is not an integer epoch ms between
// 2000-01-01 and 2100-01-01 (README, "Writing to the outbox from your
// application"). Opening an older database migrates it in one transaction;
// rows that already break the contract are kept and reported by Status().
// 4 adds the nullable headers column (OutboxEvent::headers) to outbox and
// outbox_archive.
// 5 adds table outbox_lease: the one leader lease of relay --coordination
// leader (owner, fencing token, until), see AcquireLease, and the partial index
// outbox_failed_by_aggregate over unpublished rows with attempts > 0 (once
// ReadPage's hold-back test; it now reads outbox_pending_by_aggregate, as the claim does).
// 6 adds the nullable not_before column to outbox (delayed publish, OutboxEvent::not_before_ms):
// epoch ms compared with the store's Clock, the relay's process clock.
// 7 adds triggers that store a BLOB aggregate_id or event_id as TEXT of the same bytes, and
// casts the stored ones (schema.cc, kMigrateToV7: SQLite never compares a BLOB equal to TEXT).
inline constexpr int kSchemaVersion = 7;

// How a relay maps record keys to the partitions of one topic (OutboxStore::NotePartitionMapping).
struct PartitionMapping {
  std::string topic;
  std::string partitioner;      // librdkafka's `partitioner` property ("consistent_random", ...)
  std::int32_t partitions = 0;  // the topic's partition count when recorded; 0: not known
  std::int64_t noted_at_ms = 0; // epoch ms when recorded (the store's clock); ignored by Note
};

// One sqlite3_wal_checkpoint_v2 (Store::CheckpointPassive).
struct CheckpointReport {
  bool busy = false;          // another connection was checkpointing: nothing done
  std::int64_t wal_frames = -1;    // frames in the WAL after the call; -1 when busy
  std::int64_t checkpointed = -1;  // of those, copied into the database file; -1 when busy
};

struct PurgeReport {
  std::int64_t deleted = 0;   // published rows removed from outbox
  std::int64_t archived = 0;  // of those, copied to outbox_archive first
  std::int64_t batches = 0;
};

// Implements OutboxStore (outbox_store.h): the functions of the same name there override the
// interface's (a signature that drifted would leave Store abstract and fail to compile).
class Store : public OutboxStore {
 public:
  Backend backend() const noexcept override { return Backend::kSqlite; }

  // Opens the database at path in WAL mode with options applied.
  // An existing outbox of an older schema version is migrated (kSchemaVersion).
  // kExisting: throws SchemaMissingError when the file does not exist or has
  //   no outbox table (and then has created and changed nothing).
  // kCreate: creates missing parent directories; throws DbError with
  //   SQLITE_CANTOPEN when a directory or the file cannot be created.
  // kExisting and kCreate need to write: before opening, they throw DbError
  //   SQLITE_READONLY ("... read-only (Read-only file system) ...") when the
  //   file cannot be written by this process, and SQLITE_READONLY_DIRECTORY
  //   when there is no -wal file and the directory cannot be written (SQLite
  //   must create F-wal and F-shm there), so a writing command fails at once
  //   instead of at its first write.
  // kReadOnly: the command writes nothing. When this process can write the
  //   file it opens read-write as kExisting does (migrating an older schema;
  //   the last close checkpoints and removes -wal and -shm as usual) and then
  //   sets PRAGMA query_only. Otherwise it opens SQLITE_OPEN_READONLY. A WAL
  //   database needs its -wal and -shm files to exist or to be creatable
  //   (https://www.sqlite.org/wal.html, "Read-Only Databases"); after a clean
  //   close they are gone, so when SQLite cannot create them and no -wal file
  //   exists the file is reopened with immutable=1: the main file then holds
  //   every commit. immutable also turns off locking, right for read-only
  //   media; on a file owned by another user, a writer starting during the
  //   read could show it a torn file (SQLITE_CORRUPT, never a write). A -wal
  //   whose -shm cannot be opened or created throws DbError SQLITE_CANTOPEN
  //   (its commits cannot be read safely); an older schema on a read-only file
  //   throws DbError SQLITE_READONLY (it cannot be migrated).
  // All throw DbError: SQLITE_NOTADB for a file that is not SQLite,
  //   SQLITE_BUSY when another process holds a lock past the busy timeout,
  //   SQLITE_IOERR_SHMOPEN when the WAL's -shm file cannot be created; its
  //   message reads "open database 'F': <the problem> (SQLITE_NAME)", never
  //   the SQL that met the problem.
  Store(const std::string& path, const StoreOptions& options, OpenMode mode);
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Drops and recreates the outbox table and its partial index over
  // unpublished rows, in one transaction, and starts a new run: a fresh run
  // id (epoch ms and 32 random bits, "1764545856000-3f9a0c1b") replaces the
  // old one in table outbox_run. Drops whatever table is named outbox, the
  // lab's or not (a store opened kCreate on a foreign one). The claim-token
  // counter (outbox_fence) and the leader lease row stay: the new outbox's
  // ids start again at 1, so a relay settling rows it read before the reset
  // must match none of the new ones. No claim token is given twice, and the
  // lease's term ends with its token stepped past it (owner kResetLeaseOwner,
  // as PgStore::ResetSchema). Returns what it removed, counted in the same
  // transaction. also (may be empty): more work in that transaction, first
  // (the lab drops and creates its business table there: a writer that waited
  // for the lock then finds both tables new, never its loan in a table about
  // to be dropped and its event in the new outbox). Throws DbError, or what
  // also throws; nothing is dropped then.
  ResetCounts ResetSchema(const std::function<void(sqlite::Connection&)>& also = nullptr);
  // The run id of the last ResetSchema(). The lab sends it as the Kafka
  // header "run_id" on every record, so that a reader of a topic shared by
  // several databases (or by earlier resets of this one) counts only this
  // run's records (README, "Runs"). Empty for a database reset before run ids
  // existed (no outbox_run table). Throws DbError.
  std::string RunId();
  // OutboxStore (outbox/outbox_store.h). Throw DbError.
  void NoteBrokerIncarnation(const std::string& incarnation) override;
  std::vector<std::string> BrokerIncarnations() override;
  void NotePartitionMapping(const PartitionMapping& mapping) override;
  std::optional<PartitionMapping> ReadPartitionMapping(const std::string& topic) override;
  // Broker outages (outbox_store.h), in src/outbox/store_outage.cc. Throw DbError.
  void NoteOutage(const BrokerOutage& outage) override;
  bool ClearOutage() override;
  std::optional<BrokerOutage> ReadOutage() override;
  // True when the outbox table exists.
  bool HasSchema();

  // Begins a write transaction (BEGIN IMMEDIATE) on the store's database for
  // the caller's business rows and Enqueue. Commit with txn.Commit(); the
  // destructor rolls back otherwise. Throws DbError (SQLITE_BUSY past the busy
  // timeout).
  sqlite::Transaction BeginWrite();
  // Begins a read transaction: the caller's reads of its own tables through
  // txn.connection() and Snapshot(txn) see one and the same snapshot.
  // Throws DbError.
  sqlite::ReadTransaction BeginRead();

  // Inserts event into the outbox inside txn, the caller's transaction from
  // BeginWrite(), after (or before) the business insert: both commit together
  // or neither does. Returns the new row id.
  // event.not_before_ms is written as it is; event.delay_ms > 0 writes not_before =
  // the store's Clock (EpochMs) + delay_ms, the clock the relay compares it with.
  // Throws ConfigError for a delay DelayErrorMessage refuses (below 0, above
  // kMaxDelayMs, or beside not_before_ms).
  // Throws ConfigError when txn is not on this store's connection; DbError,
  // e.g. SQLITE_CONSTRAINT_UNIQUE when event_id already exists (the caller's
  // transaction must then roll back).
  std::int64_t Enqueue(sqlite::Transaction& txn, const OutboxEvent& event);

  // Inserts count events, make_event(0) .. make_event(count - 1), in ONE
  // transaction, then checkpoints the WAL (wal_checkpoint(TRUNCATE)) so
  // later work starts from an empty log. With published, every row is
  // inserted published with published_at = its created_at_ms. For loading
  // backlogs and history (bench); count >= 0. Returns the rows inserted.
  // Throws DbError (e.g. SQLITE_CONSTRAINT_UNIQUE on a repeated event_id: then
  // nothing is inserted).
  std::int64_t BulkLoad(std::int64_t count,
                        const std::function<OutboxEvent(std::int64_t)>& make_event,
                        bool published);

  // The id the next Enqueue will get when no other writer comes first: one
  // past the highest id ever assigned (sqlite_sequence), so numbering
  // continues after purges and rolled-back inserts never reuse it. Throws DbError.
  std::int64_t NextId();

  // Every outbox and archive row, read in txn (from BeginRead()), so that the
  // caller's own reads in txn describe the same instant. Throws DbError.
  OutboxSnapshot Snapshot(sqlite::ReadTransaction& txn);
  // The same in a read transaction of its own. Throws DbError.
  OutboxSnapshot Snapshot();

  // PRAGMA integrity_check (https://www.sqlite.org/pragma.html#pragma_integrity_check)
  // over the whole file: "ok", or its findings (after a power cut with a torn
  // sector, say) on one line, joined with "; ", as are the line breaks within
  // a finding. Throws DbError when the check itself cannot run.
  std::string IntegrityCheck();
  // PRAGMA quick_check (the same page and structure checks, without comparing indexes to
  // their tables: O(N) instead of O(N log N)): "ok" or its findings on one line, as
  // IntegrityCheck's. Throws DbError when the check itself cannot run (SQLITE_CORRUPT when
  // the damage stops it).
  std::string QuickCheck();

  // Unpublished rows with id > *after_id (every id when it is empty, 0 and negative ones
  // included), in id order, at most limit rows (keyset pagination through the partial index).
  // Throws DbError.
  std::vector<OutboxRow> FetchUnpublished(std::optional<std::int64_t> after_id,
                                          std::int64_t limit);

  // Marks row id published (published_at = clock().EpochMs()) in its own transaction (chapter 7.1, decision 3:
  // the mark is a separate transaction after the broker's ack). Returns false
  // when the row does not exist or was already published. Throws DbError.
  bool MarkPublished(std::int64_t id);

  // Marks every row of ids published (published_at = clock().EpochMs()) in
  // ONE transaction, without claims or tokens: what a hand-written batched
  // loop does after its flush (the bench's comparison, lab/batched_loop.h).
  // Returns the rows marked (ids missing or already published are skipped).
  // Throws DbError.
  std::int64_t MarkPublished(const std::vector<std::int64_t>& ids);

  OutboxCounts Count();
  std::vector<std::string> EventTypes() override;

  // published_at - created_at of every published row with id > after_id, in
  // id order, ms: each row's commit-to-mark delay (created_at is taken just
  // before its transaction begins, published_at when the relay settles its
  // ack), for the bench's latency figure. Rows published before schema 2
  // (no published_at) are left out. Read only. Throws DbError.
  std::vector<std::int64_t> PublishDelaysMs(std::int64_t after_id);

  // --- The production relay (outbox-lab relay) ---

  // Claims up to request.limit claimable rows in one BEGIN IMMEDIATE
  // transaction: unpublished, not parked, next attempt due, no unexpired
  // claim. SQLite has no SELECT ... FOR UPDATE SKIP LOCKED (chapter 7.1's
  // advice); the write lock of BEGIN IMMEDIATE plus UPDATE ... RETURNING gives
  // the same effect: two relays never claim the same row while a lease holds.
  // An empty Claim means nothing is claimable. Throws DbError.
  Claim ClaimBatch(const ClaimRequest& request);

  // True when ClaimBatch(request) would claim a row. Read only, so an idle
  // relay writes nothing. Throws DbError.
  bool HasClaimable(const ClaimRequest& request);

  // Unpublished, unparked rows that time alone will make claimable: in
  // backoff or under an unexpired claim at now_ms. Throws DbError.
  std::int64_t WaitingCount(std::int64_t now_ms);

  // One read transaction around reads (OutboxStore::ReadAtOneInstant): one snapshot for all of
  // them. Throws DbError when BEGIN fails; reads' own exceptions pass through (rolled back).
  void ReadAtOneInstant(const std::function<void()>& reads) override;

  // Rows not yet published and not parked (claimable, claimed or in backoff).
  std::int64_t PendingCount();

  // Rows not yet published and parked, by the partial index outbox_unpublished (the rows left
  // to send), not by a scan of the table. Throws DbError.
  std::int64_t ParkedCount() override;

  // The rows that wait on a backoff at now_ms (epoch ms) and not under a
  // claim, and when the first is due. Read only. Throws DbError.
  BackoffWait Backoffs(std::int64_t now_ms);

  // Settles a claimed batch in ONE transaction: marks every acked id
  // published (published_at = now_ms) and records every failure (attempts+1,
  // last_error, next_attempt_at = now + min(base * 2^(attempts-1), cap), or
  // parked_at = now once attempts reach policy.max_attempts or the failure
  // says park_now). Applies only to
  // rows still holding token: a row whose lease expired and was claimed again
  // by another relay is left alone and counted as fenced. Throws DbError.
  SettleReport SettleBatch(std::int64_t token, const std::vector<std::int64_t>& acked,
                           const std::vector<FailedDelivery>& failed, const SettlePolicy& policy,
                           std::int64_t now_ms);

  // Owners holding unexpired claims at now_ms (epoch ms), by owner name. Read
  // only. Throws DbError.
  std::vector<ClaimOwner> ClaimOwners(std::int64_t now_ms);

  // Releases the claims of owner with a fencing token up to up_to_token,
  // expired or not, without recording an attempt: for a relay known to be
  // dead (its process no longer exists), so its rows need not wait out the
  // lease. Pass the max_token read with ClaimOwners: only the claims the
  // caller saw are released, and a claim taken since (the owner is alive
  // after all) is not. The caller must be sure: a live owner's settle is then
  // fenced out and its in-flight rows may be sent twice (at-least-once, never
  // lost). Returns the rows released. Throws DbError.
  std::int64_t ReleaseClaimsOf(const std::string& owner, std::int64_t up_to_token);

  // Releases a claim without recording anything (e.g. on shutdown before
  // producing). Throws DbError.
  void ReleaseClaim(std::int64_t token);

  // --- Leader mode (relay --coordination leader) ---
  //
  // One relay at a time holds the leader lease (table outbox_lease, one row)
  // and sends every row; the others stand by. The lease carries a fencing
  // token that only grows: every acquisition (a first one, or a takeover
  // after the lease ran out or was released) sets it to the previous token
  // + 1, and a renewal keeps it. The leader reads pages without writing onto
  // rows (ReadPage); its settle applies only while its token is still the
  // lease's token, checked in the settle's own transaction
  // (SettleUnderLease). A leader paused past its lease (SIGSTOP) is thus
  // fenced out once another relay took over: the rows it sent stay
  // unpublished and the new leader sends them again (duplicates, never
  // losses). The fencing rule is Kleppmann's fencing token ("How to do
  // distributed locking", 2016), checked by the database that holds the rows.
  // All times are epoch ms from the caller (the relay's Clock).

  // Reads the lease as it is (read only, no lock held after the call). A
  // database never led has owner "", token 0, until_ms 0. Throws DbError.
  LeaderLease ReadLease();

  // Takes the lease for owner for lease_ms (> 0) from now_ms when it is free:
  // never held, released, or run out (until_ms <= now_ms). Reads first and
  // writes only when it is free, so a standby polling a live lease writes
  // nothing; the write (BEGIN IMMEDIATE) checks again under the lock, so two
  // relays never both acquire one term. Acquired: token = previous token + 1,
  // until_ms = now_ms + lease_ms, acquired_at_ms = now_ms. Not acquired: the
  // lease is live under some owner (the same owner name included: a second
  // process with one name waits too). Throws ConfigError for lease_ms <= 0,
  // DbError (SQLITE_BUSY past the busy timeout).
  LeaseAcquisition AcquireLease(const std::string& owner, std::int64_t lease_ms,
                                std::int64_t now_ms);

  // Extends the lease of term token to now_ms + lease_ms (never shortens it).
  // Returns false, writing nothing, when token is no longer the lease's token
  // (another relay took over): the caller is no longer the leader. A term
  // whose lease ran out without a takeover is still current and is renewed:
  // nobody else sent under a newer token meanwhile. Throws ConfigError for
  // lease_ms <= 0, DbError.
  bool RenewLease(std::int64_t token, std::int64_t lease_ms, std::int64_t now_ms);

  // Ends term token at once (until_ms = 0, token kept), so a standby takes
  // over at its next poll instead of after the lease: for a leader stopping
  // cleanly with nothing in flight. Returns false when token is no longer
  // current (nothing written). Throws DbError.
  bool ReleaseLease(std::int64_t token);

  // Up to request.limit rows a leader may send now, in id order: unpublished,
  // not parked, next attempt due (next_attempt_at <= now_ms), id above after_id
  // (any, when it is empty) and at or below up_to_id, not under an unexpired
  // claim of a claims-mode relay; with request.block_key, also no earlier
  // unpublished row of the same aggregate (in flight, failed, parked, or merely
  // not sent yet): the rule of ClaimBatch's block_key, so a page holds at most
  // one row per aggregate and a row is read only once every earlier row of its
  // aggregate is published. The caller skips the rows it has in flight. A later
  // row of an aggregate in flight is not sent: if the earlier row then failed
  // for good, the later one, already acked, would precede its retry in the
  // topic. Read only: writes nothing onto rows. Throws DbError. When every
  // unpublished row at or below after_id is in request.in_flight (one index
  // probe per gap between their runs of ids; none without after_id), the
  // hold-back is decided once for the page, in one snapshot: the aggregates of
  // those rows and of every unpublished row read past after_id hold back their
  // later rows; otherwise one probe per row. Once a page has stepped over
  // PageRequest::scan_budget rows it could not take, it is taken from each
  // aggregate's oldest unpublished row instead (ReadPageByHeads, the same rows),
  // unless too many aggregates have unpublished rows: otherwise a backlog of a
  // few hot aggregates would be read whole for every page (at most one row per
  // aggregate), in time growing with the square of its size.
  std::vector<OutboxRow> ReadPage(const PageRequest& request);
  // How many ReadPage calls decided the hold-back once for the page, and how
  // many took the page from the aggregates' oldest rows (for tests and the profile).
  std::int64_t pages_held_back_once() const noexcept { return pages_held_back_once_; }
  std::int64_t pages_by_heads() const noexcept { return pages_by_heads_; }

  // Settles a leader's batch in ONE transaction, only while token is the
  // lease's token: marks every acked id that is still unpublished
  // (published_at = now_ms), records every failure as SettleBatch does
  // (attempts + 1, backoff, parking after policy.max_attempts or park_now),
  // and renews the lease to now_ms + lease_ms (> 0). When token is no longer
  // current, writes nothing, sets fenced_out and reports every id fenced.
  // An acked id already published (by another writer) is reported fenced.
  // Throws ConfigError for lease_ms <= 0, DbError (nothing written then).
  SettleReport SettleUnderLease(std::int64_t token, const std::vector<std::int64_t>& acked,
                                const std::vector<FailedDelivery>& failed,
                                const SettlePolicy& policy, std::int64_t now_ms,
                                std::int64_t lease_ms);

  // Counts for status/metrics at now_ms. Throws DbError.
  OutboxStatus Status(std::int64_t now_ms);

  // Parked and failing rows at now_ms (epoch ms), at most limit (> 0) listed,
  // for an operator deciding what to unpark. Read only. Throws ConfigError
  // for limit <= 0, DbError.
  TroubledRows ListTroubled(std::int64_t now_ms, std::int64_t limit);

  // See OutboxStore::Stalls. Throws DbError.
  std::vector<Stall> Stalls(std::int64_t limit);

  // Makes a parked row claimable again (attempts reset to 0). Returns false
  // when id does not exist or is not parked. Throws DbError.
  bool Unpark(std::int64_t id);
  // Unparks every parked row; returns how many. Throws DbError.
  std::int64_t UnparkAll();

  // Throws ConfigError for batch_size <= 0.
  // Deletes published rows with published_at (created_at for rows published
  // before schema 2) older than cutoff_ms, batch_size rows per transaction so
  // writers are never blocked for long; with archive, copies them into
  // outbox_archive in the same transaction (archived_at = clock().EpochMs()). Never touches unpublished or
  // parked rows. Checkpoints the WAL afterwards (wal_checkpoint(TRUNCATE)) so
  // it does not grow with purged history. Throws DbError.
  PurgeReport PurgePublished(std::int64_t cutoff_ms, std::int64_t batch_size, bool archive);
  // OutboxStore's purge: PurgePublished(clock().EpochMs() - older_than_ms, ...). Throws
  // ConfigError for older_than_ms < 0, then as PurgePublished.
  PurgeReport PurgeOlderThan(std::int64_t older_than_ms, std::int64_t batch_size,
                             bool archive) override;

  // Copies what it can of the WAL into the database file without waiting for
  // any reader or writer (SQLITE_CHECKPOINT_PASSIVE,
  // https://www.sqlite.org/c3ref/wal_checkpoint_v2.html). The relay runs it
  // after each settle, so that the checkpoint SQLite would otherwise run
  // inside some writer's COMMIT once the WAL passes 1,000 pages
  // (wal_autocheckpoint) is mostly done already; frames still read by a
  // reader stay in the WAL. Needs no write lock; never throws SQLITE_BUSY:
  // returns busy = true instead. Throws DbError on I/O errors.
  CheckpointReport CheckpointPassive();

  // The size of the -wal file next to the database, bytes; 0 when there is
  // none (after a clean close, or in rollback-journal mode). A WAL is reused
  // from its start after a complete checkpoint, not shrunk, so this is its
  // high-water mark since the last TRUNCATE checkpoint (BulkLoad,
  // PurgePublished) or the last close. Throws SystemError when the file
  // exists but cannot be examined.
  std::int64_t WalSizeBytes() const;

  // The database file this store opened.
  const std::string& path() const noexcept { return connection_.path(); }
  // True when opened kReadOnly on a file this process cannot write and reopened with
  // immutable=1 (see the constructor).
  bool immutable() const noexcept { return immutable_; }
  // The clock of StoreOptions::clock, or the system clock. Relays use it
  // unless given their own.
  Clock& clock() const noexcept { return *clock_; }

 private:
  void Open(const StoreOptions& options, OpenMode mode);  // the constructor's work past the open
  void OpenReadOnly(const StoreOptions& options);       // Open for kReadOnly
  bool HasColumn(std::string_view table, std::string_view column);
  // The table named outbox has schema 1's columns (whatever its version).
  bool IsLabOutboxTable();
  // Throws SchemaMissingError naming the columns a foreign outbox table lacks.
  [[noreturn]] void ThrowForeignOutboxTable();
  void Migrate();
  void MigrateToV2();
  void MigrateToV3();
  void MigrateToV4();
  void MigrateToV5();
  void MigrateToV6();
  void MigrateToV7();
  // ReadPage with block_key checked in SQL, one probe per row.
  std::vector<OutboxRow> ReadPagePerRow(const PageRequest& request);
  // ReadPage's page by the block_key rule from the aggregates' heads: the sendable rows among
  // each aggregate's oldest unpublished row, above after_id (any, when empty) and at or below
  // up_to_id, in id order, at most limit. Costs two index seeks per aggregate with unpublished
  // rows and one look-up per head tried; nullopt (nothing read past the count) when more than
  // max_aggregates aggregates have unpublished rows. Run inside ReadPage's snapshot. Throws
  // DbError.
  std::optional<std::vector<OutboxRow>> ReadPageByHeads(const PageRequest& request,
                                                        std::int64_t max_aggregates);
  // ReadPage's reads in id order past the scan budget: ReadPageByHeads, unless it found too
  // many aggregates within the last kPagesWithoutHeads pages (counted down here).
  std::optional<std::vector<OutboxRow>> TryPageByHeads(const PageRequest& request);

  SystemClock system_clock_;  // used when StoreOptions::clock is null
  Clock* clock_;              // not owned
  MarkMethod mark_;           // StoreOptions::mark
  sqlite::Connection connection_;
  bool immutable_ = false;
  std::int64_t pages_held_back_once_ = 0;  // ReadPage
  // ReadPage's set of held-back aggregates is built in this buffer, kept from page to page: its
  // nodes then cost no malloc and free each (about 3 a row, in-flight rows included).
  std::vector<std::byte> page_arena_;
  std::int64_t pages_by_heads_ = 0;        // ReadPageByHeads
  int pages_without_heads_ = 0;            // TryPageByHeads: pages left before it tries again
};

}  // namespace outbox
