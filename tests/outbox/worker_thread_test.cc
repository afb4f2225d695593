// WorkerThread: jobs run in order on one thread other than the caller's, results and exceptions
// reach their futures, and the destructor runs what was posted before it joins.
#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include "outbox/worker_thread.h"

namespace outbox {

TEST_CASE("A worker thread runs its jobs in the order posted on one thread of its own", "[relay]") {
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  std::vector<std::future<void>> done;
  {
    WorkerThread worker;
    for (int i = 0; i < 50; ++i) {
      std::packaged_task<void()> job([i, &order, &threads] {
        order.push_back(i);
        threads.push_back(std::this_thread::get_id());
      });
      done.push_back(job.get_future());
      worker.Post(std::move(job));
    }
    done.back().wait();
  }
  REQUIRE(order.size() == 50);
  for (int i = 0; i < 50; ++i) CHECK(order[static_cast<std::size_t>(i)] == i);
  CHECK(threads.front() != std::this_thread::get_id());
  for (const std::thread::id& id : threads) CHECK(id == threads.front());
}

TEST_CASE("A worker thread's job result and exception reach the job's future", "[relay]") {
  WorkerThread worker;
  std::packaged_task<int()> answer([] { return 42; });
  std::future<int> got = answer.get_future();
  worker.Post(std::packaged_task<void()>([task = std::move(answer)]() mutable { task(); }));
  std::packaged_task<int()> failing([]() -> int { throw std::runtime_error("settle failed"); });
  std::future<int> failed = failing.get_future();
  worker.Post(std::packaged_task<void()>([task = std::move(failing)]() mutable { task(); }));
  CHECK(got.get() == 42);
  CHECK_THROWS_WITH(failed.get(), "settle failed");
}

TEST_CASE("A worker thread's destructor runs the jobs still queued before it joins", "[relay]") {
  int ran = 0;
  std::promise<void> release;
  std::thread releaser;
  {
    WorkerThread worker;
    // The first job holds the thread until the releaser lets it go, so the other 20 are still
    // queued when the destructor begins (unless the releaser is very late: then the test only
    // checks less, it never fails wrongly).
    std::shared_future<void> go = release.get_future().share();
    worker.Post(std::packaged_task<void()>([go] { go.wait(); }));
    for (int i = 0; i < 20; ++i) worker.Post(std::packaged_task<void()>([&ran] { ++ran; }));
    releaser = std::thread([&release] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      release.set_value();
    });
  }
  releaser.join();
  CHECK(ran == 20);
}

}  // namespace outbox
