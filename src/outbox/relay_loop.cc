// The relay loop: drives a Relay batch after batch (RunRelayLoop), keeping up to
// LoopOptions::pipeline_depth batches at the broker (and one more being marked on a settle
// store), waiting while idle, letting busy and I/O errors
// pass, and reconnecting after a lost database connection (RunRelayLoopReconnecting).
#include "outbox/relay.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <limits>
#include <utility>

#include "outbox/error.h"
#include "outbox/failpoint.h"

namespace outbox {

bool SameWait(const WaitReport& a, const WaitReport& b) {
  const auto close = [](std::int64_t x, std::int64_t y) { return x - y < 1000 && y - x < 1000; };
  if (a.leases.size() != b.leases.size() || !(a.leader == b.leader) ||
      a.backoff.rows != b.backoff.rows || !close(a.backoff.first_due_ms, b.backoff.first_due_ms))
    return false;
  for (std::size_t i = 0; i < a.leases.size(); ++i)
    if (a.leases[i].owner != b.leases[i].owner || a.leases[i].rows != b.leases[i].rows ||
        !close(a.leases[i].until_ms, b.leases[i].until_ms))
      return false;
  return true;
}

namespace {

// SQLITE_BUSY (another writer held the lock past the busy timeout) and I/O
// errors (SQLITE_IOERR_*, SQLITE_FULL) may pass; anything else is thrown.
bool MayPass(const DbError& e) {
  const int code = e.primary_code();
  return code == SQLITE_BUSY || code == SQLITE_IOERR || code == SQLITE_FULL;
}

bool IsIoError(const DbError& e) {
  return e.primary_code() == SQLITE_IOERR || e.primary_code() == SQLITE_FULL;
}

}  // namespace

namespace {

// RunRelayLoop's body. Adds each settled batch to loop as it goes, so that what a run did
// stays counted when it throws (RunRelayLoopReconnecting sums its runs in one report).
void RunRelayLoopInto(Relay& relay, IdleWaiter& waiter, const LoopOptions& options,
                      const std::function<void(const BatchReport&)>& on_batch, LoopReport& loop) {
  if (options.pipeline_depth < 1)
    throw ConfigError(fmt::format("pipeline depth {}: must be at least 1", options.pipeline_depth));
  const std::size_t depth =
      options.mode == LoopMode::kOnce ? 1 : static_cast<std::size_t>(options.pipeline_depth);
  const std::int64_t batches_before = loop.batches;  // kOnce: one batch per run
  int idle_ms = options.idle_min_ms;
  int io_errors_in_a_row = 0;
  WaitReport reported_wait;  // the last wait reported through on_wait; empty after a batch
  // A failed batch (busy or I/O error): after the batches in flight are
  // settled, wait, then try again (or give up).
  bool retry_reported = false;  // on_retry was called for the current run of failures
  const auto after_error = [&](const DbError& e) {
    if (!MayPass(e) || options.mode == LoopMode::kOnce) throw;
    if (!IsIoError(e) && options.mode != LoopMode::kForever) throw;  // busy: say so, exit
    if (IsIoError(e) && ++io_errors_in_a_row > options.max_io_errors) throw;
    if (IsIoError(e)) ++loop.io_errors;
    if (options.on_retry && !retry_reported) options.on_retry(e, idle_ms);
    retry_reported = true;
  };
  for (;;) {
    // Fill the pipeline: claim and send batch N+1 while batch N is in flight. A batch whose
    // settle runs on the settle store is no longer at the broker: it takes no slot, so the next
    // batches are sent while it is marked.
    bool failed = false;
    while (!waiter.StopRequested() && relay.Sending() < depth &&
           !(options.mode == LoopMode::kOnce &&
             loop.batches - batches_before + static_cast<std::int64_t>(relay.InFlight()) > 0)) {
      try {
        if (!relay.StartBatch()) break;
      } catch (const DbError& e) {
        after_error(e);
        failed = true;
        break;
      }
    }
    if (relay.InFlight() > 0) {
      // Settle the oldest batch; the others stay in flight meanwhile. A stop
      // request starts no new batch, but every batch in flight is settled.
      BatchReport batch;
      try {
        batch = relay.FinishBatch();
      } catch (const DbError& e) {
        after_error(e);
        continue;
      }
      if (!failed) io_errors_in_a_row = 0;
      if (!failed) retry_reported = false;
      ++loop.batches;
      loop.acked += batch.acked;
      loop.marked += batch.settle.marked;
      loop.failed += batch.failed;
      loop.parked += batch.settle.parked;
      loop.fenced += batch.settle.fenced;
      if (on_batch) on_batch(batch);
      // With a settle store, the next batch's settle runs while the next batch is read and
      // produced (after this batch's report, so a batch's acks still follow the earlier
      // batches' reports).
      relay.StartSettle();
      reported_wait = {};
      idle_ms = options.idle_min_ms;
      continue;
    }
    if (waiter.StopRequested() || options.mode == LoopMode::kOnce) break;
    if (failed) {
      waiter.Wait(idle_ms);
      idle_ms = std::min(idle_ms * 2, options.idle_max_ms);
      continue;
    }
    io_errors_in_a_row = 0;
    retry_reported = false;
    // The idle look may write in leader mode (taking a free lease, renewing our
    // own), so its busy and I/O errors pass like a batch's.
    try {
      // Nothing to do and nothing that time alone would change: rows still pending
      // are blocked behind a parked row and need `unpark`.
      if (options.mode == LoopMode::kUntilEmpty && relay.CanOnlyWaitForever()) break;
      // Forget the wake-ups so far, then look once more: a commit before this is seen by the
      // look, one after it wakes the wait.
      waiter.ForgetWakeups();
      if (relay.HasClaimable()) continue;
      if (options.on_wait) {
        WaitReport wait = relay.Waits();
        if (!wait.empty() && !SameWait(wait, reported_wait)) options.on_wait(wait);
        reported_wait = std::move(wait);
      }
    } catch (const DbError& e) {
      after_error(e);
      waiter.Wait(idle_ms);
      idle_ms = std::min(idle_ms * 2, options.idle_max_ms);
      continue;
    }
    const IdleWaiter::Wake wake = waiter.Wait(idle_ms);
    if (wake == IdleWaiter::Wake::kChanged)
      idle_ms = options.idle_min_ms;
    else
      idle_ms = std::min(idle_ms * 2, options.idle_max_ms);
  }
  loop.stopped = waiter.StopRequested();
}

}  // namespace

LoopReport RunRelayLoop(Relay& relay, IdleWaiter& waiter, const LoopOptions& options,
                        const std::function<void(const BatchReport&)>& on_batch) {
  LoopReport loop;
  RunRelayLoopInto(relay, waiter, options, on_batch, loop);
  return loop;
}

LoopReport RunRelayLoopReconnecting(Relay& relay, IdleWaiter& waiter, const LoopOptions& options,
                                    const std::function<void(const BatchReport&)>& on_batch) {
  LoopReport total;  // every run adds to it, a run that throws too
  OutboxStore& store = relay.store();
  // A stop request gets one reconnect attempt, not a wait: a server back by then lets the loop
  // settle the batches in flight and the caller read its final counts; one still down ends it.
  bool stop_attempted = false;
  for (;;) {
    std::string error;
    try {
      // Batches still in flight from before a lost connection are settled by this run too
      // (oldest first, as ever); it may send a batch more before the oldest is settled, and
      // their rows stay in flight (unsendable) until then.
      RunRelayLoopInto(relay, waiter, options, on_batch, total);
      return total;
    } catch (const DbError&) {
      throw;
    } catch (const Error& e) {
      if (!store.ConnectionLost(e)) throw;
      error = e.what();
    }
    // A restart takes seconds, not ms: start at 100 ms, double up to idle_max_ms.
    int wait_ms = std::max(options.idle_min_ms, 100);
    bool reconnected = false;
    for (int attempt = 1;; ++attempt) {
      if (!waiter.StopRequested()) {
        if (options.on_connection_lost) options.on_connection_lost(error, attempt, wait_ms);
        waiter.Wait(wait_ms);
        wait_ms = std::min(wait_ms * 2, std::max(options.idle_max_ms, wait_ms));
      }
      const bool stopping = waiter.StopRequested();
      if (stopping && stop_attempted) break;
      stop_attempted = stopping;
      try {
        store.Reconnect();
        // The settle connection too (RelayOptions::settle_store), once its worker is done with
        // it: the settle running there (or its error) is collected by the next run.
        if (OutboxStore* settle_store = relay.settle_store()) {
          relay.WaitForSettle();
          settle_store->Reconnect();
        }
        ++total.reconnects;
        reconnected = true;
        break;
      } catch (const DbError&) {
        throw;
      } catch (const Error& again) {
        if (!store.ConnectionLost(again)) throw;
        error = again.what();
      }
      if (stopping) break;
    }
    if (!reconnected) {
      total.stopped = true;
      // Never empty, whatever the error said: callers test it.
      total.server_unreachable =
          error.empty() ? "the connection to the database server is lost" : error;
      return total;
    }
  }
}

}  // namespace outbox
