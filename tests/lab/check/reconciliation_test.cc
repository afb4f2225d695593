// The chapter's final check: counting records, duplicates, missing and
// unexpected event ids, and the --expect comparison.
#include <catch2/catch.hpp>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lab/chapter/loans.h"
#include "lab/check/reconciliation.h"
#include "lab/check/verdict_text.h"
#include "outbox/error.h"
#include "outbox/sqlite/connection.h"
#include "test_support.h"

namespace {

using outbox::lab::ActualValues;
using outbox::lab::CompareExpectations;
using outbox::lab::DbSnapshot;
using outbox::lab::KafkaReconciliation;
using outbox::lab::ParseExpectations;
using outbox::lab::Reconcile;
using outbox::lab::TopicRecord;
using outbox::testing::CaptureThrow;
using Strings = std::vector<std::string>;
using Duplicates = std::vector<std::pair<std::string, std::int64_t>>;
using Values = std::map<std::string, std::int64_t>;

std::vector<TopicRecord> RecordsWithIds(const Strings& event_ids) {
  std::vector<TopicRecord> records;
  std::int64_t offset = 0;
  for (const auto& id : event_ids) {
    TopicRecord record;
    record.offset = offset++;
    record.key = id;
    record.event_id = id;
    records.push_back(record);
  }
  return records;
}

}  // namespace

TEST_CASE("Reconcile finds the chapter's three duplicates among eight records of five events",
          "[checker]") {
  const Strings outbox_ids = {"evt-1001", "evt-1002", "evt-1003", "evt-1004", "evt-1005"};
  // publish-hold sent 1001..1003 and died before marking; the restart sent all five.
  const auto records = RecordsWithIds({"evt-1001", "evt-1002", "evt-1003", "evt-1001", "evt-1002",
                                       "evt-1003", "evt-1004", "evt-1005"});

  const auto result = Reconcile(outbox_ids, records);

  CHECK(result.records == 8);
  CHECK(result.distinct_event_ids == 5);
  CHECK(result.duplicates == Duplicates{{"evt-1001", 2}, {"evt-1002", 2}, {"evt-1003", 2}});
  CHECK(result.missing.empty());
  CHECK(result.unexpected.empty());
}

TEST_CASE("Reconcile lists missing and unexpected event ids in order", "[checker]") {
  const Strings outbox_ids = {"evt-1", "evt-2", "evt-3", "evt-4"};
  const auto records = RecordsWithIds({"evt-9", "evt-3", "evt-1", "evt-8", "evt-9"});

  const auto result = Reconcile(outbox_ids, records);

  CHECK(result.records == 5);
  CHECK(result.distinct_event_ids == 4);
  CHECK(result.duplicates == Duplicates{{"evt-9", 2}});
  CHECK(result.missing == Strings{"evt-2", "evt-4"});       // outbox order
  CHECK(result.unexpected == Strings{"evt-9", "evt-8"});  // first-seen order
}

TEST_CASE("Reconcile reports duplicates with their counts in first-seen order", "[checker]") {
  const auto records = RecordsWithIds({"b", "a", "c", "b", "a", "a"});

  const auto result = Reconcile({"a", "b", "c"}, records);

  CHECK(result.records == 6);
  CHECK(result.distinct_event_ids == 3);
  CHECK(result.duplicates == Duplicates{{"b", 2}, {"a", 3}});
  CHECK(result.missing.empty());
  CHECK(result.unexpected.empty());
}

TEST_CASE("Reconcile of an empty topic reports every outbox event missing", "[checker]") {
  const auto result = Reconcile({"evt-1", "evt-2"}, {});

  CHECK(result.records == 0);
  CHECK(result.distinct_event_ids == 0);
  CHECK(result.duplicates.empty());
  CHECK(result.missing == Strings{"evt-1", "evt-2"});
  CHECK(result.unexpected.empty());
}

TEST_CASE("TakeDbSnapshot counts loans and outbox rows and lists event ids in id order",
          "[checker]") {
  outbox::testing::TempDir dir;
  auto store = outbox::lab::ResetLabDatabase(dir.File("lab.db"), outbox::StoreOptions{});
  for (int i = 1; i <= 3; ++i) outbox::lab::WriteLoanWithEvent(*store, i);
  REQUIRE(store->MarkPublished(2));

  const DbSnapshot snapshot = outbox::lab::TakeDbSnapshot(*store);

  CHECK(snapshot.business_loans == 3);
  CHECK(snapshot.outbox.total == 3);
  CHECK(snapshot.outbox.published == 1);
  CHECK(snapshot.outbox.unpublished == 2);
  CHECK(snapshot.outbox_event_ids == Strings{"evt-1001", "evt-1002", "evt-1003"});
}

TEST_CASE("TakeDbSnapshot counts a loan without an outbox row as an orphan when an aggregate has "
          "several events",
          "[checker]") {
  outbox::testing::TempDir dir;
  auto store = outbox::lab::ResetLabDatabase(dir.File("lab.db"), outbox::StoreOptions{});
  // Loan 1 with three events (more outbox rows than loans: renewals), loan 2 with none.
  for (int i = 1; i <= 3; ++i) outbox::lab::WriteLoanWithEvent(*store, i, nullptr, 1);
  REQUIRE(outbox::lab::InsertLoanWithoutEvent(
      *store, outbox::lab::ChapterLoan(2, store->clock().EpochMs())));

  const DbSnapshot snapshot = outbox::lab::TakeDbSnapshot(*store);

  CHECK(snapshot.business_loans == 2);
  CHECK(snapshot.outbox.total == 3);
  CHECK(snapshot.orphan_loans == 1);
  CHECK(outbox::lab::ExplainReconciliation(snapshot, nullptr, outbox::lab::Lang::kEn) ==
        "a loan committed without an outbox row: its event is lost for good");
}

TEST_CASE("ParseExpectations reads every known key", "[checker]") {
  CHECK(ParseExpectations("business=5,outbox=5,kafka_records=8") ==
        Values{{"business", 5}, {"outbox", 5}, {"kafka_records", 8}});
  CHECK(ParseExpectations("published=0,unpublished=12,kafka_distinct=5,kafka_duplicates=3,"
                          "kafka_missing=0,kafka_unexpected=1") ==
        Values{{"published", 0},        {"unpublished", 12},  {"kafka_distinct", 5},
               {"kafka_duplicates", 3}, {"kafka_missing", 0}, {"kafka_unexpected", 1}});
  // A repeated key is refused: which of the two was meant?
  CHECK_THROWS_WITH(ParseExpectations("business=1,business=2"),
                    "expectation 'business': given twice");
}

TEST_CASE("ParseExpectations rejects unknown keys and a missing '=' and values that are not "
          "non-negative integers",
          "[checker]") {
  const std::string text = GENERATE(as<std::string>{},
                                    "bogus=1",                     // unknown key
                                    "Business=1",                  // keys are case-sensitive
                                    "business",                    // missing '='
                                    "business=5,outbox",           // missing '=' later on
                                    "business=",                   // empty value
                                    "business=abc",                // not a number
                                    "business=5x",                 // trailing junk
                                    "business=1.5",                // not an integer
                                    "business=-1",                 // negative
                                    "business=99999999999999999999",  // out of range
                                    "");                           // nothing at all
  INFO("text: '" << text << "'");
  REQUIRE(CaptureThrow<outbox::ConfigError>([&] { ParseExpectations(text); }).has_value());
}

TEST_CASE("ActualValues includes kafka keys only when there is a Kafka result", "[checker]") {
  DbSnapshot db;
  db.business_loans = 5;
  db.outbox.total = 5;
  db.outbox.published = 4;
  db.outbox.unpublished = 1;

  CHECK(ActualValues(db, std::nullopt) ==
        Values{{"business", 5}, {"outbox", 5}, {"published", 4}, {"unpublished", 1}});

  const auto kafka = Reconcile({"a", "b", "c"}, RecordsWithIds({"a", "a", "b", "x"}));
  CHECK(ActualValues(db, kafka) == Values{{"business", 5},
                                          {"outbox", 5},
                                          {"published", 4},
                                          {"unpublished", 1},
                                          {"kafka_records", 4},
                                          {"kafka_distinct", 3},
                                          {"kafka_duplicates", 1},
                                          {"kafka_missing", 1},
                                          {"kafka_unexpected", 1}});
}

TEST_CASE("CompareExpectations lists one line per expectation that does not hold", "[checker]") {
  const Values actual = {{"business", 4}, {"outbox", 5}, {"kafka_records", 8}};

  CHECK(CompareExpectations({{"business", 4}, {"kafka_records", 8}}, actual).empty());
  CHECK(CompareExpectations({{"business", 5}, {"outbox", 5}, {"kafka_records", 6}}, actual) ==
        Strings{"business: expected 5, got 4", "kafka_records: expected 6, got 8"});
}

TEST_CASE("CompareExpectations reports an expected kafka key without a broker", "[checker]") {
  DbSnapshot db;
  db.business_loans = 5;
  db.outbox.total = 5;
  db.outbox.published = 5;
  const auto actual = ActualValues(db, std::nullopt);

  const auto lines = CompareExpectations(ParseExpectations("business=5,kafka_records=8"), actual);

  REQUIRE(lines.size() == 1);
  CHECK_THAT(lines[0], Catch::StartsWith("kafka_records: expected 8") &&
                           Catch::Contains("no broker"));
}

TEST_CASE("SetAsideCommittedDuringRead keeps as unexpected only ids no later read holds",
          "[checker]") {
  // verify read evt-1001 from the database, then the topic, where a live writer's evt-1002 had
  // arrived meanwhile; evt-9999 has no row at all.
  DbSnapshot before;
  before.outbox_event_ids = {"evt-1001"};
  outbox::lab::TopicLog log;
  log.records = RecordsWithIds({"evt-1001", "evt-1002", "evt-9999"});
  KafkaReconciliation result = Reconcile(before, log);
  REQUIRE(result.unexpected == Strings{"evt-1002", "evt-9999"});

  DbSnapshot later;
  later.outbox_event_ids = {"evt-1001", "evt-1002"};
  outbox::lab::SetAsideCommittedDuringRead(result, later);

  CHECK(result.unexpected == Strings{"evt-9999"});
  CHECK(result.committed_during_read == Strings{"evt-1002"});
  // A live relay: evt-1001 was unpublished when the database was read and in Kafka; the read
  // after the topic finds it marked. Not owed again.
  DbSnapshot unmarked;
  unmarked.outbox_event_ids = {"evt-1001"};
  unmarked.unpublished_event_ids = {"evt-1001"};
  unmarked.outbox.total = 1;
  unmarked.outbox.unpublished = 1;
  outbox::lab::TopicLog live_log;
  live_log.records = RecordsWithIds({"evt-1001"});
  KafkaReconciliation live = Reconcile(unmarked, live_log);
  REQUIRE(live.sent_unmarked == Strings{"evt-1001"});
  DbSnapshot marked = unmarked;
  marked.unpublished_event_ids.clear();
  outbox::lab::SetAsideCommittedDuringRead(live, marked);
  CHECK(live.sent_unmarked.empty());
  CHECK(live.marked_during_read == Strings{"evt-1001"});
  CHECK_THAT(outbox::lab::ExplainReconciliation(unmarked, &live, outbox::lab::Lang::kEn),
             !Catch::Contains("not marked") && !Catch::Contains("durable"));
  CHECK(ActualValues(before, result).at("kafka_unexpected") == 1);
}
