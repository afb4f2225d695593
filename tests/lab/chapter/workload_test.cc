// The bench's three write workloads: which loan (aggregate) each write touches.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "lab/bench/bench_support.h"
#include "lab/chapter/loans.h"
#include "lab/chapter/workload.h"
#include "outbox/error.h"
#include "outbox/store.h"
#include "test_support.h"

namespace {

using outbox::lab::LoanNumberFor;
using outbox::lab::Workload;

}  // namespace

TEST_CASE("The own workload gives every write its own loan", "[lab]") {
  for (std::int64_t i = 1; i <= 1000; ++i) CHECK(LoanNumberFor(Workload::kOwnAggregate, i) == i);
}

TEST_CASE("The 50 workload cycles over loans 1 to 50 in order", "[lab]") {
  CHECK(LoanNumberFor(Workload::kFiftyAggregates, 1) == 1);
  CHECK(LoanNumberFor(Workload::kFiftyAggregates, 50) == 50);
  CHECK(LoanNumberFor(Workload::kFiftyAggregates, 51) == 1);
  CHECK(LoanNumberFor(Workload::kFiftyAggregates, 1049) == 49);
}

TEST_CASE("The zipf workload stays within 1000 loans and gives loan 1 about 13 percent of writes",
          "[lab]") {
  constexpr std::int64_t kWrites = 100000;
  std::map<std::int64_t, std::int64_t> counts;
  for (std::int64_t i = 1; i <= kWrites; ++i) {
    const std::int64_t loan = LoanNumberFor(Workload::kZipf, i);
    REQUIRE(loan >= 1);
    REQUIRE(loan <= 1000);
    ++counts[loan];
  }
  // Zipf(1) over 1,000: P(k) = (1/k) / H(1000), H(1000) = 7.4855; P(1) = 0.1336, P(2) = 0.0668.
  CHECK(counts[1] == Approx(0.1336 * kWrites).epsilon(0.05));
  CHECK(counts[2] == Approx(0.0668 * kWrites).epsilon(0.08));
  CHECK(counts[1] > counts[10]);
  CHECK(counts[10] > counts[500]);
  CHECK(counts.size() > 900);  // the tail is reached too
  // A pure function of the index: the same run twice is the same run.
  CHECK(LoanNumberFor(Workload::kZipf, 12345) == LoanNumberFor(Workload::kZipf, 12345));
}

TEST_CASE("ParseWorkload reads own 50 and zipf and rejects anything else", "[lab]") {
  CHECK(outbox::lab::ParseWorkload("own") == Workload::kOwnAggregate);
  CHECK(outbox::lab::ParseWorkload("50") == Workload::kFiftyAggregates);
  CHECK(outbox::lab::ParseWorkload("zipf") == Workload::kZipf);
  CHECK_THROWS_AS(outbox::lab::ParseWorkload("uniform"), outbox::ConfigError);
  for (const Workload w : {Workload::kOwnAggregate, Workload::kFiftyAggregates, Workload::kZipf})
    CHECK(outbox::lab::ParseWorkload(outbox::lab::WorkloadName(w)) == w);
}

TEST_CASE("A later write of the same loan renews it and enqueues a LoanRenewed event", "[lab][store]") {
  outbox::testing::TempDir dir;
  auto store = outbox::lab::ResetLabDatabase(dir.File("lab.db"), {});
  const auto first = outbox::lab::WriteLoanWithEvent(*store, 1, nullptr, 7);
  const auto second = outbox::lab::WriteLoanWithEvent(*store, 2, nullptr, 7);

  CHECK(first.event.event_type == "LoanCreated");
  CHECK(second.event.event_type == "LoanRenewed");
  CHECK(second.event.event_id == "evt-1002");
  CHECK(second.event.aggregate_id == "L-1007");
  CHECK(second.loan.status == "RENEWED");
  const auto snapshot = store->Snapshot();
  REQUIRE(snapshot.rows.size() == 2);
  CHECK(snapshot.rows[0].aggregate_id == "L-1007");
  CHECK(snapshot.rows[1].aggregate_id == "L-1007");
  auto txn = store->BeginRead();
  CHECK(outbox::lab::CountLoans(txn.connection()) == 1);
  CHECK(outbox::lab::LoanIds(txn.connection()) == std::vector<std::string>{"L-1007"});
}

TEST_CASE("The bench relay drains a backlog of each workload with its own spread of aggregates",
          "[lab][bench]") {
  outbox::testing::TempDir dir;
  outbox::lab::BenchmarkOptions options;
  options.workload_events = 3000;
  options.batch_size = 500;
  for (const Workload w : {Workload::kOwnAggregate, Workload::kFiftyAggregates, Workload::kZipf}) {
    std::set<std::int64_t> expected_loans;
    for (std::int64_t i = 1; i <= options.workload_events; ++i) expected_loans.insert(LoanNumberFor(w, i));
    outbox::testing::FakePublisher publisher;
    const auto figure = outbox::lab::bench::MeasureRelayOnWorkload(
        options, dir.File("relay-" + outbox::lab::WorkloadName(w) + ".db"), publisher, w);

    CHECK(figure.workload == outbox::lab::WorkloadName(w));
    CHECK(figure.relay.events == options.workload_events);
    CHECK(figure.relay.seconds > 0);
    CHECK(figure.relay.events_per_s == Approx(options.workload_events / figure.relay.seconds));
    CHECK(figure.aggregates == static_cast<std::int64_t>(expected_loans.size()));
    if (w == Workload::kFiftyAggregates) CHECK(figure.aggregates == 50);
    if (w == Workload::kOwnAggregate) CHECK(figure.aggregates == options.workload_events);
    const std::vector<std::string> keys = publisher.SentKeys();
    CHECK(keys.size() == static_cast<std::size_t>(options.workload_events));
    // The relay keys by event id (its default): every event sent exactly once.
    CHECK(std::set<std::string>(keys.begin(), keys.end()).size() == keys.size());
  }
}

TEST_CASE("The bench relay drains a backlog whose every event has its own random 128-bit aggregate id",
          "[lab][bench]") {
  outbox::testing::TempDir dir;
  outbox::lab::BenchmarkOptions options;
  options.workload_events = 3000;
  options.batch_size = 500;
  outbox::testing::FakePublisher publisher;
  const auto figure = outbox::lab::bench::MeasureRelayOnRandomKeys(
      options, dir.File("relay-random-keys.db"), publisher);
  CHECK(figure.workload == "random-keys");
  CHECK(figure.relay.events == options.workload_events);
  CHECK(figure.aggregates == options.workload_events);
  const std::vector<std::string> keys = publisher.SentKeys();
  CHECK(std::set<std::string>(keys.begin(), keys.end()).size() == 3000);
  // The aggregate ids as stored: 32 hex digits each, the same in every run (splitmix64 of 0 and
  // 1 for the first row, as a Python transcription of the published algorithm gives them).
  outbox::Store store(dir.File("relay-random-keys.db"), outbox::StoreOptions{},
                      outbox::OpenMode::kExisting);
  const auto snapshot = store.Snapshot();
  REQUIRE(snapshot.rows.size() == 3000);
  std::set<std::string> aggregates;
  for (const auto& row : snapshot.rows) {
    CHECK(row.aggregate_id.size() == 32);
    CHECK(row.aggregate_id.find_first_not_of("0123456789abcdef") == std::string::npos);
    aggregates.insert(row.aggregate_id);
  }
  CHECK(aggregates.size() == 3000);
  CHECK(snapshot.rows[0].aggregate_id == "e220a8397b1dcdaf910a2dec89025cc1");
  // Not in id order: the point of the lane.
  CHECK_FALSE(std::is_sorted(snapshot.rows.begin(), snapshot.rows.end(),
                             [](const auto& a, const auto& b) { return a.aggregate_id < b.aggregate_id; }));
}
