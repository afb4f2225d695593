// Checker: one hand-made database and record list per verdict — valid with
// the chapter's duplicates, lost, lost after mark, phantom, atomicity and
// per-aggregate order.
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lab/checker.h"
#include "lab/loans.h"
#include "lab/topic_reader.h"
#include "outbox/sqlite/connection.h"
#include "outbox/store.h"
#include "relay_test_support.h"
#include "test_support.h"

namespace {

using outbox::lab::CheckResult;
using outbox::lab::CheckRun;
using outbox::lab::TopicRecord;
using outbox::testing::TempDir;
using Strings = std::vector<std::string>;
using Duplicates = std::vector<std::pair<std::string, std::int64_t>>;

// A lab database in dir: business_loan and outbox.
class CheckerFixture {
 public:
  CheckerFixture()
      : store(outbox::lab::ResetLabDatabase(dir.File("lab.db"),
                                            outbox::testing::FastStoreOptions())) {}

  // Loans 1..n with their events, committed together (evt-1001 .. on L-1001 ..).
  void WriteLoans(int n) {
    for (int i = 1; i <= n; ++i) outbox::lab::WriteLoanWithEvent(*store, i);
  }
  void MarkAll() {
    for (const outbox::SnapshotRow& row : store->Snapshot().rows) store->MarkPublished(row.id);
  }
  void Mark(const std::string& event_id) {
    for (const outbox::SnapshotRow& row : store->Snapshot().rows)
      if (row.event_id == event_id) REQUIRE(store->MarkPublished(row.id));
  }

  TempDir dir;
  std::unique_ptr<outbox::Store> store;
};

// Records on partition 0 with consecutive offsets, one per event id.
std::vector<TopicRecord> Records(const Strings& event_ids, std::int32_t partition = 0) {
  std::vector<TopicRecord> records;
  std::int64_t offset = 0;
  for (const auto& id : event_ids) {
    TopicRecord record;
    record.partition = partition;
    record.offset = offset++;
    record.key = id;
    record.event_id = id;
    records.push_back(record);
  }
  return records;
}

void CheckNoFindings(const CheckResult& r) {
  CHECK(r.lost.empty());
  CHECK(r.phantom.empty());
  CHECK(r.atomicity.empty());
  CHECK(r.lost_after_mark.empty());
  CHECK(r.stuck.empty());
  CHECK(r.order_violations.empty());
}

}  // namespace

TEST_CASE("CheckRun judges the chapter's run valid: 8 records, 5 events, 3 duplicates",
          "[checker]") {
  CheckerFixture f;
  f.WriteLoans(5);
  f.MarkAll();
  // publish-hold sent 1001..1003 and died before marking; the restart sent all five.
  const auto records = Records({"evt-1001", "evt-1002", "evt-1003", "evt-1001", "evt-1002",
                                "evt-1003", "evt-1004", "evt-1005"});

  const CheckResult r = CheckRun(*f.store, records);

  CHECK(r.valid());
  CHECK(r.business_rows == 5);
  CHECK(r.outbox_rows == 5);
  CHECK(r.kafka_records == 8);
  CHECK(r.ok == 5);
  CHECK(r.duplicated == Duplicates{{"evt-1001", 2}, {"evt-1002", 2}, {"evt-1003", 2}});
  CheckNoFindings(r);
}

TEST_CASE("CheckRun reports an unpublished event missing from Kafka as lost and stuck",
          "[checker]") {
  CheckerFixture f;
  f.WriteLoans(3);
  f.Mark("evt-1001");
  f.Mark("evt-1002");

  const CheckResult r = CheckRun(*f.store, Records({"evt-1001", "evt-1002"}));

  CHECK_FALSE(r.valid());
  CHECK(r.ok == 2);
  CHECK(r.lost == Strings{"evt-1003"});
  CHECK(r.stuck == Strings{"evt-1003"});
  CHECK(r.lost_after_mark.empty());  // never marked: the relay still owes it
  CHECK(r.phantom.empty());
  CHECK(r.atomicity.empty());
  CHECK(r.duplicated.empty());
}

TEST_CASE("CheckRun reports an event marked published yet absent from Kafka as lost after mark",
          "[checker]") {
  CheckerFixture f;
  f.WriteLoans(3);
  f.MarkAll();

  const CheckResult r = CheckRun(*f.store, Records({"evt-1001", "evt-1003"}));

  CHECK_FALSE(r.valid());
  CHECK(r.ok == 2);
  CHECK(r.lost == Strings{"evt-1002"});
  CHECK(r.lost_after_mark == Strings{"evt-1002"});
  CHECK(r.stuck.empty());
  CHECK(r.phantom.empty());
}

TEST_CASE("CheckRun reports a record whose event id is in no outbox row as phantom", "[checker]") {
  CheckerFixture f;
  f.WriteLoans(2);
  f.MarkAll();
  // naive-send-first-hold: evt-2001 sent, then killed before its business transaction committed.
  const CheckResult r =
      CheckRun(*f.store, Records({"evt-1001", "evt-2001", "evt-1002", "evt-2001"}));

  CHECK_FALSE(r.valid());
  CHECK(r.phantom == Strings{"evt-2001"});  // listed once, though seen twice
  CHECK(r.duplicated == Duplicates{{"evt-2001", 2}});
  CHECK(r.ok == 2);
  CHECK(r.kafka_records == 4);
  CHECK(r.lost.empty());
  CHECK(r.atomicity.empty());
}

TEST_CASE("CheckRun reports a loan without an outbox row, and an event without a loan, as "
          "atomicity violations",
          "[checker]") {
  CheckerFixture f;
  f.WriteLoans(2);
  f.MarkAll();

  SECTION("naive-hold: business row L-2001 committed, no outbox row") {
    outbox::lab::Loan loan = outbox::lab::ChapterLoan(1001, f.store->clock().EpochMs());
    loan.book_id = "B-201";
    {
      auto txn = f.store->BeginWrite();
      outbox::lab::InsertLoan(txn.connection(), loan);
      txn.Commit();
    }
    const CheckResult r = CheckRun(*f.store, Records({"evt-1001", "evt-1002"}));
    CHECK_FALSE(r.valid());
    CHECK(r.business_rows == 3);
    CHECK(r.outbox_rows == 2);
    CHECK(r.atomicity == Strings{"loan L-2001 has no outbox row"});
    CHECK(r.lost.empty());
    CHECK(r.phantom.empty());
  }
  SECTION("an outbox row whose loan was never written") {
    auto event = outbox::testing::MakeEvent(7);
    event.aggregate_id = "L-9999";
    {
      auto txn = f.store->BeginWrite();
      f.store->Enqueue(txn, event);
      txn.Commit();
    }
    f.Mark(event.event_id);
    const CheckResult r = CheckRun(*f.store, Records({"evt-1001", "evt-1002", "evt-7"}));
    CHECK_FALSE(r.valid());
    CHECK(r.atomicity == Strings{"event evt-7 has no business row"});
    CHECK(r.ok == 3);
  }
}

TEST_CASE("CheckRun reports a later event of an aggregate seen first on the same partition as an "
          "order violation",
          "[checker]") {
  CheckerFixture f;
  f.WriteLoans(1);  // evt-1001 on L-1001, outbox id 1
  for (const char* id : {"evt-1001-b", "evt-1001-c"}) {  // ids 2, 3 on the same loan
    outbox::OutboxEvent event{id, "L-1001", "LoanUpdated", "{}", 1};
    auto txn = f.store->BeginWrite();
    f.store->Enqueue(txn, event);
    txn.Commit();
  }
  f.MarkAll();

  SECTION("out of order on one partition") {
    const CheckResult r =
        CheckRun(*f.store, Records({"evt-1001", "evt-1001-c", "evt-1001-b"}));
    CHECK(r.order_violations == Strings{"evt-1001-b (aggregate L-1001) after a later event"});
    REQUIRE(r.order_pairs.size() == 1);  // both records, for the report's side-by-side view
    CHECK(r.order_pairs[0].aggregate_id == "L-1001");
    CHECK(r.order_pairs[0].first.event_id == "evt-1001-c");
    CHECK(r.order_pairs[0].first.offset == 1);
    CHECK(r.order_pairs[0].first_outbox_id == 3);
    CHECK(r.order_pairs[0].second.event_id == "evt-1001-b");
    CHECK(r.order_pairs[0].second.offset == 2);
    CHECK(r.order_pairs[0].second_outbox_id == 2);
    CHECK(r.outbox.size() == 3);
    CHECK(r.ok == 3);
    // Order is reported, but at-least-once delivery with event-id keys does
    // not promise it: the run is still valid.
    CHECK(r.valid());
  }
  SECTION("a re-sent duplicate of an earlier event is not a violation") {
    const CheckResult r = CheckRun(
        *f.store, Records({"evt-1001", "evt-1001-b", "evt-1001-c", "evt-1001", "evt-1001-b"}));
    CHECK(r.order_violations.empty());
    CHECK(r.duplicated == Duplicates{{"evt-1001", 2}, {"evt-1001-b", 2}});
  }
  SECTION("on different partitions there is no order to keep") {
    auto records = Records({"evt-1001-c"}, 1);
    const auto rest = Records({"evt-1001", "evt-1001-b"}, 0);
    records.insert(records.end(), rest.begin(), rest.end());
    const CheckResult r = CheckRun(*f.store, records);
    CHECK(r.order_violations.empty());
    CheckNoFindings(r);
  }
}
