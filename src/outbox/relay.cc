#include "outbox/relay.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <utility>
#include <stdexcept>
#include <unordered_map>

#include "outbox/per_row_relay.h"
#include "outbox/record_headers.h"
#include "outbox/row_message.h"
#include "outbox/error.h"
#include "outbox/failpoint.h"
#include "outbox/id_range.h"

namespace outbox {
namespace {

// Relay::Sendable reads one row per gap between runs of ids in flight, up to this many gaps;
// past it, one page of (rows in flight + 1) rows.
constexpr std::size_t kMaxSendableGaps = 8;

}  // namespace

KeyChoice ParseKeyChoice(const std::string& text) {
  if (text == "event-id") return KeyChoice::kEventId;
  if (text == "aggregate-id") return KeyChoice::kAggregateId;
  throw ConfigError(fmt::format("key '{}': expected event-id or aggregate-id", text));
}

Coordination ParseCoordination(const std::string& text) {
  if (text == "claims") return Coordination::kClaims;
  if (text == "leader") return Coordination::kLeader;
  throw ConfigError(fmt::format("coordination '{}': expected claims or leader", text));
}

FailureMode ParseFailureMode(const std::string& text) {
  if (text == "block-key") return FailureMode::kBlockKey;
  if (text == "skip") return FailureMode::kSkip;
  throw ConfigError(fmt::format("on-failure '{}': expected block-key or skip", text));
}

Relay::Relay(OutboxStore& store, Publisher& publisher, RelayOptions options)
    : store_(store),
      publisher_(publisher),
      options_(std::move(options)),
      clock_(options_.clock ? *options_.clock : store.clock()) {
  if (options_.batch_size <= 0)
    throw ConfigError(fmt::format("batch size {}: must be at least 1", options_.batch_size));
  if (options_.lease_ms <= 0 || options_.lease_ms > kMaxHoldMs)
    throw ConfigError(fmt::format("lease {} ms: must be positive and at most {} ms (one day, "
                                  "kMaxHoldMs: a longer claim is not taken for a lease)",
                                  options_.lease_ms, kMaxHoldMs));
  if (options_.settle.max_attempts <= 0)
    throw ConfigError(fmt::format("max attempts {}: must be at least 1", options_.settle.max_attempts));
  if (options_.headers == HeaderConvention::kCloudEvents) {
    const std::string problem = CloudEventsSourceProblem(options_.ce_source);
    if (!problem.empty()) throw ConfigError("ce_source: " + problem);
  }
  if (options_.committed_ids && !leader_mode())
    throw ConfigError("recovery at term start (exactly-once, tail check) needs leader "
                      "coordination: under claims several relays send at once, and what one of "
                      "them delivered could be sent again by another before it is marked");
}

std::int64_t Relay::Now() const { return clock_.EpochMs(); }

ClaimRequest Relay::MakeClaimRequest(std::optional<std::int64_t> after_id) const {
  return MakeClaimRequest(after_id, Now());
}

ClaimRequest Relay::MakeClaimRequest(std::optional<std::int64_t> after_id,
                                     std::int64_t now_ms) const {
  ClaimRequest request;
  request.owner = options_.owner;
  request.after_id = after_id;
  request.limit = options_.batch_size;
  request.lease_ms = options_.lease_ms;
  request.now_ms = now_ms;
  request.block_key = options_.on_failure == FailureMode::kBlockKey;
  return request;
}

void Relay::Phase(std::string_view phase, std::int64_t token) const {
  if (options_.on_phase) options_.on_phase(phase, token);
}

bool Relay::HasClaimable() {
  // A leader renews its lease all through an outage's backoff: Lead() first.
  if (leader_mode()) return Lead() && OutageWaitMs() == 0 && Sendable(kHighestId);
  if (OutageWaitMs() > 0) return false;
  return store_.HasClaimable(MakeClaimRequest(std::nullopt));
}

std::int64_t Relay::OutageWaitMs() const {
  if (!outage_.active()) return 0;
  return std::max<std::int64_t>(0, outage_.retry_at_ms - Now());
}

bool Relay::Sendable(std::int64_t up_to_id) { return Sendable(up_to_id, Now()); }

bool Relay::Sendable(std::int64_t up_to_id, std::int64_t now_ms) {
  // Ask for one row in each gap between the runs of ids in flight, instead of reading past them
  // all: a leader's batches are pages of consecutive ids, so with a batch in flight this is two
  // one-row reads where a page of 1,001 rows was read (and copied) before every batch.
  std::vector<std::int64_t> ids(in_flight_ids_.begin(), in_flight_ids_.end());
  std::sort(ids.begin(), ids.end());
  // (after_id, up_to_id) of each gap. The first starts at the first row, whatever its id: a
  // foreign writer's may be 0 or below.
  std::vector<std::pair<std::optional<std::int64_t>, std::int64_t>> gaps;
  std::optional<std::int64_t> after;  // the last id in flight passed so far
  for (std::size_t i = 0; i < ids.size() && ids[i] <= up_to_id;) {
    std::size_t j = i + 1;
    while (j < ids.size() && ids[j] == ids[j - 1] + 1) ++j;
    if (after ? ids[i] - 1 > *after : ids[i] > kLowestId) gaps.emplace_back(after, ids[i] - 1);
    after = ids[j - 1];
    i = j;
  }
  if (!after || *after < up_to_id) gaps.emplace_back(after, up_to_id);
  if (gaps.size() <= kMaxSendableGaps) {
    for (const auto& [gap_after, gap_up_to] : gaps) {
      PageRequest request;
      request.after_id = gap_after;
      request.up_to_id = gap_up_to;
      request.limit = 1;
      request.now_ms = now_ms;
      request.block_key = options_.on_failure == FailureMode::kBlockKey;
      if (!store_.ReadPage(request).empty()) return true;
    }
    return false;
  }
  // Many gaps (rows in flight scattered, e.g. under block-key with few aggregates): every row in
  // flight may come first in the page (under block-key each is its aggregate's oldest unpublished
  // row), so one row more than are in flight finds one that is not.
  PageRequest request;
  request.up_to_id = up_to_id;
  request.limit = static_cast<std::int64_t>(in_flight_ids_.size()) + 1;
  request.now_ms = now_ms;
  request.block_key = options_.on_failure == FailureMode::kBlockKey;
  for (const OutboxRow& row : store_.ReadPage(request))
    if (in_flight_ids_.count(row.id) == 0) return true;
  return false;
}

bool Relay::Lead() {
  if (!leader_mode()) return false;
  const std::int64_t now = Now();
  try {
    if (lease_.token > 0) {
      // Renew once less than half is left: a write per half lease, not per poll.
      if (lease_.until_ms - now > options_.lease_ms / 2) return true;
      if (store_.RenewLease(lease_.token, options_.lease_ms, now)) {
        lease_.until_ms = std::max(lease_.until_ms, now + options_.lease_ms);
        return true;
      }
      LoseLease();
    }
    const LeaseAcquisition got = store_.AcquireLease(options_.owner, options_.lease_ms, now);
    if (!got.acquired) return false;
    lease_ = got.lease;
    cursor_.reset();  // a new term starts a new pass
    if (options_.on_lease) options_.on_lease({LeaseEvent::Kind::kAcquired, lease_, got.previous});
    return true;
  } catch (const DbError& e) {
    // Another writer held the lock past the busy timeout: try again at the next poll.
    if (e.primary_code() != SQLITE_BUSY) throw;
    return lease_.token > 0 && lease_.until_ms > Now();
  }
}

void Relay::LoseLease() {
  if (lease_.token == 0) return;
  const LeaderLease lost = lease_;
  lease_ = {};
  cursor_.reset();
  if (options_.on_lease) options_.on_lease({LeaseEvent::Kind::kLost, lost, {}});
}

void Relay::Resign() {
  if (!leader_mode() || lease_.token == 0 || InFlight() > 0) return;
  const LeaderLease term = lease_;
  lease_ = {};
  if (store_.ReleaseLease(term.token) && options_.on_lease)
    options_.on_lease({LeaseEvent::Kind::kReleased, term, {}});
}

WaitReport Relay::Waits() {
  const std::int64_t now_ms = Now();
  WaitReport report;
  for (const ClaimOwner& claim : store_.ClaimOwners(now_ms))
    if (claim.owner != options_.owner)
      report.leases.push_back({claim.owner, claim.rows, now_ms + claim.expires_in_ms});
  report.backoff = store_.Backoffs(now_ms);
  if (leader_mode() && lease_.token == 0) {
    const LeaderLease lease = store_.ReadLease();
    if (lease.Live(now_ms))
      report.leader = {lease.owner, lease.token, lease.until_ms, store_.PendingCount()};
  }
  return report;
}

bool Relay::CanOnlyWaitForever() {
  // Both questions at ONE instant: read the clock twice and a row whose backoff (or another
  // relay's claim) ends in between is neither sendable at the first reading nor waiting at the
  // second, and until-empty would end with it pending.
  const std::int64_t now = Now();
  // The rows an outage left pending wait on the brokers: time will send them.
  if (outage_.active() && outage_.retry_at_ms > now) return false;
  bool sendable = false;
  std::int64_t waiting = 0;
  store_.ReadAtOneInstant([&] {  // PostgreSQL reads its own clock: one transaction, one now()
    sendable = leader_mode() ? Sendable(kHighestId, now)
                             : store_.HasClaimable(MakeClaimRequest(std::nullopt, now));
    if (!sendable) waiting = store_.WaitingCount(now);
  });
  return !sendable && waiting == 0;
}

BatchReport Relay::RunBatch() {
  if (InFlight() > 0)
    throw std::logic_error("Relay::RunBatch: batches still in flight; finish them first");
  if (!StartBatch()) return BatchReport{};
  return FinishBatch();
}

Claim Relay::ClaimNext() {
  // On PostgreSQL the claim is one statement that finds no row as cheaply as the look would, and
  // keeps no cursor (ClaimBatch scans from the first unpublished row every time): right after a
  // full claim (draining a backlog) it claims at once, and it never looks behind the cursor. Two
  // round trips per batch fewer; an idle relay still only reads (its first claim after a full one
  // is the only write that may find nothing).
  const bool postgres = store_.backend() == Backend::kPostgres;
  const bool draining = postgres && last_claim_full_;
  last_claim_full_ = false;
  if (!draining && !store_.HasClaimable(MakeClaimRequest(std::nullopt)))
    return Claim{};  // idle: read only
  if (cursor_ && !postgres) {
    ClaimRequest behind = MakeClaimRequest(std::nullopt);
    behind.up_to_id = *cursor_;
    if (store_.HasClaimable(behind)) cursor_.reset();  // a retry is due: serve it before new rows
  }
  Claim claim = store_.ClaimBatch(MakeClaimRequest(cursor_));
  if (claim.rows.empty() && cursor_ && !postgres) {
    cursor_.reset();  // a new pass picks up rows whose backoff ran out
    claim = store_.ClaimBatch(MakeClaimRequest(cursor_));
  }
  if (!claim.rows.empty()) cursor_ = claim.rows.back().id;
  last_claim_full_ = static_cast<std::int64_t>(claim.rows.size()) == options_.batch_size;
  return claim;
}

// Reads past the cursor and steps over the rows in flight (read again only on
// a new pass). At the end of the table a new pass starts from the first row,
// whatever its id (a foreign writer's may be 0 or below). The cursor
// passes rows the page leaves out (under block-key, every row behind its
// aggregate's oldest unpublished one), and such a row becomes sendable only
// later, when that oldest row is published or due again: so, as ClaimNext
// does, a new pass starts at once whenever a row at or behind the cursor can
// be sent now. Reading on past it instead would send a later row of its
// aggregate first.
Claim Relay::ReadNext() {
  Claim page;  // attempts stays empty: a leader's settle reads them itself
  if (!Lead()) return page;
  if (options_.committed_ids && recovered_token_ != lease_.token) {
    RecoverCommitted();
    if (lease_.token == 0) return page;  // fenced out while recovering: standby now
  }
  page.token = lease_.token;
  const auto limit = static_cast<std::size_t>(options_.batch_size);
  if (cursor_ && Sendable(*cursor_)) cursor_.reset();  // a row behind the cursor goes first
  bool new_pass = !cursor_;
  std::vector<InFlightRow> in_flight;  // for ReadPage's hold-back once per page
  if (options_.on_failure == FailureMode::kBlockKey) {
    in_flight.reserve(in_flight_ids_.size());
    for (const InFlightBatch& batch : in_flight_)
      for (const OutboxRow& row : batch.claim.rows)
        in_flight.push_back({row.id, row.event.aggregate_id});
    // The batch being settled too: this page's snapshot may predate its commit.
    if (settling_)
      for (const OutboxRow& row : settling_->batch.claim.rows)
        in_flight.push_back({row.id, row.event.aggregate_id});
  }
  for (;;) {
    PageRequest request;
    request.after_id = cursor_;
    request.limit = options_.batch_size;
    request.now_ms = Now();
    request.block_key = options_.on_failure == FailureMode::kBlockKey;
    request.in_flight = in_flight;
    std::vector<OutboxRow> rows = store_.ReadPage(request);
    for (OutboxRow& row : rows) {
      cursor_ = row.id;
      if (in_flight_ids_.count(row.id) == 0) page.rows.push_back(std::move(row));
      if (page.rows.size() == limit) break;
    }
    if (page.rows.size() == limit) break;
    if (rows.size() == limit) continue;  // a full page of rows in flight: read on
    if (!page.rows.empty() || new_pass) break;
    cursor_.reset();
    new_pass = true;
  }
  return page;
}

bool Relay::StartBatch() {
  if (OutageWaitMs() > 0) return false;  // waiting out a broker outage: send nothing yet
  if (!run_id_) run_id_ = store_.RunId();  // before the first rows: see RunOf
  Claim claim = leader_mode() ? ReadNext() : ClaimNext();
  if (claim.rows.empty()) {
    // "idle" only when nothing is in flight: with a batch in flight the relay is not idle.
    if (InFlight() == 0) Phase("idle", 0);
    return false;
  }
  const std::optional<std::string> run_id = RunOf(claim);
  if (!run_id) return false;
  Phase("claim", claim.token);
  HitFailpoint("relay.after_claim");
  return SendRows(std::move(claim), *run_id);
}

std::optional<std::string> Relay::RunOf(const Claim& claim) {
  // Read per batch, after the rows: a `reset` while this relay runs starts a new run, and rows
  // read after it belong to it (read once at start, every later record would carry the old
  // run's id and check would count this run's events as lost). Rows read before the reset, from
  // the old outbox, would carry the new run's id: phantoms of the new run. Read after the rows
  // alone, the run id cannot tell the two apart; compared with the last batch's (read before
  // these rows), it can: the same id, no reset fell between, the rows are of this run. A new id:
  // the reset fell since the last batch, before or after these rows were read, so they are not
  // sent; the next batch reads the new outbox. One batch per reset, not one per batch: no extra
  // round trip.
  std::string run_id = store_.RunId();
  if (run_id == *run_id_) return run_id;
  const std::string previous = std::exchange(*run_id_, run_id);
  // A claim the reset let through is in the new outbox (its token given after the reset):
  // released, so no row waits out a lease for it. Rows of our claims before it are in none.
  if (!leader_mode() && !claim.rows.empty()) store_.ReleaseClaimsOf(options_.owner, claim.token);
  cursor_.reset();  // the new outbox is read from its first row
  // A PostgreSQL reset ends the term held (PgStore::ResetSchema): find out now, with one write,
  // so the next page is read under a new term; sent under this one, it would be fenced out at
  // its settle and sent again.
  if (leader_mode() && lease_.token > 0 &&
      !store_.RenewLease(lease_.token, options_.lease_ms, Now()))
    LoseLease();
  if (options_.on_new_run)
    options_.on_new_run(previous, run_id, static_cast<std::int64_t>(claim.rows.size()));
  return std::nullopt;
}

bool Relay::SendRows(Claim claim, const std::string& run_id) {
  std::vector<OutboundMessage> messages;
  messages.reserve(claim.rows.size());
  std::vector<FailedDelivery> failed;
  const TopicTemplate* topic_template =
      options_.topic_template ? &*options_.topic_template : nullptr;
  for (OutboxRow& row : claim.rows) {
    // The payload moves into the record instead of being copied (RouteRow does not read it):
    // a row in flight is needed for its id and aggregate only, a parked one for its id.
    std::string payload = std::move(row.event.payload);
    RoutedMessage routed = RouteRow(row, topic_template, options_.headers, options_.ce_source);
    if (!routed.ok()) {
      // The row is bad, not the broker: park it now with the reason; the batch goes on.
      failed.push_back({row.id, std::move(routed.error), /*park_now=*/true});
      continue;
    }
    OutboundMessage message = std::move(routed.message);
    message.payload = std::move(payload);
    message.run_id = run_id;
    if (options_.key == KeyChoice::kAggregateId) message.key = row.event.aggregate_id;
    messages.push_back(std::move(message));
  }
  // Queued before the send: if Send throws, the claim is still known to be
  // ours (its rows wait out the lease either way). Rows refused for their
  // headers travel with it, to be parked by its settle.
  if (leader_mode())
    for (const OutboxRow& row : claim.rows) in_flight_ids_.insert(row.id);
  in_flight_.push_back({std::move(claim), std::move(failed)});
  Phase("produce", in_flight_.back().claim.token);
  try {
    publisher_.Send(messages);  // even when empty: one Send per AwaitOldest
  } catch (...) {
    for (const OutboxRow& row : in_flight_.back().claim.rows) in_flight_ids_.erase(row.id);
    in_flight_.pop_back();
    throw;
  }
  return true;
}

Relay::AckedBatch Relay::TakeAcked() {
  // Out of the queue first: whatever happens below, this batch is done here
  // (an unsettled one is re-sent after its lease: duplicates, never losses).
  AckedBatch batch;
  batch.claim = std::move(in_flight_.front().claim);
  batch.failed = std::move(in_flight_.front().rejected);
  in_flight_.pop_front();
  BatchReport& report = batch.report;
  report.token = batch.claim.token;
  report.claimed = static_cast<std::int64_t>(batch.claim.rows.size());
  const std::vector<DeliveryResult> results = publisher_.AwaitOldest();
  Phase("acked", batch.claim.token);
  HitFailpoint("relay.after_ack_before_mark");

  for (const DeliveryResult& result : results) {
    if (result.ok) {
      batch.acked.push_back(result.outbox_id);
    } else if (result.producer_fatal) {
      // The producer failed, not the message: no attempt counted, no backoff, never parked.
      batch.producer_fatal = result.error;
      ++batch.left_unsettled;
    } else if (result.rolled_back) {
      // Aborted with its transaction for another record's failure: left pending, no attempt
      // counted; the leader's next pass reads it again (one transaction at a time: no later
      // row of its aggregate was read meanwhile).
      ++report.rolled_back;
    } else if (result.outage) {
      // The brokers failed, not the message: left pending, no attempt counted, never parked.
      // KafkaPublisher writes "<cause>; the message: <its own error>" when it knows more than
      // the message's own error: the outage is named by the cause.
      const std::size_t own = result.error.find("; the message: ");
      batch.outage_cause = result.error.empty()        ? std::string("delivery failed")
                           : own == std::string::npos ? result.error
                                                      : result.error.substr(0, own);
      ++report.outage;
    } else {
      batch.failed.push_back(
          {result.outbox_id, result.error.empty() ? "delivery failed" : result.error});
    }
  }
  report.acked = static_cast<std::int64_t>(batch.acked.size());
  report.failed =
      static_cast<std::int64_t>(batch.failed.size()) + report.outage + report.rolled_back;
  return batch;
}

Relay::SettleOutcome Relay::Settle(OutboxStore& store, Clock& clock, const SettlePolicy& policy,
                                   std::int64_t lease_ms, bool leader, std::int64_t token,
                                   const std::vector<std::int64_t>& acked,
                                   const std::vector<FailedDelivery>& failed) {
  // Acked rows must be marked: while another writer holds the lock past the
  // busy timeout, keep trying until the lease runs out (then the batch is
  // re-sent by whoever claims it: duplicates, never losses).
  const std::int64_t lease_end = clock.EpochMs() + lease_ms;
  for (;;) {
    try {
      const std::int64_t now = clock.EpochMs();
      if (!leader) {
        SettlePolicy with_lease = policy;
        with_lease.lease_ms = lease_ms;
        return {store.SettleBatch(token, acked, failed, with_lease, now), now};
      }
      return {store.SettleUnderLease(token, acked, failed, policy, now, lease_ms), now};
    } catch (const DbError& e) {
      if (e.primary_code() != SQLITE_BUSY || clock.EpochMs() >= lease_end) throw;
    }
  }
}

BatchReport Relay::AfterSettle(AckedBatch batch, const SettleOutcome& outcome) {
  const Claim& claim = batch.claim;
  BatchReport report = std::move(batch.report);
  report.settle = outcome.settle;
  if (leader_mode() && lease_.token == claim.token) {
    if (report.settle.fenced_out)
      LoseLease();
    else
      lease_.until_ms = std::max(lease_.until_ms, outcome.now_ms + options_.lease_ms);
  }
  if (options_.on_settle) {
    std::unordered_map<std::int64_t, const std::string*> event_ids;
    for (const OutboxRow& row : claim.rows) event_ids.emplace(row.id, &row.event.event_id);
    const auto to_event_ids = [&](const std::vector<std::int64_t>& ids) {
      std::vector<std::string> out;
      for (std::int64_t id : ids) out.push_back(*event_ids.at(id));
      return out;
    };
    options_.on_settle({claim.token, to_event_ids(report.settle.marked_ids),
                        to_event_ids(report.settle.parked_ids),
                        to_event_ids(report.settle.fenced_ids)});
  }
  Phase("mark", claim.token);
  HitFailpoint("relay.after_mark");
  settled_since_checkpoint_ += report.claimed;
  if (report.claimed < options_.batch_size) CheckpointAfterSettle();
  if (report.outage > 0) {
    // Free at once for this relay's next try (claims mode; a leader's next pass reads them
    // anyway): the outage's backoff, not the lease, decides when they go again. This batch is
    // the oldest in flight: the owner's claims up to its token are its own rows.
    // A release that fails on a lock or an I/O error leaves the rows to their lease instead.
    if (!leader_mode()) {
      try {
        store_.ReleaseClaimsOf(options_.owner, claim.token);
      } catch (const DbError& e) {
        if (e.primary_code() != SQLITE_BUSY && e.primary_code() != SQLITE_IOERR) throw;
      }
    }
    OutageGoesOn(batch.outage_cause);
  } else if (report.acked > 0) {
    OutageOver();
  }
  if (!batch.producer_fatal.empty()) {
    // The rows it failed are free again at once (claims mode; a leader's next pass reads them
    // anyway); the acked ones are marked above. A fatal producer sends nothing more: stop.
    // This batch is the oldest in flight: the owner's claims up to its token are its own rows.
    if (!leader_mode()) store_.ReleaseClaimsOf(options_.owner, claim.token);
    throw KafkaError(fmt::format("{}; {} rows of the batch left unpublished with no attempt "
                                 "counted; restart the relay for a new producer",
                                 batch.producer_fatal, batch.left_unsettled),
                     kProducerFatalCode);
  }
  return report;
}

void Relay::OutageGoesOn(const std::string& cause) {
  const std::int64_t now = Now();
  OutageEvent event;
  event.kind = outage_.active() ? OutageEvent::Kind::kGoesOn : OutageEvent::Kind::kBegun;
  if (!outage_.active()) {
    outage_.since_ms = now;
    outage_tries_ = 0;
  }
  ++outage_tries_;
  event.retry_in_ms = BackoffMs(outage_tries_, options_.settle);
  outage_.cause = cause;
  outage_.owner = options_.owner;
  outage_.noted_at_ms = now;
  outage_.retry_at_ms = now + event.retry_in_ms;
  // Advice for status, written again at the next try: a failed write must not stop the relay
  // (a lost database connection shows itself at the next claim).
  try {
    store_.NoteOutage(outage_);
    outage_recorded_ = true;
  } catch (const Error&) {
  }
  if (!options_.on_outage) return;
  try {
    event.rows_waiting = store_.PendingCount();
  } catch (const Error&) {
    event.rows_waiting = -1;
  }
  event.outage = outage_;
  options_.on_outage(event);
}

void Relay::OutageOver() {
  if (outage_.active()) {
    const BrokerOutage over = outage_;
    outage_ = {};
    outage_tries_ = 0;
    if (options_.on_outage) options_.on_outage({OutageEvent::Kind::kOver, over, 0, 0});
  }
  if (!outage_recorded_) return;
  try {
    store_.ClearOutage();
    outage_recorded_ = false;
  } catch (const Error&) {
    // Cleared at the next delivered batch.
  }
}

void Relay::RecoverCommitted() {
  const std::int64_t token = lease_.token;
  const std::vector<std::int64_t> found = options_.committed_ids();
  std::vector<std::int64_t> marked;
  if (!found.empty()) {
    // Marking an id that a committed transaction carried is true whoever marks it, so the settle
    // only needs the lease to keep its usual fencing; rows already published are left alone.
    const SettleReport settle =
        store_.SettleUnderLease(token, found, {}, options_.settle, Now(), options_.lease_ms);
    if (settle.fenced_out) {
      LoseLease();
      return;  // the next term recovers again
    }
    marked = settle.marked_ids;
  }
  recovered_token_ = token;
  if (options_.on_recovered) options_.on_recovered(token, found, marked);
}

void Relay::CheckpointAfterSettle() {
  if (!options_.checkpoint_after_settle || settled_since_checkpoint_ < kCheckpointAfterRows) return;
  settled_since_checkpoint_ = 0;
  try {
    store_.CheckpointPassive();
  } catch (const DbError&) {
    // Only an optimisation: the WAL stays for the next checkpoint (or SQLite's own).
  }
}

}  // namespace outbox
