// The settle of a batch: on the relay's thread (FinishBatch), or on a second connection
// (RelayOptions::settle_store, relay --overlap-mark), handed to a worker thread (StartSettle,
// HandOff) and collected on the relay's thread (CollectSettle), its rows in flight until then.
#include <chrono>
#include <exception>
#include <future>
#include <optional>
#include <stdexcept>
#include <utility>

#include "outbox/relay.h"

namespace outbox {

bool Relay::StartSettle() {
  if (!overlap_mark() || settling_ || in_flight_.empty()) return false;
  HandOff(TakeAcked(), /*on_worker=*/true);
  return true;
}

void Relay::HandOff(AckedBatch batch, bool on_worker) {
  Phase("marking", batch.claim.token);
  // The worker gets copies of what it reads, and touches no member of this Relay.
  auto settle = [store = options_.settle_store, clock = &clock_, policy = options_.settle,
                 lease_ms = options_.lease_ms, leader = leader_mode(), token = batch.claim.token,
                 acked = std::move(batch.acked), failed = std::move(batch.failed)]() {
    return Settle(*store, *clock, policy, lease_ms, leader, token, acked, failed);
  };
  if (!on_worker) {  // run by CollectSettle, on this thread
    std::future<SettleOutcome> deferred = std::async(std::launch::deferred, std::move(settle));
    settling_.emplace(Settling{std::move(batch), std::move(deferred)});
    return;
  }
  // On the relay's one long-lived worker (WorkerThread: a thread per batch started late).
  std::packaged_task<SettleOutcome()> task(std::move(settle));
  std::future<SettleOutcome> outcome = task.get_future();
  if (!settle_worker_) settle_worker_.emplace();
  settle_worker_->Post(std::packaged_task<void()>([task = std::move(task)]() mutable { task(); }));
  settling_.emplace(Settling{std::move(batch), std::move(outcome)});
}

void Relay::WaitForSettle() noexcept {
  // A deferred settle has not started: it runs when collected.
  if (settling_ && settling_->outcome.wait_for(std::chrono::seconds(0)) !=
                       std::future_status::deferred)
    settling_->outcome.wait();
}

BatchReport Relay::CollectSettle() {
  std::future<SettleOutcome> pending = std::move(settling_->outcome);
  AckedBatch batch = std::move(settling_->batch);
  std::optional<SettleOutcome> outcome;
  std::exception_ptr error;
  try {
    outcome = pending.get();  // ends the settle (committed or not) before its rows leave flight
  } catch (...) {
    error = std::current_exception();
  }
  settling_.reset();
  // Only now: a page read while the settle ran may come from a snapshot before its commit, and
  // must neither send these rows again nor a later row of their aggregates.
  for (const OutboxRow& row : batch.claim.rows) in_flight_ids_.erase(row.id);
  if (error) {
    RecoverBeforeNextSend();
    std::rethrow_exception(error);  // dropped unsettled: re-sent by the next pass
  }
  return AfterSettle(std::move(batch), *outcome);
}

BatchReport Relay::FinishBatch() {
  if (!overlap_mark()) {
    if (in_flight_.empty()) throw std::logic_error("Relay::FinishBatch: no batch in flight");
    // The rows leave flight now: the settle below ends before the next read on this store.
    for (const OutboxRow& row : in_flight_.front().claim.rows) in_flight_ids_.erase(row.id);
    try {
      AckedBatch batch = TakeAcked();
      Phase("marking", batch.claim.token);
      const SettleOutcome outcome =
          Settle(store_, clock_, options_.settle, options_.lease_ms, leader_mode(),
                 batch.claim.token, batch.acked, batch.failed);
      return AfterSettle(std::move(batch), outcome);
    } catch (...) {
      RecoverBeforeNextSend();
      throw;  // dropped unsettled: re-sent by the next pass, unless recovered as committed
    }
  }
  // The settle StartSettle handed to the worker, if any; else the oldest batch's, here.
  if (!settling_) {
    if (in_flight_.empty()) throw std::logic_error("Relay::FinishBatch: no batch in flight");
    HandOff(TakeAcked(), /*on_worker=*/false);
  }
  return CollectSettle();
}

void Relay::RecoverBeforeNextSend() noexcept {
  // A settle that did not commit (a lost connection, a locked database) leaves its batch
  // unmarked, and with committed_ids its records may be on Kafka already (an exactly-once
  // commit, a tail check's acks). The lease is still ours, so no new term would recover them:
  // recover before the next read instead of sending them again.
  if (options_.committed_ids) recovered_token_ = 0;
}

}  // namespace outbox
