// OutboxStore: the outbox as the relay, the CLI and the lab's checker see it, whatever database
// holds it (issue 12). Two implementations:
//   - Store (outbox/store.h): an SQLite file, the lab's default;
//   - PgStore (outbox/pg_store.h): a PostgreSQL server through libpq.
// The choice by the --db value is OpenStore (outbox/open_store.h): a path is SQLite, a
// postgresql:// or postgres:// URL is PostgreSQL, another URL scheme is refused.
//
// The value types below (Claim, ClaimRequest, ...) are defined in outbox/claim.h, lease.h and
// status.h; include outbox/store.h or pg_store.h (both include them) to call these functions. The business write (BeginWrite, Enqueue) is not here:
// its transaction belongs to one database's client library, so each implementation offers its own.
//
// An implementation owns one connection: one OutboxStore per thread. Errors are the
// implementation's: DbError (SQLite, with the SQLite result code) or pg::PgError (PostgreSQL, with
// the SQLSTATE). Times given as now_ms are epoch ms of the caller's clock; PgStore judges nothing
// by them and reads the server's clock (now()), so relays on hosts whose clocks disagree still
// agree on leases and backoffs (issue 12); it uses now_ms only to give back the instants it
// returns (a lease's until_ms, a backoff's first_due_ms) in the caller's clock.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "outbox/broker_outage.h"
#include "outbox/clock.h"
#include "outbox/event.h"

namespace outbox {

struct Claim;
struct ClaimRequest;
struct FailedDelivery;
struct SettlePolicy;
struct SettleReport;
struct ClaimOwner;
struct BackoffWait;
struct OutboxStatus;
struct OutboxCounts;
struct OutboxSnapshot;
struct LeaderLease;
struct PartitionMapping;
struct LeaseAcquisition;
struct PageRequest;
struct CheckpointReport;
struct TroubledRows;
struct Stall;
struct PurgeReport;

// Which database an OutboxStore talks to.
enum class Backend { kSqlite, kPostgres };

class OutboxStore {
 public:
  virtual ~OutboxStore() = default;

  virtual Backend backend() const noexcept = 0;

  // The run id of the last reset ("1764545856000-3f9a0c1b": epoch ms and 32 random bits), sent
  // as the Kafka header "run_id" so check counts only this run's records (README, "Runs").
  // Empty for an SQLite file reset before run ids existed.
  virtual std::string RunId() = 0;

  // Notes that this run's publishes go to broker incarnation (an opaque id from the lab, e.g.
  // "embedded:3f9a0c1b5d2e4f60" for an in-memory broker's start or "cluster:<id>" for a Kafka
  // cluster), so that a checker can tell a broker that lost its records in a restart from an
  // event lost by the relay. Idempotent; kept until the next reset (table outbox_broker, created
  // on first use). Throws the implementation's error.
  virtual void NoteBrokerIncarnation(const std::string& incarnation) = 0;
  // The incarnations noted since the last reset, in the order first noted (empty: none).
  virtual std::vector<std::string> BrokerIncarnations() = 0;

  // Records how the relay maps keys to partitions of mapping.topic (its librdkafka partitioner and
  // the topic's partition count; 0: not known), replacing what was recorded for that topic. Kept
  // until the next reset (table outbox_partitioning, created on first use). A relay compares it
  // at start: another partitioner or partition count sends one aggregate's later records to
  // another partition, where they lose their order (README, "Partitions"). Throws the
  // implementation's error.
  virtual void NotePartitionMapping(const PartitionMapping& mapping) = 0;
  // What NotePartitionMapping recorded for topic since the last reset; nullopt: nothing.
  virtual std::optional<PartitionMapping> ReadPartitionMapping(const std::string& topic) = 0;

  // The id the next enqueue gets when no other writer comes first (one past the highest id ever
  // assigned; ids never go back).
  virtual std::int64_t NextId() = 0;

  // Rows in the outbox table: total, published, unpublished (archived rows excluded).
  virtual OutboxCounts Count() = 0;

  // Every outbox, archive and purged row in id order, read in one transaction (purged rows:
  // id, event id and aggregate only, published, SnapshotRow::purged).
  virtual OutboxSnapshot Snapshot() = 0;

  // The distinct event types of the outbox and archive rows, sorted (byte order): the topics a
  // --topic-template run used are these, filled in (TopicTemplate::Render). Purged rows keep
  // no event type and add none.
  virtual std::vector<std::string> EventTypes() = 0;

  // Unpublished rows with id > *after_id (every id when it is empty, 0 and negative ones
  // included: outbox/id_range.h) in id order, at most limit (> 0) rows: the chapter's per-row
  // relay (publish). No claim is taken.
  virtual std::vector<OutboxRow> FetchUnpublished(std::optional<std::int64_t> after_id,
                                                  std::int64_t limit) = 0;

  // Marks row id published in its own transaction (chapter 7.1, decision 3: the mark follows the
  // broker's ack). Returns false when the row does not exist or was already published.
  virtual bool MarkPublished(std::int64_t id) = 0;

  // --- The production relay: claims with leases and fencing tokens ---

  // Claims up to request.limit claimable rows (unpublished, not parked, backoff over, no live
  // lease) for request.lease_ms, in ONE short transaction; two relays never claim one row while a
  // lease holds. Rows come back in id order. Empty: nothing claimable.
  virtual Claim ClaimBatch(const ClaimRequest& request) = 0;

  // True when ClaimBatch(request) would claim a row now. Read only.
  virtual bool HasClaimable(const ClaimRequest& request) = 0;

  // Unpublished, unparked rows that time alone will make claimable (in backoff or under a live
  // lease) at now_ms. Read only.
  virtual std::int64_t WaitingCount(std::int64_t now_ms) = 0;

  // Rows not yet published and not parked.
  virtual std::int64_t PendingCount() = 0;

  // Rows not yet published and parked: Status(now).parked, without Status's scan of every row
  // (a relay asks it once at the end; on SQLite, Status read all 200,000 published rows of a
  // drained backlog, ~0.5 s, where this reads the unpublished rows' index). Read only.
  virtual std::int64_t ParkedCount() = 0;

  // Runs reads (HasClaimable, WaitingCount, ReadPage, ...) at ONE instant: every "now" they
  // compare against, and the rows they see. A caller asking "nothing claimable, and nothing
  // waiting?" in two reads needs both. At two nows, a row whose backoff ends in between is
  // neither claimable at the first nor waiting at the second. At two snapshots, another relay's
  // settle committed in between (its claimed row published, the claim gone) leaves the row it
  // held back neither claimable at the first (held back) nor waiting at the second. Either way
  // the row looks gone and relay --until-empty would stop with it pending. The SQLite Store takes
  // every now from the caller's now_ms and runs reads in one read transaction (one snapshot in WAL
  // mode); PgStore runs them in one REPEATABLE READ transaction: now() is its start (PostgreSQL
  // docs, "Current Date/Time") and every statement sees the snapshot of its first ("Transaction
  // Isolation": "all statements of the current transaction can only see rows committed before
  // the first query"). reads' own exceptions pass through; the stores also throw DbError or
  // pg::PgError when BEGIN or COMMIT fails.
  virtual void ReadAtOneInstant(const std::function<void()>& reads) { reads(); }

  // Rows waiting on a backoff (not under a claim) at now_ms, and when the first is due.
  virtual BackoffWait Backoffs(std::int64_t now_ms) = 0;

  // Settles a claimed batch in ONE transaction: marks acked rows published, records failures
  // (backoff min(base * 2^(attempts-1), cap); parked at policy.max_attempts or park_now), only for
  // rows token still owns; rows claimed since by another relay are counted fenced, untouched.
  virtual SettleReport SettleBatch(std::int64_t token, const std::vector<std::int64_t>& acked,
                                   const std::vector<FailedDelivery>& failed,
                                   const SettlePolicy& policy, std::int64_t now_ms) = 0;

  // Owners of live claims at now_ms, by owner name ("" for claims with no owner: another
  // program's claim columns). Read only.
  virtual std::vector<ClaimOwner> ClaimOwners(std::int64_t now_ms) = 0;

  // Releases the claims of owner (a relay known dead) with a token up to up_to_token (its
  // ClaimOwner::max_token as read), without recording an attempt: a claim taken after that read
  // proves the owner alive and is left alone. Returns the rows released.
  virtual std::int64_t ReleaseClaimsOf(const std::string& owner, std::int64_t up_to_token) = 0;

  // Counts for status and metrics at now_ms.
  virtual OutboxStatus Status(std::int64_t now_ms) = 0;

  // --- Broker outages (outbox/broker_outage.h): written by the relay, read by status ---
  //
  // One record per database and run (table outbox_outage, created on first use; a reset starts
  // a new run, and a record of an older run is never read). Store: src/outbox/store_outage.cc;
  // PgStore: src/outbox/pg_store_outage.cc. All throw the implementation's error.
  //
  // Records outage as the current one: its cause, owner, noted_at_ms and retry_at_ms replace
  // the recorded ones; since_ms is kept when an outage is already recorded (several relays
  // note one outage), else outage.since_ms. One short transaction.
  virtual void NoteOutage(const BrokerOutage& outage) = 0;
  // Removes the record (delivery resumed). Returns true when there was one. Writes nothing when
  // the table does not exist.
  virtual bool ClearOutage() = 0;
  // The recorded outage of this run; nullopt when none (or no table). Read only: works on a
  // store opened OpenMode::kReadOnly.
  virtual std::optional<BrokerOutage> ReadOutage() = 0;

  // --- Leader mode (relay --coordination leader) ---
  //
  // Store implements these as outbox/store.h documents (table outbox_lease, a fencing token that
  // only grows, the settle fenced by it), on the caller's now_ms. PgStore implements the same
  // rules on the server's clock (outbox/pg_store.h, "Leader mode"): its now_ms arguments judge
  // nothing, and the LeaderLease it returns carries the server's times moved into the caller's
  // clock, so Live(now_ms) is the server's verdict.
  virtual LeaderLease ReadLease() = 0;
  virtual LeaseAcquisition AcquireLease(const std::string& owner, std::int64_t lease_ms,
                                        std::int64_t now_ms) = 0;
  virtual bool RenewLease(std::int64_t token, std::int64_t lease_ms, std::int64_t now_ms) = 0;
  virtual bool ReleaseLease(std::int64_t token) = 0;
  virtual std::vector<OutboxRow> ReadPage(const PageRequest& request) = 0;
  virtual SettleReport SettleUnderLease(std::int64_t token, const std::vector<std::int64_t>& acked,
                                        const std::vector<FailedDelivery>& failed,
                                        const SettlePolicy& policy, std::int64_t now_ms,
                                        std::int64_t lease_ms) = 0;

  // --- The SQLite write-ahead log (the relay's passive checkpoint, status wal-bytes) ---
  //
  // Store: sqlite3_wal_checkpoint_v2(PASSIVE) and the size of the -wal file (outbox/store.h).
  // PgStore: the server's WAL is not a file next to --db and not the lab's to checkpoint (the
  // server's checkpointer runs on its own), so CheckpointPassive does nothing and returns a
  // report with busy false and wal_frames/checkpointed -1 (not measured), and WalSizeBytes
  // returns 0 (status says it is not measured there). Neither throws on PostgreSQL.
  virtual CheckpointReport CheckpointPassive() = 0;
  virtual std::int64_t WalSizeBytes() const = 0;

  // --- The operator's commands: parked, unpark, purge (README, "Parked rows" and "Purge") ---

  // Parked rows and rows failing in backoff (unpublished, attempts > 0): counts over all of them
  // and the first limit (> 0) rows, parked first, then in id order, for an operator deciding
  // what to unpark. now_ms: the caller's clock, epoch ms. Store measures age_ms and
  // next_attempt_at_ms against it; PgStore measures both on the server's clock (now()) and gives
  // next_attempt_at_ms as now_ms plus the server's time left, so `parked` shows the right wait
  // whatever the skew between the two hosts. Read only. Throws ConfigError for limit <= 0.
  virtual TroubledRows ListTroubled(std::int64_t now_ms, std::int64_t limit) = 0;

  // Up to limit parked rows that hold back later pending rows of their aggregate (each the
  // oldest unpublished row of its aggregate), in id order: what a block-key relay cannot send
  // until they are unparked. Read only.
  virtual std::vector<Stall> Stalls(std::int64_t limit) = 0;

  // Makes parked row id claimable again at once (not parked, attempts 0, no backoff; last_error
  // kept). Returns false when id does not exist, is published, or is not parked.
  virtual bool Unpark(std::int64_t id) = 0;
  // Unparks every parked row in one transaction; returns how many.
  virtual std::int64_t UnparkAll() = 0;

  // Deletes the published rows published more than older_than_ms (>= 0, ms) ago (published_at;
  // created_at for SQLite rows published before schema 2), batch_size (> 0) rows per
  // transaction so writers are never held for long; with archive, each batch first copies its
  // rows into outbox_archive in the same transaction; without, it keeps each row's id, event id
  // and aggregate in outbox_purged (same transaction), so Snapshot() still lists the event as
  // published and a checker never calls its record a phantom. Never touches an unpublished or parked
  // row. The cutoff is fixed once, at the start: Store reads clock(); PgStore the server's now(),
  // the clock that stamped published_at there. Batches committed before an error stay
  // committed: the error's message says how many. Failpoint purge.mid_batch fires in each batch
  // before its commit. Store then checkpoints its WAL (TRUNCATE); on PostgreSQL the server's
  // autovacuum reclaims the space. Throws ConfigError for older_than_ms < 0 or batch_size <= 0,
  // FailpointError.
  virtual PurgeReport PurgeOlderThan(std::int64_t older_than_ms, std::int64_t batch_size,
                                     bool archive) = 0;

  // The clock relays and writers read unless given their own (never the lease clock on
  // PostgreSQL: that is the server's).
  virtual Clock& clock() const noexcept = 0;

  // True when e, thrown by one of these functions, means the connection to a database server is
  // gone (the server crashed or restarted) and Reconnect() may help. Always false for an SQLite
  // file: there is no connection to lose.
  virtual bool ConnectionLost(const std::exception& /*e*/) const noexcept { return false; }
  // Opens a new connection in place of a lost one. Throws what the connect throws (while the
  // server is still down, an error for which ConnectionLost is true). Nothing to do on SQLite.
  virtual void Reconnect() {}
  // Sessions the server (or a pooler) ended while they sat idle and that this store opened
  // again before its next statement (PgStore::ReopenIfClosedWhileIdle); always 0 on SQLite.
  virtual std::int64_t SessionsReopened() const noexcept { return 0; }
};

}  // namespace outbox
