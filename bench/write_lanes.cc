// The bench's write-path lanes alone, for instruction counts that noise cannot move
// (docs/benchmark-profile.md, "Eighth round"): business-only transactions (one loan each),
// business+outbox ones (the loan and its outbox row, events built beforehand, as
// `outbox-lab bench` does), or `write`'s own path (lab::WriteLoansWithEvents, events built
// inside). 500 transactions warm the statements and B-trees first; only the next N are counted.
// Under valgrind --tool=callgrind --instr-atstart=no, callgrind counts exactly those N; without
// valgrind the client requests do nothing and the printed time is wall-clock.
//
//   write-lanes business|outbox|write N DB [off|normal|full|extra [SQL]]
//
// DB is replaced (a fresh lab database, `reset`'s schema); SQL, if given, runs on it before the
// lanes (a schema variant, e.g. "DROP INDEX outbox_unpublished", to price one object).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_ZERO_STATS
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#define CALLGRIND_DUMP_STATS
#endif

#include "lab/chapter/loans.h"
#include "outbox/store.h"

namespace {

constexpr long kWarmUpTxns = 500;

int Run(int argc, char** argv) {
  using namespace outbox;
  const std::string lane = argc > 1 ? argv[1] : "";
  if (argc < 4 || (lane != "business" && lane != "outbox" && lane != "write")) {
    fmt::print(stderr,
               "usage: write-lanes business|outbox|write N DB [off|normal|full|extra [SQL]]\n");
    return 2;
  }
  const long n = std::atol(argv[2]);
  const std::string path = argv[3];
  const std::string synchronous = argc > 4 ? argv[4] : "off";
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
  StoreOptions options;
  options.synchronous = ParseSynchronous(synchronous);
  auto store = lab::ResetLabDatabase(path, options);
  if (argc > 5) {
    auto txn = store->BeginWrite();
    txn.connection().Exec(argv[5]);
    txn.Commit();
  }
  std::vector<lab::Loan> loans;
  std::vector<OutboxEvent> events;
  for (long i = 1; i <= kWarmUpTxns + n; ++i) {
    loans.push_back(lab::ChapterLoan(i, store->clock().EpochMs()));
    events.push_back(lab::LoanCreatedEvent(loans.back(), i));
  }
  // Transactions [first, last) of the lane, as bench's RunWrites and `write` do them.
  const auto run = [&](long first, long last) {
    for (long i = first; i < last; ++i) {
      if (lane == "write") {
        lab::WriteLoansWithEvents(*store, {{i + 1, 0}}, nullptr, 0);
        continue;
      }
      auto txn = store->BeginWrite();
      lab::InsertLoan(txn.connection(), loans[i]);
      if (lane == "outbox") store->Enqueue(txn, events[i]);
      txn.Commit();
    }
  };
  run(0, kWarmUpTxns);
  CALLGRIND_ZERO_STATS;
  CALLGRIND_START_INSTRUMENTATION;
  const auto start = std::chrono::steady_clock::now();
  run(kWarmUpTxns, kWarmUpTxns + n);
  const auto end = std::chrono::steady_clock::now();
  CALLGRIND_STOP_INSTRUMENTATION;
  CALLGRIND_DUMP_STATS;
  fmt::print("{} {} txns, synchronous {}: {:.1f} us/txn\n", lane, n, synchronous,
             std::chrono::duration<double, std::micro>(end - start).count() / n);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "write-lanes: error: {}\n", e.what());
    return 1;
  }
}
