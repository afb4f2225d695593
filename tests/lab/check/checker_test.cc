// Checker: one hand-made database and record list per verdict — valid with
// the chapter's duplicates, lost, lost after mark, phantom, atomicity and
// per-aggregate order.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "lab/chapter/loans.h"
#include "outbox/clock.h"
#include "lab/check/checker.h"
#include "lab/check/reconciliation.h"
#include "outbox/error.h"
#include "lab/check/topic_reader.h"
#include "lab/check/verdict_text.h"
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

TEST_CASE("CheckRun judges the chapter's run valid with 8 records of 5 events and 3 duplicates",
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

TEST_CASE("A duplicate makes an exactly-once run read read_committed invalid", "[checker]") {
  CheckerFixture f;
  f.WriteLoans(5);
  f.MarkAll();
  const auto records = Records({"evt-1001", "evt-1002", "evt-1003", "evt-1001", "evt-1004",
                                "evt-1005"});

  CheckResult r = CheckRun(*f.store, records);
  CHECK(r.verdict() == outbox::lab::Verdict::kValid);  // at-least-once: the price, allowed
  r.duplicates_forbidden = true;

  CHECK(r.verdict() == outbox::lab::Verdict::kInvalid);
  CHECK(r.has_findings());
}

TEST_CASE("An exactly-once run without duplicates stays valid where duplicates are forbidden",
          "[checker]") {
  CheckerFixture f;
  f.WriteLoans(5);
  f.MarkAll();
  CheckResult r = CheckRun(
      *f.store, Records({"evt-1001", "evt-1002", "evt-1003", "evt-1004", "evt-1005"}));
  r.duplicates_forbidden = true;
  CHECK(r.verdict() == outbox::lab::Verdict::kValid);
}

TEST_CASE("CheckRun reports an unpublished event missing from Kafka as pending and not lost",
          "[checker]") {
  CheckerFixture f;
  f.WriteLoans(3);
  f.Mark("evt-1001");
  f.Mark("evt-1002");

  const CheckResult r = CheckRun(*f.store, Records({"evt-1001", "evt-1002"}));

  // The outbox row is committed: the relay will send it (chapter 7.1). Not lost, not drained.
  CHECK(r.verdict() == outbox::lab::Verdict::kNotDrained);
  CHECK_FALSE(r.valid());
  CHECK_FALSE(r.has_findings());
  CHECK(r.ok == 2);
  CHECK(r.lost.empty());
  CHECK(r.pending == Strings{"evt-1003"});
  CHECK(r.parked.empty());
  CHECK(r.stuck == Strings{"evt-1003"});
  CHECK(r.lost_after_mark.empty());  // never marked: the relay still owes it
  CHECK(r.phantom.empty());
  CHECK(r.atomicity.empty());
  CHECK(r.duplicated.empty());
}

TEST_CASE("CheckRun counts a row sent but not marked as ok and still pending", "[checker]") {
  CheckerFixture f;
  f.WriteLoans(2);
  f.Mark("evt-1001");

  const CheckResult r = CheckRun(*f.store, Records({"evt-1001", "evt-1002"}));

  CHECK(r.ok == 2);
  CHECK(r.pending == Strings{"evt-1002"});  // the relay will send it again (at-least-once)
  CHECK(r.lost.empty());
  CHECK(r.verdict() == outbox::lab::Verdict::kNotDrained);
}

TEST_CASE("CheckRun judges a published event missing from a truncated log as unjudgeable not lost",
          "[checker]") {
  CheckerFixture f;
  f.WriteLoans(4);
  f.MarkAll();
  // The broker dropped offsets 0 and 1 (retention); evt-1003 and evt-1004 are what is left.
  std::vector<TopicRecord> records = Records({"evt-1003", "evt-1004"});
  for (TopicRecord& record : records) record.offset += 2;
  const std::vector<outbox::lab::PartitionExtent> partitions = {{0, 2, 4}};

  const CheckResult r = CheckRun(*f.store, records, nullptr, partitions);

  CHECK(r.lost.empty());
  CHECK(r.lost_after_mark.empty());
  CHECK(r.retention_unknown == Strings{"evt-1001", "evt-1002"});
  CHECK(r.dropped_offsets == 2);
  CHECK(r.ok == 2);
  CHECK(r.verdict() == outbox::lab::Verdict::kCannotJudge);
  CHECK(outbox::lab::CheckValues(r).at("retention_unknown") == 2);

  // The same records on a log that starts at 0: the two are lost for good.
  const CheckResult complete = CheckRun(*f.store, records, nullptr, {{0, 0, 4}});
  CHECK(complete.lost == Strings{"evt-1001", "evt-1002"});
  CHECK(complete.retention_unknown.empty());
  CHECK(complete.verdict() == outbox::lab::Verdict::kInvalid);
}

TEST_CASE("CheckRun counts published events retention cannot explain as lost beyond retention",
          "[checker]") {
  CheckerFixture f;
  f.WriteLoans(5);
  f.MarkAll();
  // One offset dropped, four published events missing: at most one was dropped.
  std::vector<TopicRecord> records = Records({"evt-1005"});
  for (TopicRecord& record : records) record.offset += 1;

  const CheckResult r = CheckRun(*f.store, records, nullptr, {{0, 1, 2}});

  CHECK(r.retention_unknown == Strings{"evt-1001", "evt-1002", "evt-1003", "evt-1004"});
  CHECK(r.dropped_offsets == 1);
  CHECK(r.lost_beyond_retention == 3);
  CHECK(r.verdict() == outbox::lab::Verdict::kInvalid);
  CHECK(outbox::lab::CheckValues(r).at("lost_beyond_retention") == 3);

  // Four offsets dropped: each missing event may have been among them.
  const CheckResult explained = CheckRun(*f.store, records, nullptr, {{0, 4, 5}});
  CHECK(explained.lost_beyond_retention == 0);
  CHECK(explained.verdict() == outbox::lab::Verdict::kCannotJudge);
}

TEST_CASE("CheckRun puts a finding before retention and retention before unpublished rows",
          "[checker]") {
  CheckerFixture f;
  f.WriteLoans(3);
  f.Mark("evt-1001");
  f.Mark("evt-1002");
  const std::vector<outbox::lab::PartitionExtent> truncated = {{0, 5, 6}};

  // evt-1001 unjudgeable, evt-1003 pending: cannot judge comes first, since sending evt-1003
  // cannot bring back what the broker dropped.
  const CheckResult pending = CheckRun(*f.store, Records({"evt-1002"}), nullptr, truncated);
  CHECK(pending.retention_unknown == Strings{"evt-1001"});
  CHECK(pending.pending == Strings{"evt-1003"});
  CHECK(pending.verdict() == outbox::lab::Verdict::kCannotJudge);

  // A phantom is a finding whatever else is unfinished.
  const CheckResult phantom =
      CheckRun(*f.store, Records({"evt-1002", "evt-9999"}), nullptr, truncated);
  CHECK(phantom.verdict() == outbox::lab::Verdict::kInvalid);
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

TEST_CASE("CheckRun takes an event marked after the topic read as published during the read "
          "not lost",
          "[checker]") {
  CheckerFixture f;
  f.WriteLoans(3);
  f.Mark("evt-1001");
  f.Mark("evt-1002");
  // What check reads before the topic: 1001 and 1002 published. A live relay then sends 1003
  // past the end the topic read fixed, and marks it before the second read.
  const auto before = outbox::lab::PublishedEventIds(*f.store);
  CHECK(before == std::unordered_set<std::string>{"evt-1001", "evt-1002"});
  f.Mark("evt-1003");

  const CheckResult live = CheckRun(*f.store, Records({"evt-1002"}), nullptr, {}, {}, nullptr,
                                    nullptr, &before);
  CHECK(live.verdict() == outbox::lab::Verdict::kInvalid);  // 1001 was published before: lost
  CHECK(live.lost == Strings{"evt-1001"});
  CHECK(live.published_during_read == Strings{"evt-1003"});

  const CheckResult behind = CheckRun(*f.store, Records({"evt-1001", "evt-1002"}), nullptr, {},
                                      {}, nullptr, nullptr, &before);
  CHECK(behind.verdict() == outbox::lab::Verdict::kNotDrained);
  CHECK(behind.lost.empty());
  CHECK(behind.lost_after_mark.empty());
  CHECK(behind.ok == 2);
  CHECK(outbox::lab::CheckValues(behind).at("published_during_read") == 1);
  // Without the earlier read (a caller that has none), the same event is lost.
  CHECK(CheckRun(*f.store, Records({"evt-1001", "evt-1002"})).lost == Strings{"evt-1003"});
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

TEST_CASE("CheckRun reports a loan without an outbox row and an event without a loan as "
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
    outbox::OutboxEvent event{id, "L-1001", "LoanUpdated", "{}", outbox::testing::kNowMs};
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

TEST_CASE("CheckRun judges the order of an aggregate whose rows a foreign writer gave id 0 and "
          "negative ids by their ids",
          "[checker]") {
  CheckerFixture f;
  f.WriteLoans(1);  // evt-1001 on L-1001, outbox id 1
  {
    auto txn = f.store->BeginWrite();
    for (const auto& [id, event_id] : std::vector<std::pair<std::int64_t, std::string>>{
             {std::numeric_limits<std::int64_t>::min(), "evt-foreign-min"},
             {-7, "evt-foreign-7"},
             {0, "evt-foreign-0"}}) {
      auto insert = txn.connection().Prepare(
          "INSERT INTO outbox(id, event_id, aggregate_id, event_type, payload) "
          "VALUES (?1, ?2, 'L-1001', 'LoanUpdated', '{}')");
      insert.Bind(1, id).Bind(2, event_id).Run();
    }
    txn.Commit();
  }
  f.MarkAll();

  SECTION("in id order: no violation") {
    const CheckResult r = CheckRun(
        *f.store, Records({"evt-foreign-min", "evt-foreign-7", "evt-foreign-0", "evt-1001"}));
    CheckNoFindings(r);
    CHECK(r.ok == 4);
  }
  SECTION("an id below 0 after a later one: a violation between the two rows") {
    const CheckResult r = CheckRun(
        *f.store, Records({"evt-foreign-min", "evt-foreign-0", "evt-foreign-7", "evt-1001"}));
    CHECK(r.order_violations == Strings{"evt-foreign-7 (aggregate L-1001) after a later event"});
    REQUIRE(r.order_pairs.size() == 1);
    CHECK(r.order_pairs[0].first_outbox_id == 0);
    CHECK(r.order_pairs[0].second_outbox_id == -7);
  }
}

TEST_CASE("CheckRun reports an aggregate seen on two partitions as an order hazard without changing the verdict",
          "[checker]") {
  CheckerFixture f;
  f.WriteLoans(2);  // evt-1001 on L-1001 (id 1), evt-1002 on L-1002 (id 2)
  for (const char* id : {"evt-1001-b", "evt-1001-c"}) {  // ids 3, 4 on L-1001
    outbox::OutboxEvent event{id, "L-1001", "LoanUpdated", "{}", outbox::testing::kNowMs};
    auto txn = f.store->BeginWrite();
    f.store->Enqueue(txn, event);
    txn.Commit();
  }
  f.MarkAll();
  // Keyed by aggregate id: L-1001 went to partition 3, then (another partitioner) to 5.
  const auto keyed = [](std::vector<TopicRecord> records, const std::string& aggregate) {
    for (TopicRecord& record : records) record.key = aggregate;
    return records;
  };
  auto records = keyed(Records({"evt-1001", "evt-1001-b"}, 3), "L-1001");
  for (const auto& rest : {keyed(Records({"evt-1001-c"}, 5), "L-1001"),
                           keyed(Records({"evt-1002"}, 3), "L-1002")})
    records.insert(records.end(), rest.begin(), rest.end());

  SECTION("keyed by aggregate id the mapping moved") {
    const CheckResult r = CheckRun(*f.store, records);
    REQUIRE(r.order_hazards.size() == 1);
    CHECK(r.order_hazards[0].aggregate_id == "L-1001");
    CHECK(r.order_hazards[0].partitions == std::vector<std::int32_t>{3, 5});
    CHECK(r.order_hazards[0].keyed_by_aggregate);
    CHECK(r.order_violations.empty());  // each partition on its own is in order
    CHECK(outbox::lab::CheckValues(r).at("order_hazards") == 1);
    CHECK(r.valid());  // order is reported apart from the delivery verdict, as violations are
  }
  SECTION("keyed by event id the aggregate was never pinned") {
    records[2].key = "evt-1001-c";
    const CheckResult r = CheckRun(*f.store, records);
    REQUIRE(r.order_hazards.size() == 1);
    CHECK_FALSE(r.order_hazards[0].keyed_by_aggregate);
  }
  SECTION("a re-sent copy on another partition is a hazard too") {
    auto resent = keyed(Records({"evt-1002"}, 6), "L-1002");
    records.insert(records.end(), resent.begin(), resent.end());
    const CheckResult r = CheckRun(*f.store, records);
    REQUIRE(r.order_hazards.size() == 2);
    CHECK(r.order_hazards[1].aggregate_id == "L-1002");
    CHECK(r.order_hazards[1].partitions == std::vector<std::int32_t>{3, 6});
  }
  SECTION("every aggregate on one partition is no hazard") {
    for (TopicRecord& record : records) record.partition = 0;
    CHECK(CheckRun(*f.store, records).order_hazards.empty());
  }
}

TEST_CASE("CheckRun names the duplicated events whose copies differ in value", "[checker]") {
  CheckerFixture f;
  f.WriteLoans(2);
  f.MarkAll();
  std::vector<TopicRecord> records = Records({"evt-1001", "evt-1002", "evt-1001", "evt-1002"});
  records[0].value = records[2].value = R"({"bookId":"B-101"})";
  records[1].value = R"({"bookId":"B-102"})";
  records[3].value = R"({"bookId":"B-999"})";  // evt-1002's row was changed between the sends

  const CheckResult r = CheckRun(*f.store, records);

  CHECK(r.duplicated.size() == 2);
  CHECK(r.duplicated_changed == Strings{"evt-1002"});
  CHECK(r.verdict() == outbox::lab::Verdict::kValid);
}

TEST_CASE("CheckValues gives check --expect every key with the report's numbers and list sizes",
          "[checker]") {
  CheckerFixture f;
  f.WriteLoans(3);
  f.Mark("evt-1001");
  const CheckResult r = CheckRun(*f.store, Records({"evt-1001", "evt-1001", "evt-1002"}));

  const auto values = outbox::lab::CheckValues(r);

  CHECK(values == std::map<std::string, std::int64_t>{
                      {"valid", 0},        {"business_rows", 3},   {"outbox_rows", 3},
                      {"kafka_records", 3}, {"ok", 2},             {"lost", 0},
                      {"duplicated", 1},   {"phantom", 0},         {"atomicity", 0},
                      {"reused_event_ids", 0},
                      {"lost_after_mark", 0}, {"stuck", 2},        {"order_violations", 0},
                      {"order_hazards", 0},
                      {"pending", 2},      {"parked", 0},          {"retention_unknown", 0},
                      {"lost_beyond_retention", 0},
                      {"other_run_records", 0}, {"undone", 0},   {"undone_phantom", 0},
                      {"corrupt", 0},      {"restart_unknown", 0},
                      {"published_during_read", 0}});
  // Every value has a key check --expect accepts; history keys only with a history.
  const auto& keys = outbox::lab::CheckExpectationKeys();
  for (const auto& [key, value] : values) {
    INFO("key " << key);
    CHECK(std::count(keys.begin(), keys.end(), key) == 1);
  }
  const std::vector<outbox::lab::HistoryOp> no_ops;
  CHECK(outbox::lab::CheckValues(CheckRun(*f.store, {}, &no_ops)).count("history_attempts") == 1);
}

TEST_CASE("ParseExpectations over check keys accepts them and rejects a verify key", "[checker]") {
  const auto& keys = outbox::lab::CheckExpectationKeys();
  CHECK(outbox::lab::ParseExpectations("valid=1,lost=0,duplicated=3", keys) ==
        std::map<std::string, std::int64_t>{{"valid", 1}, {"lost", 0}, {"duplicated", 3}});
  const auto error = outbox::testing::CaptureThrow<outbox::ConfigError>(
      [&] { outbox::lab::ParseExpectations("business=5", keys); });
  REQUIRE(error.has_value());
  CHECK_THAT(error->what(), Catch::Contains("unknown key; use valid, business_rows"));
}

namespace {

outbox::lab::HistoryOp Op(std::int64_t process, const std::string& type, const std::string& f,
                          const std::string& value, const std::string& error = {},
                          std::int64_t token = 0) {
  outbox::lab::HistoryOp op;
  op.process = process;
  op.type = type;
  op.f = f;
  op.value = value;
  op.error = error;
  op.token = token;
  return op;
}

}  // namespace

TEST_CASE("CheckRun with history counts a mark without an earlier ack of the same process as "
          "lost-after-mark evidence",
          "[checker]") {
  CheckerFixture f;
  f.WriteLoans(2);
  f.MarkAll();
  const std::vector<outbox::lab::HistoryOp> ops = {
      Op(1, "invoke", "txn", "evt-1001"), Op(1, "ok", "txn", "evt-1001"),
      Op(1, "invoke", "txn", "evt-1002"), Op(1, "ok", "txn", "evt-1002"),
      // relay 7: evt-1001 acked then marked; evt-1002 marked with no ack before it (the mark
      // came first and the ack later, or never) although a record reached Kafka.
      Op(7, "invoke", "send", "evt-1001"), Op(7, "ok", "send", "evt-1001"),
      Op(7, "ok", "mark", "evt-1001", {}, 3), Op(7, "ok", "mark", "evt-1002", {}, 3),
      Op(7, "ok", "send", "evt-1002"),
      // another process's ack does not justify relay 7's mark
      Op(8, "ok", "send", "evt-1002")};

  const CheckResult r = CheckRun(*f.store, Records({"evt-1001", "evt-1002"}), &ops);

  CHECK(r.history.marked == 2);
  CHECK(r.history.marked_without_ack == Strings{"evt-1002"});
  CHECK(r.lost_after_mark == Strings{"evt-1002"});
  CHECK_FALSE(r.valid());
}

TEST_CASE("CheckRun with history explains the duplicates of a fenced settle and counts parks",
          "[checker]") {
  CheckerFixture f;
  f.WriteLoans(3);
  f.MarkAll();
  const std::vector<outbox::lab::HistoryOp> ops = {
      // relay 7 sent evt-1001 and evt-1002, lost its claim (token 4) to relay 9 (token 5).
      Op(7, "ok", "send", "evt-1001"), Op(7, "ok", "send", "evt-1002"),
      Op(9, "ok", "send", "evt-1001"), Op(9, "ok", "send", "evt-1002"),
      Op(9, "ok", "mark", "evt-1001", {}, 5), Op(9, "ok", "mark", "evt-1002", {}, 5),
      Op(7, "fail", "mark", "evt-1001", "fenced", 4), Op(7, "fail", "mark", "evt-1002", "fenced", 4),
      Op(9, "ok", "send", "evt-1003"), Op(9, "ok", "mark", "evt-1003", {}, 6),
      Op(9, "ok", "park", "evt-9001", {}, 6)};

  const CheckResult r = CheckRun(
      *f.store, Records({"evt-1001", "evt-1002", "evt-1001", "evt-1002", "evt-1003", "evt-1003"}),
      &ops);

  CHECK(r.history.marked == 3);
  CHECK(r.history.fenced == 2);
  CHECK(r.history.parked == 1);
  CHECK(r.history.marked_without_ack.empty());
  // evt-1003 is duplicated too, but no fenced settle explains it.
  CHECK(r.history.fenced_duplicates == Strings{"evt-1001", "evt-1002"});
  CHECK(r.lost_after_mark.empty());
  const auto values = outbox::lab::CheckValues(r);
  CHECK(values.at("history_fenced_duplicates") == 2);
  CHECK(values.at("history_marked_without_ack") == 0);
}

TEST_CASE("CheckRun with history counts a duplicate sent once as a producer duplicate apart from "
          "relay re-sends",
          "[checker]") {
  CheckerFixture f;
  f.WriteLoans(3);
  f.MarkAll();
  const std::vector<outbox::lab::HistoryOp> ops = {
      // evt-1001: sent by publish-hold (process 3), killed before the mark, sent again by
      // publish (process 4): a relay re-send. evt-1002: one send, written twice (a producer
      // retry after a leader died mid-request). evt-1003: once, once.
      Op(3, "invoke", "send", "evt-1001"), Op(3, "ok", "send", "evt-1001"),
      Op(4, "invoke", "send", "evt-1001"), Op(4, "ok", "send", "evt-1001"),
      Op(4, "ok", "mark", "evt-1001"),
      Op(4, "invoke", "send", "evt-1002"), Op(4, "ok", "send", "evt-1002"),
      Op(4, "ok", "mark", "evt-1002"),
      Op(4, "invoke", "send", "evt-1003"), Op(4, "ok", "send", "evt-1003"),
      Op(4, "ok", "mark", "evt-1003")};

  const CheckResult r = CheckRun(
      *f.store, Records({"evt-1001", "evt-1002", "evt-1002", "evt-1001", "evt-1003"}), &ops);

  CheckNoFindings(r);
  CHECK(r.duplicated == Duplicates{{"evt-1001", 2}, {"evt-1002", 2}});
  CHECK(r.history.producer_duplicates == Strings{"evt-1002"});
  CHECK(r.history.fenced_duplicates.empty());
  CHECK(outbox::lab::CheckValues(r).at("history_producer_duplicates") == 1);
}

TEST_CASE("A relay settle is recorded as marks and fenced marks and parks with its token and read "
          "back",
          "[checker]") {
  TempDir dir;
  const std::string path = dir.File("history.jsonl");
  {
    outbox::SystemClock clock;
    outbox::lab::History history(path, clock);
    outbox::lab::RecordSettle(&history, 12, {"evt-1"}, {"evt-2"}, {"evt-3"});
    outbox::lab::RecordSettle(nullptr, 13, {"evt-4"}, {}, {});  // no history: nothing
  }
  std::int64_t malformed = 0;
  const auto ops = outbox::lab::ReadHistories({path}, &malformed);

  CHECK(malformed == 0);
  REQUIRE(ops.size() == 3);
  CHECK((ops[0].type == "ok" && ops[0].f == "mark" && ops[0].value == "evt-1" && ops[0].token == 12));
  CHECK((ops[1].type == "fail" && ops[1].f == "mark" && ops[1].value == "evt-3" &&
         ops[1].error == "fenced" && ops[1].token == 12));
  CHECK((ops[2].type == "ok" && ops[2].f == "park" && ops[2].value == "evt-2" && ops[2].token == 12));
}

TEST_CASE("A history kept across a reset is judged from the reset on and not as undone commits",
          "[checker]") {
  CheckerFixture f;
  f.WriteLoans(3);
  f.MarkAll();
  const auto op = [](std::int64_t time_ms, const char* type, const char* what, const char* id) {
    outbox::lab::HistoryOp o;
    o.process = 7;
    o.time_ms = time_ms;
    o.type = type;
    o.f = what;
    o.value = id;
    return o;
  };
  // Run 1 committed evt-1001..evt-1005; the reset; run 2 committed evt-1001..evt-1003.
  std::vector<outbox::lab::HistoryOp> ops;
  for (const char* id : {"evt-1001", "evt-1002", "evt-1003", "evt-1004", "evt-1005"}) {
    ops.push_back(op(1000, "invoke", "txn", id));
    ops.push_back(op(1001, "ok", "txn", id));
  }
  ops.push_back(op(2000, "ok", outbox::lab::kResetOp, "run-2"));
  // Run 2's records, the first of them with a clock stepped back: order in the file counts.
  for (const char* id : {"evt-1001", "evt-1002", "evt-1003"}) {
    ops.push_back(op(1500, "invoke", "txn", id));
    ops.push_back(op(2002, "ok", "txn", id));
  }
  // Another database sharing the history resets too: that cuts nothing of this run.
  ops.push_back(op(3000, "ok", outbox::lab::kResetOp, "run-of-another-database"));
  const auto records = Records({"evt-1001", "evt-1002", "evt-1003"});
  // Read whole, run 1's evt-1004 and evt-1005 look like commits a power cut undid.
  CHECK(CheckRun(*f.store, records, &ops).undone == Strings{"evt-1004", "evt-1005"});

  // The other database's reset came after this run's: its records would count as this run's.
  CHECK(outbox::lab::OtherRunsInHistory(ops, "run-2") == Strings{"run-of-another-database"});
  CHECK(outbox::lab::OtherRunsInHistory(ops, "run-of-another-database").empty());
  std::vector<outbox::lab::HistoryOp> copy = ops;
  CHECK(outbox::lab::DropBeforeLastReset(copy, "run-of-nobody") == 0);  // markers only
  CHECK(copy.size() == ops.size() - 2);
  CHECK(outbox::lab::DropBeforeLastReset(ops, "run-2") == 10);
  CHECK(ops.size() == 6);

  const CheckResult r = CheckRun(*f.store, records, &ops);
  CHECK(r.undone.empty());
  CHECK(r.history.acknowledged == 3);
  CHECK(r.verdict() == outbox::lab::Verdict::kValid);
  std::vector<outbox::lab::HistoryOp> no_reset = {op(5, "ok", "txn", "evt-1001")};
  CHECK(outbox::lab::DropBeforeLastReset(no_reset, "run-2") == 0);
  CHECK(no_reset.size() == 1);
}

TEST_CASE("Phase records carry a monotonic time and the token and the checker ignores them",
          "[checker]") {
  TempDir dir;
  const std::string path = dir.File("history.jsonl");
  {
    outbox::ManualClock clock(1'700'000'000'000);
    clock.AdvanceMs(5);
    outbox::lab::History history(path, clock);
    outbox::lab::NotePhase(&history, "claim", 12);
    clock.AdvanceMs(3);
    outbox::lab::NotePhase(&history, "acked", 12);
    outbox::lab::NotePhase(nullptr, "mark", 12);  // no history: nothing
  }
  std::int64_t malformed = 0;
  const auto ops = outbox::lab::ReadHistories({path}, &malformed);
  CHECK(malformed == 0);
  REQUIRE(ops.size() == 2);
  CHECK((ops[0].type == "note" && ops[0].f == "phase" && ops[0].value == "claim" &&
         ops[0].token == 12));
  CHECK(ops[1].value == "acked");
  const auto mono_us = [](const outbox::lab::HistoryOp& op) {
    return nlohmann::json::parse(op.details).at("mono_us").get<std::int64_t>();
  };
  // The phase time is the clock's monotonic reading, in µs.
  CHECK(mono_us(ops[0]) == 5'000);
  CHECK(mono_us(ops[1]) == 8'000);

  CheckerFixture f;
  f.WriteLoans(1);
  f.MarkAll();
  std::vector<outbox::lab::HistoryOp> with_phases = ops;
  with_phases.push_back(Op(1, "invoke", "txn", "evt-1001"));
  with_phases.push_back(Op(1, "ok", "txn", "evt-1001"));
  with_phases.push_back(Op(7, "ok", "send", "evt-1001"));
  with_phases.push_back(Op(7, "ok", "mark", "evt-1001", {}, 12));
  const CheckResult r = CheckRun(*f.store, Records({"evt-1001"}), &with_phases);
  CHECK(r.valid());
  CHECK(r.history.marked == 1);
  CHECK(r.history.unexpected.empty());
}

TEST_CASE("CheckRun with two writers of one event id judges the committed one ok in either "
          "history order",
          "[checker]") {
  CheckerFixture f;
  f.WriteLoans(1);
  f.MarkAll();
  // Writer 11 paused before its commit, writer 12 failed on the same event id (the unique key),
  // then writer 11 committed. Read as hA then hB, the failure comes last.
  const std::vector<outbox::lab::HistoryOp> writer_a = {Op(11, "invoke", "txn", "evt-1001"),
                                                        Op(11, "ok", "txn", "evt-1001")};
  const std::vector<outbox::lab::HistoryOp> writer_b = {Op(12, "invoke", "txn", "evt-1001"),
                                                        Op(12, "fail", "txn", "evt-1001")};
  for (const bool a_first : {true, false}) {
    std::vector<outbox::lab::HistoryOp> ops = a_first ? writer_a : writer_b;
    const auto& second = a_first ? writer_b : writer_a;
    ops.insert(ops.end(), second.begin(), second.end());

    const CheckResult r = CheckRun(*f.store, Records({"evt-1001"}), &ops);

    INFO("writer A's history read first: " << a_first);
    CHECK(r.phantom.empty());
    CHECK(r.history.acknowledged == 1);
    CHECK(r.history.failed == 0);
    CHECK(r.history.ok == 1);
    CHECK(r.valid());
  }
}

TEST_CASE("TxnOutcomes calls an event failed only when every attempt of every process failed",
          "[checker]") {
  const std::vector<outbox::lab::HistoryOp> ops = {
      // evt-1: one process, a failed attempt then a committed retry
      Op(1, "invoke", "txn", "evt-1"), Op(1, "fail", "txn", "evt-1"),
      Op(1, "invoke", "txn", "evt-1"), Op(1, "ok", "txn", "evt-1"),
      // evt-2: a committed attempt, then another process fails on the same id
      Op(2, "invoke", "txn", "evt-2"), Op(2, "ok", "txn", "evt-2"),
      Op(3, "invoke", "txn", "evt-2"), Op(3, "fail", "txn", "evt-2"),
      // evt-3: two processes, both failed
      Op(2, "invoke", "txn", "evt-3"), Op(2, "fail", "txn", "evt-3"),
      Op(3, "invoke", "txn", "evt-3"), Op(3, "fail", "txn", "evt-3"),
      // evt-4: one failed, one killed while open: it may have committed
      Op(3, "invoke", "txn", "evt-4"), Op(3, "fail", "txn", "evt-4"),
      Op(4, "invoke", "txn", "evt-4"),
      // evt-5: a process's failed retry after its own commit
      Op(5, "invoke", "txn", "evt-5"), Op(5, "ok", "txn", "evt-5"),
      Op(5, "invoke", "txn", "evt-5"), Op(5, "fail", "txn", "evt-5")};

  const auto outcomes = outbox::lab::TxnOutcomes(ops);

  CHECK(outcomes == std::map<std::string, std::string>{{"evt-1", "ok"},
                                                       {"evt-2", "ok"},
                                                       {"evt-3", "fail"},
                                                       {"evt-4", "info"},
                                                       {"evt-5", "ok"}});
}

TEST_CASE("CheckRun judges published events missing after a broker restart as unjudgeable and "
          "not lost",
          "[checker]") {
  CheckerFixture f;
  f.WriteLoans(3);
  f.MarkAll();
  f.store->NoteBrokerIncarnation("embedded:00000000000000a1");
  // The broker restarted: the new one holds only what was sent to it since (evt-1003 again).
  const CheckResult restarted =
      CheckRun(*f.store, Records({"evt-1003"}), nullptr, {}, "embedded:00000000000000b2");

  CHECK(restarted.lost.empty());
  CHECK(restarted.lost_after_mark.empty());
  CHECK(restarted.restart_unknown == Strings{"evt-1001", "evt-1002"});
  CHECK(restarted.ok == 1);
  CHECK(restarted.broker_restart.restarted);
  CHECK(restarted.broker_restart.embedded);
  CHECK(restarted.broker_restart.gone == "embedded:00000000000000a1");
  CHECK(restarted.verdict() == outbox::lab::Verdict::kCannotJudge);
  CHECK(outbox::lab::CheckValues(restarted).at("restart_unknown") == 2);

  // The same broker: the two are lost for real.
  const CheckResult same =
      CheckRun(*f.store, Records({"evt-1003"}), nullptr, {}, "embedded:00000000000000a1");
  CHECK(same.lost == Strings{"evt-1001", "evt-1002"});
  CHECK(same.restart_unknown.empty());
  CHECK(same.verdict() == outbox::lab::Verdict::kInvalid);
}

TEST_CASE("JudgeBrokerRestart needs a known current incarnation that differs from a noted one",
          "[checker]") {
  using outbox::lab::JudgeBrokerRestart;
  CHECK_FALSE(JudgeBrokerRestart({}, "embedded:b").restarted);
  CHECK_FALSE(JudgeBrokerRestart({"embedded:a"}, "").restarted);
  CHECK_FALSE(JudgeBrokerRestart({"embedded:a"}, "embedded:a").restarted);
  CHECK(JudgeBrokerRestart({"embedded:a", "embedded:b"}, "embedded:b").restarted);
  const auto cluster = JudgeBrokerRestart({"cluster:X"}, "cluster:Y");
  CHECK(cluster.restarted);
  CHECK_FALSE(cluster.embedded);
  CHECK_THAT(outbox::lab::BrokerRestartReason(cluster),
             Catch::Contains("another Kafka cluster (cluster:X) than the one read now (cluster:Y)"));
  CHECK(outbox::lab::BrokerRestartReason(JudgeBrokerRestart({"embedded:a"}, "embedded:b")) ==
        "the embedded broker was restarted after these were published (it keeps records in "
        "memory); rerun from reset (or, when --brokers names another embedded broker than the "
        "run's, check --brokers)");
  CHECK(outbox::lab::BrokerRestartNote(JudgeBrokerRestart({"embedded:a"}, "embedded:a")).empty());
  CHECK_THAT(outbox::lab::BrokerRestartNote(JudgeBrokerRestart({"embedded:a"}, "embedded:b")),
             Catch::StartsWith("the embedded broker was restarted during this run"));
}

TEST_CASE("CheckRun counts events purged after publishing as published and never phantom",
          "[checker]") {
  CheckerFixture f;
  f.WriteLoans(10);
  f.MarkAll();
  const bool archive = GENERATE(false, true);
  INFO("archive " << archive);
  REQUIRE(f.store->PurgePublished(std::numeric_limits<std::int64_t>::max(), 4, archive).deleted ==
          10);
  Strings ids;
  for (int i = 1; i <= 10; ++i) ids.push_back("evt-" + std::to_string(1000 + i));

  const CheckResult r = CheckRun(*f.store, Records(ids));

  CHECK(r.valid());
  CHECK(r.ok == 10);
  CHECK(r.outbox_rows == 10);
  CheckNoFindings(r);

  // verify: the records are the purged events, not unexpected ones; no loan is an orphan.
  const outbox::lab::DbSnapshot db = outbox::lab::TakeDbSnapshot(*f.store);
  CHECK(db.outbox.total == 0);
  CHECK(db.archived_event_ids.size() == 10);
  outbox::lab::TopicLog log;
  log.records = Records(ids);
  log.topic_exists = true;
  for (auto& record : log.records) record.run_id = db.run_id;
  const outbox::lab::KafkaReconciliation kafka = outbox::lab::Reconcile(db, log);
  CHECK(kafka.unexpected.empty());
  CHECK(kafka.lost.empty());
  CHECK(kafka.archived_in_kafka == 10);
  CHECK(outbox::lab::ExplainReconciliation(db, &kafka, outbox::lab::Lang::kEn) ==
        "10 records = 10 events, each once: nothing lost, nothing duplicated");
}

TEST_CASE("CheckRun against a named business table judges its rows and without one skips "
          "atomicity for another application's events",
          "[checker]") {
  CheckerFixture f;
  {
    auto txn = f.store->BeginWrite();
    txn.connection().Exec("CREATE TABLE orders(id TEXT PRIMARY KEY, total INTEGER)");
    txn.connection().Exec("INSERT INTO orders VALUES ('O-1', 100), ('O-2', 200)");
    txn.connection().Exec(
        "INSERT INTO outbox(event_id, aggregate_id, event_type, payload) VALUES "
        "('order-evt-1', 'O-1', 'OrderPlaced', '{}')");
    txn.Commit();
  }
  f.MarkAll();
  const auto records = Records({"order-evt-1"});

  const CheckResult skipped = CheckRun(*f.store, records);
  CHECK(skipped.atomicity_skipped);
  CHECK(skipped.atomicity.empty());
  CHECK(skipped.valid());

  const outbox::lab::BusinessTable orders{"orders", "id"};
  const CheckResult judged = CheckRun(*f.store, records, nullptr, {}, {}, &orders);
  CHECK_FALSE(judged.atomicity_skipped);
  CHECK(judged.business_rows == 2);
  CHECK(judged.atomicity == Strings{"orders row O-2 has no outbox row"});
  CHECK_FALSE(judged.valid());

  const outbox::lab::BusinessTable bad{"orders; DROP TABLE outbox", "id"};
  CHECK_THROWS_AS(CheckRun(*f.store, records, nullptr, {}, {}, &bad), outbox::ConfigError);
}

TEST_CASE("CheckRun calls an event id carried by a purged row and a new row reused and INVALID",
          "[checker]") {
  CheckerFixture f;
  f.WriteLoans(2);
  f.Mark("evt-1001");
  f.Mark("evt-1002");
  const std::int64_t forever = std::numeric_limits<std::int64_t>::max();
  REQUIRE(f.store->PurgePublished(forever, 10, /*archive=*/false).deleted == 2);
  // A writer inserts evt-1001 again with a new payload: the UNIQUE guard went with the row.
  {
    auto txn = f.store->BeginWrite();
    txn.connection().Exec(
        "INSERT INTO outbox(event_id, aggregate_id, event_type, payload) "
        "VALUES ('evt-1001', 'L-1001', 'LoanRenewed', '{}')");
    txn.Commit();
  }
  const CheckResult r = CheckRun(*f.store, Records({"evt-1001", "evt-1002"}), nullptr, {});
  CHECK(r.reused_event_ids == Strings{"evt-1001 (outbox ids 1 and 3)"});
  CHECK(r.outbox_rows == 2);  // two distinct events, the reused one judged by its later row
  CHECK(r.pending == Strings{"evt-1001"});
  CHECK(r.verdict() == outbox::lab::Verdict::kInvalid);
  CHECK(outbox::lab::CheckValues(r).at("reused_event_ids") == 1);
}
