// RelayObserver: what a running relay loop has been doing, published by the loop's thread and read
// by any other (an HTTP endpoint's /metrics, /healthz, /readyz), so that the reader never waits on
// the loop and the loop never waits on the reader for longer than one copy of a small struct.
//
// The loop is observed without editing it: ObservedWaiter wraps the loop's IdleWaiter (the loop
// asks it StopRequested() at the top of every turn and Wait()s on it when idle), and
// ObserveRelay chains the relay's and the loop's callbacks (on_lease, on_retry,
// on_connection_lost) and the per-batch callback. Everything the observer records comes from the
// loop's own thread, so Relay's accessors (InFlight, LeaseToken) are read there, never from the
// reader's thread.
//
// Thread-safety: RelayObserver's member functions may be called from any thread; a mutex guards
// the snapshot. ObservedWaiter is the loop's: not thread-safe, as any IdleWaiter.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "outbox/relay.h"

namespace outbox {

// A copy of the loop's figures at one instant. Times are steady-clock ms (monotonic, not epoch):
// only differences between them mean anything.
struct RelaySnapshot {
  std::int64_t started_steady_ms = 0;    // when the observer was made
  std::int64_t last_turn_steady_ms = 0;  // the loop's last turn (0: it has not turned yet)
  std::int64_t turns = 0;                // loop turns seen
  std::int64_t batches = 0;              // batches settled
  std::int64_t acked = 0;                // rows the broker acknowledged
  std::int64_t failed = 0;               // rows whose delivery failed (each attempt counted)
  std::int64_t marked = 0;               // rows marked published
  std::int64_t parked = 0;               // rows parked by this relay
  std::int64_t fenced = 0;               // rows fenced out at settle (another owner's claim)
  std::int64_t in_flight = 0;            // batches claimed and not yet settled, at the last turn
  std::int64_t last_batch_steady_ms = 0; // when the last batch was settled (0: none yet)
  std::int64_t last_ack_steady_ms = 0;   // when the last batch with an acked row was settled
  // The last settled batch had rows and every one of them failed: the broker may be unreachable.
  bool last_batch_all_failed = false;
  bool leader_mode = false;              // --coordination leader
  std::int64_t lease_token = 0;          // leader mode: the token this relay holds; 0: standby
  std::int64_t lease_acquired = 0;       // leader mode: terms this relay began
  std::int64_t lease_lost = 0;           // leader mode: terms it lost to another relay
  std::int64_t db_retries = 0;           // runs of database errors the loop waited out
  std::string db_error;                  // the last such error or lost connection's ("": none)
  std::int64_t db_error_steady_ms = 0;   // when it was reported
  // While the database server is unreachable the loop reports each reconnect attempt before its
  // wait; the connection counts as lost until that wait (plus a second) is over.
  std::int64_t connection_lost_until_steady_ms = 0;
  std::int64_t connection_losses = 0;    // reconnect attempts announced
  bool stopping = false;                 // a stop was requested
};

class RelayObserver {
 public:
  // leader_mode: the relay's RelayOptions::coordination is kLeader (reported as is).
  explicit RelayObserver(bool leader_mode);

  // Milliseconds on std::chrono::steady_clock, the clock of every *_steady_ms.
  static std::int64_t SteadyNowMs() noexcept;

  // A copy of the figures as they stand. Never blocks longer than one update's copy.
  RelaySnapshot Read() const;

  // The loop's thread: a turn of the loop, with the relay's state read on that thread.
  void Turn(std::int64_t in_flight, std::int64_t lease_token, bool stopping) noexcept;
  void Batch(const BatchReport& batch) noexcept;
  void Lease(const LeaseEvent& event) noexcept;
  void DbRetry(const std::string& error) noexcept;
  // wait_ms: the wait before the next reconnect attempt, ms.
  void ConnectionLost(const std::string& error, int wait_ms) noexcept;

 private:
  mutable std::mutex mutex_;
  RelaySnapshot snapshot_;
};

// An IdleWaiter that passes every call to inner and reports each loop turn to observer, reading
// relay's InFlight and LeaseToken on the loop's thread. Not owned: inner, observer, relay (set
// with SetRelay after the Relay is made; until then turns report 0 and 0).
class ObservedWaiter : public IdleWaiter {
 public:
  ObservedWaiter(IdleWaiter& inner, RelayObserver& observer) : inner_(inner), observer_(observer) {}
  void SetRelay(const Relay* relay) noexcept { relay_ = relay; }

  void ForgetWakeups() override { inner_.ForgetWakeups(); }
  Wake Wait(int timeout_ms) override;
  bool StopRequested() override;

 private:
  void Report(bool stopping) noexcept;

  IdleWaiter& inner_;
  RelayObserver& observer_;
  const Relay* relay_ = nullptr;
};

// Chains observer's recording onto relay_options.on_lease (an existing callback still runs
// first). Call before the Relay is made.
void ObserveRelay(RelayObserver& observer, RelayOptions& relay_options);

// Chains observer's recording onto loop_options.on_retry and on_connection_lost (existing callbacks
// still run first), and returns on_batch chained the same way, for the loop. Call before the loop.
std::function<void(const BatchReport&)> ObserveLoop(
    RelayObserver& observer, LoopOptions& loop_options,
    std::function<void(const BatchReport&)> on_batch);

}  // namespace outbox
