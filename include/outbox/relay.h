// Relay: the production message relay. One batch is
//   claim (lease + fencing token) -> produce all, collect every delivery
//   report -> settle (mark acked, back off or park failures) in ONE transaction.
// That is Coordination::kClaims. Under Coordination::kLeader one relay holds
// the store's leader lease (Store::AcquireLease) and reads pages without
// claims; its settle is fenced by the lease's token instead of per-row
// tokens, and the other relays stand by until the lease runs out.
// No database transaction is open while talking to the broker. RunRelayLoop
// keeps up to LoopOptions::pipeline_depth batches at the broker: batch N+1 is
// claimed and produced while batch N's reports are on their way, and batch N
// is settled while N+1 is in flight (with RelayOptions::settle_store, on a worker thread while
// the next batches are claimed and produced). Each batch still passes its failpoints
// in order (after_claim, after_produce, after_ack_before_mark, after_mark),
// and each row is marked only after its own ack, under its batch's token.
//
// Delivery is at-least-once: a crash between the ack and the settle re-sends
// at most the batches in flight, pipeline_depth of them, and one more being marked on
// RelayOptions::settle_store when there is one (chapter 7.1, decision 3). A relay paused past
// its lease (e.g. SIGSTOP, a long GC-like stall) can have its rows claimed and sent by
// another relay; its own settle is then fenced out, but its records were
// already produced: duplicates, never losses.
//
// Broker outages. A row counts an attempt toward parking (SettlePolicy::max_attempts) only
// when its delivery failed for its own sake (kafka::ClassifyDeliveryError: size, invalid record,
// authorization, unknown topic, ...). A delivery that failed for the brokers' sake
// (DeliveryResult::outage: all brokers down, a transport failure, a timeout or purge while they
// do not answer) is not the row's fault: the row is left as it was (attempts, backoff and
// last_error untouched; a claim released at once), never parked, and the relay waits out the
// outage: it sends nothing until a backoff of its own has passed (BackoffMs over the outage's
// failed tries, from SettlePolicy::backoff_base_ms doubling to backoff_max_ms), then sends
// again, oldest rows first, so per-aggregate order holds as for any retry. It records the
// outage in the store (OutboxStore::NoteOutage: cause, start, next try) for status, reports it
// through on_outage, and clears it with the first batch delivered again. A failure to write the
// record is ignored: the record is advice, written again at the next try.
//
// Not thread-safe; run one Relay per thread or process. With RelayOptions::settle_store, its
// settles run on a worker thread of its own (see FinishBatch); callbacks and the relay's
// failpoints stay on the calling thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "outbox/broker_outage.h"
#include "outbox/clock.h"
#include "outbox/cloud_events.h"
#include "outbox/error.h"
#include "outbox/publisher.h"
#include "outbox/store.h"
#include "outbox/topic_template.h"
#include "outbox/worker_thread.h"

namespace outbox {

// Which field becomes the record key.
enum class KeyChoice {
  kEventId,      // the chapter's choice: spreads events over partitions
  kAggregateId,  // same aggregate -> same partition -> per-aggregate order
};

// What a failed row means for later rows of the same aggregate.
enum class FailureMode {
  kBlockKey,  // only an aggregate's oldest unpublished row is sent: order kept, at most
              // one row per aggregate per batch; a parked row stalls its aggregate
  kSkip,      // they flow on: throughput kept, order across the failure lost
};

// Who may send which row when several relays share one outbox.
enum class Coordination {
  // Each batch is claimed (Store::ClaimBatch: per-row lease + fencing token),
  // so several relays share the work. Under kBlockKey a batch holds at most
  // one row per aggregate: two relays must not send one aggregate's rows at once.
  kClaims,
  // One relay, the leader, holds the store's lease and sends every row
  // (Store::ReadPage, no writes onto rows); the others stand by and take over
  // when its lease runs out. Its settle applies only under its lease token
  // (Store::SettleUnderLease). Under kBlockKey it keeps claims mode's rule:
  // a row goes out only once every earlier row of its aggregate is published,
  // so neither a page nor the pipeline holds two rows of one aggregate. A
  // producer keeps a partition's order across its own retries, but a row that
  // fails for good cannot recall a later row of its aggregate already acked:
  // that later row would precede the failed one's retry on the topic.
  kLeader,
};

// Throw ConfigError on anything else.
KeyChoice ParseKeyChoice(const std::string& text);      // "event-id" | "aggregate-id"
FailureMode ParseFailureMode(const std::string& text);  // "block-key" | "skip"
Coordination ParseCoordination(const std::string& text);  // "claims" | "leader"

// A change of this relay's leadership (RelayOptions::on_lease), leader mode only.
struct LeaseEvent {
  enum class Kind {
    kAcquired,  // this relay became the leader with lease.token
    kLost,      // another relay holds a newer token: this relay stands by; its
                // batches in flight will be fenced out at their settle
    kReleased,  // this relay ended its term on a clean stop (Relay::Resign)
  };
  Kind kind = Kind::kAcquired;
  LeaderLease lease;     // this relay's term (kAcquired, kReleased) or the one it lost
  LeaderLease previous;  // kAcquired: the term it took over from (owner "" and token 0: none)
};

// A change in a broker outage this relay waits out (RelayOptions::on_outage).
struct OutageEvent {
  enum class Kind {
    kBegun,   // a batch's deliveries failed for the brokers' sake (DeliveryResult::outage)
    kGoesOn,  // another try failed the same way
    kOver,    // a batch was delivered again: outage.since_ms says since when it lasted
  };
  Kind kind = Kind::kBegun;
  BrokerOutage outage;            // as recorded (OutboxStore::NoteOutage); kOver: as it was
  std::int64_t rows_waiting = -1; // pending rows at the time (-1: the count failed); kOver: 0
  std::int64_t retry_in_ms = 0;   // until the next try; kOver: 0
};

// What one settle did, by event id: what a history records (RelayOptions::on_settle).
struct SettleRecord {
  std::int64_t token = 0;            // the claim's fencing token
  std::vector<std::string> marked;   // acknowledged and marked published under token
  std::vector<std::string> parked;   // failed for the last time: parked
  std::vector<std::string> fenced;   // the claim was taken over: left untouched (its sends
                                     // may be duplicates of the new owner's)
};

// Rows settled between two of the relay's passive checkpoints, at least: about
// 600 WAL pages at the 7.4 pages of a business+outbox transaction and one of a
// mark, under SQLite's automatic checkpoint at 1,000 pages.
inline constexpr std::int64_t kCheckpointAfterRows = 64;

struct RelayOptions {
  std::int64_t batch_size = 1000;  // rows per claim, > 0
  KeyChoice key = KeyChoice::kEventId;
  // Routing and header conventions (relay --topic-template, --headers, --ce-source). A row
  // whose topic would be illegal (TopicTemplate::Render) or that cannot make a CloudEvent
  // (CloudEventsHeaders, CloudEventsCollision) is parked at once with the reason, as a row with
  // a bad headers column is: it is never sent and never stops the relay.
  std::optional<TopicTemplate> topic_template;  // none: every record to the publisher's topic
  HeaderConvention headers = HeaderConvention::kLab;
  std::string ce_source = std::string(kDefaultCloudEventsSource);  // CloudEventsSourceProblem
  FailureMode on_failure = FailureMode::kBlockKey;
  SettlePolicy settle;             // max attempts and backoff
  // How long a claim (kClaims) or the leader lease (kLeader) holds, ms; must
  // exceed the delivery timeout. The leader renews its lease with every settle
  // and, idle or not, once less than half of it is left.
  std::int64_t lease_ms = 30000;
  Coordination coordination = Coordination::kClaims;
  std::string owner;               // recorded with each claim, e.g. "relay-4242"
  // Where claims, leases, backoffs and marks read the time. Not owned; must
  // outlive the Relay. Null: the store's clock (Store::clock()).
  Clock* clock = nullptr;
  // Called right after each settle commits and before the relay.after_mark
  // failpoint (so a kill there leaves the record); may be empty. Must not
  // throw: the batch is already settled.
  std::function<void(const SettleRecord&)> on_settle;
  // Called at each phase transition of a batch, with the claim's token: "claim"
  // (the claim committed; before relay.after_claim), "produce" (just before the
  // publisher produces), "acked" (every delivery report is in; before
  // relay.after_ack_before_mark), "marking" (just before the settle
  // transaction begins: a kill from here until "mark" may fall before or after
  // its commit, and only the database can tell), "mark" (the settle committed;
  // after on_settle), and "idle" (0 rows to claim; token 0). A lab records them
  // so a kill -9's window can be told afterwards. May be empty. Must not throw.
  // In leader mode "claim" marks the page read (no claim is written) and the
  // token is the lease's token, the same for every batch of one term.
  std::function<void(std::string_view phase, std::int64_t token)> on_phase;
  // Leader mode: called when this relay becomes the leader, loses the lease,
  // or releases it. May be empty. Must not throw.
  std::function<void(const LeaseEvent&)> on_lease;
  // Called when a batch finds a new run id (OutboxStore::RunId): a `reset` recreated the outbox
  // since the last batch read it. previous: the run the relay saw last; run: the new one;
  // dropped: the rows of that batch, not sent (their claim, in claims mode, released), since they
  // may have been read before the reset, from the old outbox, and a record of them carrying the
  // new run's id would be a phantom of the new run. May be empty. Must not throw.
  std::function<void(const std::string& previous, const std::string& run, std::int64_t dropped)>
      on_new_run;
  // Called when a broker outage begins, goes on (each failed try) and is over (see "Broker
  // outages" at class Relay). May be empty. Must not throw.
  std::function<void(const OutageEvent&)> on_outage;
  // After the settle (and relay.after_mark) of a batch smaller than
  // batch_size, run a PASSIVE checkpoint (Store::CheckpointPassive): the relay
  // has caught up with the writers and has time to spare, and the writers'
  // COMMITs then rarely meet SQLite's automatic checkpoint (at 1,000 WAL
  // pages). Full batches (draining a backlog) skip it: a checkpoint after
  // every batch cost 22-34 % of a drain's events/s in the bench, and SQLite's
  // automatic checkpoint runs in the relay's own commits then. A failed
  // checkpoint is left to the next one: the settle has already committed.
  // Only once kCheckpointAfterRows rows were settled since the last one: at a
  // steady 1,000 events/s every batch is short, and a checkpoint (two fsyncs)
  // after each of them sat on the next batch's commit-to-mark path (issue 8).
  bool checkpoint_after_settle = true;
  // Exactly-once (relay --exactly-once, a TransactionalPublisher): called when this relay begins
  // a term (leader mode only: it acquired the lease), before it reads the term's first page.
  // Returns the outbox ids that a committed broker transaction already carried
  // (TransactionalPublisher::Recover). The relay marks the ones still unpublished under its
  // lease (SettleUnderLease), so they are never sent again, then reports them through
  // on_recovered. The restart tail check (relay --tail-check, kafka::ReadTail) fills the same
  // hook with the ids already on the topic's tail: marking an id the broker holds is true
  // whoever sent it. Empty: no recovery (at-least-once). Throws what it throws (KafkaError): the
  // batch is not started, the error reaches the loop's caller.
  std::function<std::vector<std::int64_t>()> committed_ids;
  // Called after that recovery's settle, with the ids carried (found) and the ones it marked
  // (marked: found and still unpublished). May be empty. Must not throw.
  std::function<void(std::int64_t token, const std::vector<std::int64_t>& found,
                     const std::vector<std::int64_t>& marked)>
      on_recovered;
  // Leader mode, or claims mode on PostgreSQL, without committed_ids (issue 25): a second
  // connection to the same outbox (OpenStore with the same db and options), on which each
  // batch's settle runs in a worker thread while this relay reads (or claims) and produces the
  // next batch on its own store. The mark's CPU, its fsync and, on PostgreSQL, its server
  // backend then overlap the next read or claim; one mark at a time still (SQLite: one writer at
  // a time, as ever). In claims mode the settling batch's rows keep their claim until its settle
  // commits, so no claim takes them, and under block key none takes a later row of their
  // aggregates (ClaimBatch skips a row with an earlier unpublished one). Not owned; must outlive
  // the Relay; only one thread uses it at a time (the worker while a settle runs, else
  // FinishBatch). Null (and in claims mode on SQLite, where each claim is a write that would
  // wait for the settle's lock, or with committed_ids: exactly-once settles one batch at a
  // time): each settle runs inline on the main store, as before. See Relay::FinishBatch.
  OutboxStore* settle_store = nullptr;
};

// Why a relay with unpublished rows has nothing to claim: other owners'
// leases and rows in backoff (RunRelayLoop reports it through on_wait).
struct WaitReport {
  struct Lease {
    std::string owner;         // the other relay's owner name, e.g. "relay-4242@host"
    std::int64_t rows = 0;     // unpublished rows it holds
    std::int64_t until_ms = 0; // epoch ms its last lease runs out
    bool operator==(const Lease&) const = default;
  };
  std::vector<Lease> leases;  // by owner name; this relay's own owner left out
  BackoffWait backoff;
  // Leader mode, on a standby: the live leader lease of another relay (token 0:
  // none). Compared by owner and token only, so a standby reports each
  // leader's term once, not each renewal.
  struct Leader {
    std::string owner;
    std::int64_t token = 0;
    std::int64_t until_ms = 0;  // epoch ms the lease runs out unless renewed
    std::int64_t rows = 0;      // pending rows (unpublished, not parked) it has to send
    bool operator==(const Leader& other) const {
      return owner == other.owner && token == other.token;
    }
  };
  Leader leader;

  bool empty() const { return leases.empty() && backoff.rows == 0 && leader.token == 0; }
  bool operator==(const WaitReport&) const = default;
};

// Whether b is the wait a was, for the log (RunRelayLoop reports a wait once): the same owners,
// rows, leader term and backoff rows, each time within 1 s (PostgreSQL's times are the server's,
// moved into the relay's clock at each read: they move by a millisecond between polls).
bool SameWait(const WaitReport& a, const WaitReport& b);

struct BatchReport {
  std::int64_t token = 0;
  std::int64_t claimed = 0;
  std::int64_t acked = 0;
  std::int64_t failed = 0;  // every failed delivery, the outage's included
  // Of failed, the rows that failed for the brokers' sake (DeliveryResult::outage): left
  // pending with no attempt counted, not in settle.retried or settle.parked.
  std::int64_t outage = 0;
  // Of failed, the rows rolled back with an aborted transaction for another record's failure
  // (DeliveryResult::rolled_back, --exactly-once): left pending with no attempt counted.
  std::int64_t rolled_back = 0;
  SettleReport settle;
};

class Relay {
 public:
  // Throws ConfigError for batch_size <= 0, lease_ms <= 0 or above kMaxHoldMs (a day),
  // max_attempts <= 0, a ce_source CloudEventsSourceProblem refuses under
  // HeaderConvention::kCloudEvents, or committed_ids under Coordination::kClaims (exactly-once recovers the
  // one transaction a single sender can leave unmarked; claims let several relays send at once).
  Relay(OutboxStore& store, Publisher& publisher, RelayOptions options);

  // True when a row could be claimed now (read-only: no write while idle); false while an
  // outage's backoff runs (OutageWaitMs).
  // Leader mode: when this relay leads and a row may be sent now. On the way
  // it acquires a free lease, or renews its own once less than half of it is
  // left (a write then; none on a standby while the leader's lease holds).
  // Throws DbError.
  bool HasClaimable();

  // Leader mode: makes sure this relay leads, as HasClaimable does; true when
  // it does. Always false in claims mode. Throws DbError.
  bool Lead();

  // Leader mode: releases the lease (Store::ReleaseLease) when this relay
  // holds it and nothing is in flight, so a standby takes over at once
  // instead of after the lease. Call on a clean stop. Does nothing in claims
  // mode. Throws DbError.
  void Resign();

  // The broker outage this relay is waiting out (BrokerOutage::active() false: none).
  const BrokerOutage& Outage() const noexcept { return outage_; }
  // How long this relay still waits before it sends again after an outage's failed try, ms;
  // 0 when it may send (no outage, or its backoff has passed).
  std::int64_t OutageWaitMs() const;

  // The lease token this relay holds in leader mode; 0 when it does not lead.
  std::int64_t LeaseToken() const noexcept { return lease_.token; }

  // What the rows this relay cannot claim now wait on (read only). Throws DbError.
  WaitReport Waits();

  // True when nothing is claimable and no row waits on a backoff, a lease or an outage:
  // waiting longer cannot help (until-empty ends here). Both are judged at one
  // reading of the clock, so a row whose backoff ends meanwhile counts as one
  // or the other. Throws DbError.
  bool CanOnlyWaitForever();

  // Runs one batch from the keyset cursor. Leader mode: reads a page instead of
  // claiming (nothing when this relay does not lead) and settles it with
  // Store::SettleUnderLease; the cursor skips the rows still in flight, so a
  // new pass never sends them twice. The settle is retried on
  // SQLITE_BUSY until the lease runs out, so acked rows get marked. Starts a new pass from the
  // first row (whatever its id: 0 and below included) when nothing lies past the cursor or when
  // a row behind it became claimable (its backoff ran out), so retries are never starved by new
  // rows. claimed == 0 means nothing was claimable. Throws DbError; delivery failures are
  // recorded, not thrown. A row whose headers column is not a JSON object of
  // string values (ParseRecordHeaders) is not sent: it is parked at once with
  // the reason as last_error and counted failed; the rest of the batch goes on.
  // Throws std::logic_error when batches started with StartBatch are still in flight.
  BatchReport RunBatch();

  // RunBatch in two halves, for a pipeline. StartBatch claims a batch as
  // RunBatch does and hands it to Publisher::Send; returns false when nothing
  // was claimable (nothing started). FinishBatch waits for the reports of the
  // oldest started batch (Publisher::AwaitOldest) and settles it under its
  // token, as RunBatch does; throws std::logic_error when none is in flight.
  // Batches in flight are claimed rows: with block_key, a later row of their
  // aggregates is not claimable until they are settled, so order holds across
  // the pipeline. Both throw DbError (FinishBatch: its batch is then dropped
  // unsettled and re-sent after its lease); delivery failures are recorded.
  //
  // With RelayOptions::settle_store (leader mode, or claims mode on PostgreSQL), a batch's
  // settle can run on a worker thread on that store while the caller reads (or claims) and
  // produces the next batch: StartSettle waits for
  // the oldest batch's reports and hands its settle to the worker; the next FinishBatch waits
  // for that settle and finishes it on the calling thread (lease, on_settle, "mark",
  // relay.after_mark, checkpoint, outage) and returns its report, or throws its error (DbError,
  // pg::PgError: the batch is dropped unsettled). FinishBatch with no settle running settles the
  // oldest batch in flight as without a settle store (on the settle store). A batch being
  // settled counts in InFlight, and its rows stay in flight (never read again, and under
  // block-key no later row of their aggregates is sent) until its settle ended and was
  // collected by FinishBatch: a page read meanwhile may come from a snapshot before its commit.
  bool StartBatch();
  BatchReport FinishBatch();
  // Settle store only: when no settle is running and a batch is in flight, waits for the oldest
  // batch's reports (Publisher::AwaitOldest; relay.after_ack_before_mark) and starts its settle
  // ("marking") on the worker, for the next FinishBatch to collect; returns true. Otherwise
  // does nothing and returns false. Throws what AwaitOldest and the failpoint throw (the batch
  // is then dropped unsettled, as by FinishBatch).
  bool StartSettle();
  // Batches started and not yet finished: in flight, or settling on the settle store.
  std::size_t InFlight() const noexcept { return in_flight_.size() + (settling_ ? 1 : 0); }
  // Batches sent and not yet handed to a settle: the ones at the broker. What a pipeline's
  // depth (LoopOptions::pipeline_depth) bounds; the batch settling on the settle store, if any,
  // is one more (so a kill -9 re-sends at most depth + 1 batches with a settle store).
  std::size_t Sending() const noexcept { return in_flight_.size(); }
  // The store it claims from (to reconnect it, say).
  OutboxStore& store() noexcept { return store_; }
  // RelayOptions::settle_store, or null (to reconnect it, say: after WaitForSettle).
  OutboxStore* settle_store() noexcept { return options_.settle_store; }
  // Blocks until the settle running on the settle store's worker, if any, has ended, without
  // collecting it (the next FinishBatch does), so the store may be reconnected. Never throws.
  void WaitForSettle() noexcept;

 private:
  std::int64_t Now() const;
  ClaimRequest MakeClaimRequest(std::optional<std::int64_t> after_id) const;  // at Now()
  ClaimRequest MakeClaimRequest(std::optional<std::int64_t> after_id, std::int64_t now_ms) const;
  bool leader_mode() const noexcept { return options_.coordination == Coordination::kLeader; }
  Claim ClaimNext();  // claims mode: the next claim from the cursor, or an empty one
  Claim ReadNext();   // leader mode: the next page past the cursor and the rows in flight
  // Both modes: builds the records, their run_id header run_id, and hands them to the publisher.
  bool SendRows(Claim claim, const std::string& run_id);
  // The run id once claim (or a page) was read; nullopt when it is a new run (a reset since the
  // last batch): claim is then dropped (claims mode: released) and on_new_run called.
  std::optional<std::string> RunOf(const Claim& claim);
  // Leader mode: a row with id <= up_to_id (kHighestId: any) that is not in flight could be sent
  // now, ignoring who leads.
  bool Sendable(std::int64_t up_to_id);  // at Now()
  bool Sendable(std::int64_t up_to_id, std::int64_t now_ms);
  void LoseLease();   // leader mode: another relay took over
  void Phase(std::string_view phase, std::int64_t token) const;  // options_.on_phase, if any
  void CheckpointAfterSettle();  // options_.checkpoint_after_settle
  // A batch left rows pending for an outage named cause: note it, back off.
  void OutageGoesOn(const std::string& cause);
  // A batch was delivered: end the outage, if any, and clear its record.
  void OutageOver();
  void RecoverCommitted();       // options_.committed_ids, once per term

  // A batch whose delivery reports are in, on its way to its settle (FinishBatch's halves).
  struct AckedBatch {
    Claim claim;
    std::vector<std::int64_t> acked;
    std::vector<FailedDelivery> failed;  // to retry or park (rejected rows included)
    BatchReport report;                  // without settle
    std::string producer_fatal;          // the fatal error, when the producer had one
    std::int64_t left_unsettled = 0;     // rows the fatal producer failed
    std::string outage_cause;            // the last outage error of the batch, when it had one
  };
  // What a settle returned, and the time it ran at (epoch ms).
  struct SettleOutcome {
    SettleReport settle;
    std::int64_t now_ms = 0;
  };
  // Leader mode, or claims mode on PostgreSQL (there the settle's backend runs beside the next
  // claim's; on SQLite a claim is a write and would wait for the settle's lock).
  bool overlap_mark() const noexcept {
    return options_.settle_store != nullptr && !options_.committed_ids &&
           (leader_mode() || store_.backend() == Backend::kPostgres);
  }
  // Pops the oldest batch in flight, waits for its reports, fires relay.after_ack_before_mark.
  AckedBatch TakeAcked();
  // The settle, retried on SQLITE_BUSY until the lease runs out. Touches no member: it runs on
  // the worker thread.
  static SettleOutcome Settle(OutboxStore& store, Clock& clock, const SettlePolicy& policy,
                              std::int64_t lease_ms, bool leader, std::int64_t token,
                              const std::vector<std::int64_t>& acked,
                              const std::vector<FailedDelivery>& failed);
  // What follows a settle on the main thread: lease, on_settle, "mark", relay.after_mark,
  // checkpoint, outage; throws KafkaError when the producer had a fatal error.
  BatchReport AfterSettle(AckedBatch batch, const SettleOutcome& outcome);
  // Starts batch's settle on the settle store: on the worker (on_worker), or deferred to the
  // thread that collects it.
  void HandOff(AckedBatch batch, bool on_worker);
  // Waits for the settle handed off, takes its rows out of flight and finishes it (AfterSettle);
  // throws what the settle threw.
  BatchReport CollectSettle();

  OutboxStore& store_;
  Publisher& publisher_;
  RelayOptions options_;
  Clock& clock_;
  // The last id this pass read (claimed, in claims mode); empty at the start of a pass. Not 0:
  // a foreign writer's ids may be 0 or below, and every one must be read (outbox/id_range.h).
  std::optional<std::int64_t> cursor_;
  bool last_claim_full_ = false;  // claims mode: the last claim returned batch_size rows
  std::int64_t settled_since_checkpoint_ = 0;  // rows, for CheckpointAfterSettle
  // A batch between StartBatch and FinishBatch: its claim, and the rows refused
  // before sending (bad headers), which its settle parks.
  struct InFlightBatch {
    Claim claim;
    std::vector<FailedDelivery> rejected;
  };
  std::deque<InFlightBatch> in_flight_;  // oldest first, as the publisher's batches
  // Leader mode: this relay's term (token 0: not leading) and the ids of the
  // rows in flight, which a new pass of the cursor must not send again.
  LeaderLease lease_;
  std::unordered_set<std::int64_t> in_flight_ids_;
  // The outage being waited out (since_ms 0: none), its failed tries, and whether a record may
  // be in the store (true at start: a relay killed during an outage leaves one behind).
  BrokerOutage outage_;
  std::int64_t outage_tries_ = 0;
  bool outage_recorded_ = true;
  std::int64_t recovered_token_ = 0;  // the term whose committed ids were recovered
  // After a settle that did not commit: recover the committed ids before the next read.
  void RecoverBeforeNextSend() noexcept;
  // The run id the last batch was read in (OutboxStore::RunId, read after its rows); before
  // the first batch, read before its rows.
  std::optional<std::string> run_id_;
  // The batch whose settle runs on options_.settle_store (overlap_mark), and the thread it runs
  // on, started at the first hand-off. The worker is the last member: destroyed first, it waits
  // for the settle in hand, which reads only its own copies and the store and clock outside.
  struct Settling {
    AckedBatch batch;
    std::future<SettleOutcome> outcome;
  };
  std::optional<Settling> settling_;
  std::optional<WorkerThread> settle_worker_;
};

// Waits while the relay is idle. Implementations: ChangeWatcher (inotify),
// fakes in tests.
class IdleWaiter {
 public:
  enum class Wake { kTimeout, kChanged, kStop };
  virtual ~IdleWaiter() = default;
  // Discards the wake-ups (changes) seen so far, so the next Wait blocks until a new one.
  virtual void ForgetWakeups() = 0;
  // Blocks up to timeout_ms; returns early on a change or a stop request.
  virtual Wake Wait(int timeout_ms) = 0;
  // True once a stop was requested (e.g. SIGTERM); never blocks.
  virtual bool StopRequested() = 0;
};

enum class LoopMode {
  kOnce,        // one batch
  kUntilEmpty,  // until nothing is claimable and nothing waits on a backoff, lease or
                // broker outage (it waits the outage out); rows blocked behind a parked row
                // of their aggregate stay pending
  kForever,     // until a stop request
};

struct LoopOptions {
  LoopMode mode = LoopMode::kForever;
  int idle_min_ms = 5;     // first idle wait, ms
  int idle_max_ms = 1000;  // idle waits double up to this, ms
  // Batches in a row that may fail with an I/O error (SQLITE_IOERR_*,
  // SQLITE_FULL) before the error is taken as persistent and thrown; each is
  // retried after the idle backoff. A disk error can pass (space freed, a
  // flaky path); the settle is one transaction, so a failed one marks nothing
  // and the claim's rows are re-sent after the lease: duplicates, not losses.
  int max_io_errors = 5;
  // Called when the loop goes idle while rows wait on another owner's lease or
  // on a backoff, once per distinct wait (the same owners, rows and end times
  // are not reported again until a batch runs or the wait changes). May be
  // empty; must not throw.
  std::function<void(const WaitReport&)> on_wait;
  // Called in kForever when a batch failed with an error that may pass
  // (SQLITE_BUSY: another process held the lock past the busy timeout; an I/O
  // error) and the loop waits retry_in_ms (the idle backoff) before trying
  // again; once per run of failures, not again until a batch succeeds. kOnce
  // and kUntilEmpty do not wait on SQLITE_BUSY, they throw it: a command that
  // is meant to end must not wait silently on another process's lock. May be
  // empty; must not throw.
  std::function<void(const DbError& error, int retry_in_ms)> on_retry;
  // Batches at the broker at once, >= 1 (1: claim, produce, wait, settle, one after
  // the other). Depth 2 hides the broker's round trip behind the database work
  // of the next claim and the last settle. A kill -9 re-sends at most this
  // many batches, one more with RelayOptions::settle_store (the batch being marked there
  // takes no slot: Relay::Sending). kOnce always runs one batch.
  int pipeline_depth = 2;
  // RunRelayLoopReconnecting only: called while the database server is unreachable
  // (OutboxStore::ConnectionLost: a PostgreSQL server crashed or restarting), before each wait
  // of wait_ms (ms) and reconnect attempt
  // (attempt 1, 2, ...), with the error's message. May be empty; must not throw.
  std::function<void(const std::string& error, int attempt, int wait_ms)> on_connection_lost;
};

struct LoopReport {
  std::int64_t batches = 0;
  std::int64_t acked = 0;
  std::int64_t marked = 0;
  std::int64_t failed = 0;
  std::int64_t parked = 0;
  std::int64_t fenced = 0;
  bool stopped = false;  // ended by a stop request
  std::int64_t io_errors = 0;  // batches that failed with an I/O error and were retried
  std::int64_t reconnects = 0;  // times the connection to the database server was re-opened
  // RunRelayLoopReconnecting only. Empty, unless the loop ended on a stop request while the
  // database server was unreachable and the one reconnect attempt after the request failed too:
  // then the message of that attempt's error. The batches still in flight (Relay::InFlight) are
  // left unsettled, and the store has no connection to read final counts with.
  std::string server_unreachable;
};

// Runs batches per mode, up to options.pipeline_depth at the broker (Relay::Sending; a batch
// being settled on RelayOptions::settle_store is one more: after each batch's report the loop
// hands the next batch's settle to the worker, Relay::StartSettle, and reads and sends the next
// batches meanwhile). A stop
// request starts no new batch: every batch in flight finishes (its deliveries
// are bounded by the delivery timeout) and is settled first, so every acked
// row is marked. Throws ConfigError for pipeline_depth < 1.
// on_batch is called after each non-empty batch. SQLITE_BUSY (another writer
// held the lock past the busy timeout) counts as an empty poll, and an I/O
// error is retried up to max_io_errors times in a row, except in kOnce mode.
// Throws what RunBatch throws otherwise.
LoopReport RunRelayLoop(Relay& relay, IdleWaiter& waiter,
                        const LoopOptions& options,
                        const std::function<void(const BatchReport&)>& on_batch);

// RunRelayLoop that outlives a database server's crash or restart: when the
// loop throws an error for which relay.store().ConnectionLost() is true (never
// on SQLite), it waits and calls OutboxStore::Reconnect (on relay.settle_store() too, after
// Relay::WaitForSettle, when there is one) until the server
// answers (waits of 100 ms doubling to options.idle_max_ms, each announced
// through on_connection_lost), then runs the loop again, in every mode. The
// batch whose database call failed is dropped unsettled: its rows are claimed
// again after their lease (duplicates, never losses); batches still in flight
// are settled by the next run. A stop request (seen in the wait, or already
// made when the connection was lost) ends the waiting: one more Reconnect
// attempt at once, no wait; if it succeeds, the loop runs once more, which
// settles the batches in flight and starts none; if it fails, or the
// connection is lost again after it, the loop ends with stopped set and
// server_unreachable holding the error (its bound is the connect's own: at
// once for a refused connection; a URL's connect_timeout bounds a silent
// host). Returns the runs' reports summed, the batches of a run that threw
// included, with reconnects counted. Throws what RunRelayLoop throws
// otherwise, and what Reconnect throws when it is not a lost connection (a
// refused login, say).
LoopReport RunRelayLoopReconnecting(Relay& relay, IdleWaiter& waiter, const LoopOptions& options,
                                    const std::function<void(const BatchReport&)>& on_batch);

}  // namespace outbox
