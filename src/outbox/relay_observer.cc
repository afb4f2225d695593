#include "outbox/relay_observer.h"

#include <utility>

namespace outbox {

RelayObserver::RelayObserver(bool leader_mode) {
  snapshot_.started_steady_ms = SteadyNowMs();
  snapshot_.leader_mode = leader_mode;
}

std::int64_t RelayObserver::SteadyNowMs() noexcept {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

RelaySnapshot RelayObserver::Read() const {
  std::lock_guard lock(mutex_);
  return snapshot_;
}

void RelayObserver::Turn(std::int64_t in_flight, std::int64_t lease_token, bool stopping) noexcept {
  const std::int64_t now = SteadyNowMs();
  std::lock_guard lock(mutex_);
  snapshot_.last_turn_steady_ms = now;
  ++snapshot_.turns;
  snapshot_.in_flight = in_flight;
  snapshot_.lease_token = lease_token;
  snapshot_.stopping = stopping;
}

void RelayObserver::Batch(const BatchReport& batch) noexcept {
  const std::int64_t now = SteadyNowMs();
  std::lock_guard lock(mutex_);
  ++snapshot_.batches;
  snapshot_.acked += batch.acked;
  snapshot_.failed += batch.failed;
  snapshot_.marked += batch.settle.marked;
  snapshot_.parked += batch.settle.parked;
  snapshot_.fenced += batch.settle.fenced;
  snapshot_.last_batch_steady_ms = now;
  if (batch.acked > 0) snapshot_.last_ack_steady_ms = now;
  snapshot_.last_batch_all_failed = batch.claimed > 0 && batch.acked == 0 && batch.failed > 0;
  // A batch that settled talked to the database.
  snapshot_.connection_lost_until_steady_ms = 0;
}

void RelayObserver::Lease(const LeaseEvent& event) noexcept {
  std::lock_guard lock(mutex_);
  if (event.kind == LeaseEvent::Kind::kAcquired) {
    ++snapshot_.lease_acquired;
    snapshot_.lease_token = event.lease.token;
  } else {
    if (event.kind == LeaseEvent::Kind::kLost) ++snapshot_.lease_lost;
    snapshot_.lease_token = 0;
  }
}

void RelayObserver::DbRetry(const std::string& error) noexcept {
  const std::int64_t now = SteadyNowMs();
  std::lock_guard lock(mutex_);
  ++snapshot_.db_retries;
  try {
    snapshot_.db_error = error;
  } catch (...) {
    // Out of memory: the count still says it happened.
  }
  snapshot_.db_error_steady_ms = now;
}

void RelayObserver::ConnectionLost(const std::string& error, int wait_ms) noexcept {
  const std::int64_t now = SteadyNowMs();
  std::lock_guard lock(mutex_);
  ++snapshot_.connection_losses;
  try {
    snapshot_.db_error = error;
  } catch (...) {
  }
  snapshot_.db_error_steady_ms = now;
  snapshot_.connection_lost_until_steady_ms = now + wait_ms + 1000;
}

void ObservedWaiter::Report(bool stopping) noexcept {
  observer_.Turn(relay_ ? static_cast<std::int64_t>(relay_->InFlight()) : 0,
                 relay_ ? relay_->LeaseToken() : 0, stopping);
}

IdleWaiter::Wake ObservedWaiter::Wait(int timeout_ms) {
  const Wake wake = inner_.Wait(timeout_ms);
  Report(wake == Wake::kStop);
  return wake;
}

bool ObservedWaiter::StopRequested() {
  const bool stop = inner_.StopRequested();
  Report(stop);
  return stop;
}

void ObserveRelay(RelayObserver& observer, RelayOptions& relay_options) {
  relay_options.on_lease = [&observer, next = std::move(relay_options.on_lease)](
                               const LeaseEvent& event) {
    if (next) next(event);
    observer.Lease(event);
  };
}

std::function<void(const BatchReport&)> ObserveLoop(
    RelayObserver& observer, LoopOptions& loop_options,
    std::function<void(const BatchReport&)> on_batch) {
  loop_options.on_retry = [&observer, next = std::move(loop_options.on_retry)](
                              const DbError& error, int retry_in_ms) {
    if (next) next(error, retry_in_ms);
    observer.DbRetry(error.what());
  };
  loop_options.on_connection_lost = [&observer, next = std::move(loop_options.on_connection_lost)](
                                        const std::string& error, int attempt, int wait_ms) {
    if (next) next(error, attempt, wait_ms);
    observer.ConnectionLost(error, wait_ms);
  };
  return [&observer, next = std::move(on_batch)](const BatchReport& batch) {
    if (next) next(batch);
    observer.Batch(batch);
  };
}

}  // namespace outbox
