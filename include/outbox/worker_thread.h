// WorkerThread: one long-lived thread that runs the jobs posted to it, one at a time, in the
// order posted. The relay's settles on a second connection (RelayOptions::settle_store, relay
// --overlap-mark) run on one: a thread started for each batch (std::async) began its settle
// about 1 ms after the hand-off on a 2-core VM, half the settle's own time, while a sleeping
// thread woken by a condition variable began in about 0.1 ms (docs/benchmark-profile.md, tenth
// round).
//
// Owns its thread. Post may be called from any thread; the object itself must outlive every
// job it was given (its destructor waits for them).
#pragma once

#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

namespace outbox {

class WorkerThread {
 public:
  // Starts the thread. Throws std::system_error when the thread cannot be created.
  WorkerThread();
  // Runs every job posted and not yet run, then joins the thread.
  ~WorkerThread();
  WorkerThread(const WorkerThread&) = delete;
  WorkerThread& operator=(const WorkerThread&) = delete;

  // Queues job to run on the thread after the jobs posted before it. What job returns or throws
  // reaches the future the caller took from its std::packaged_task before posting it.
  void Post(std::packaged_task<void()> job);

 private:
  void Run();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<void()>> jobs_;  // guarded by mutex_
  bool stopping_ = false;                        // guarded by mutex_
  std::thread thread_;  // last: it starts once the members it uses exist
};

}  // namespace outbox
