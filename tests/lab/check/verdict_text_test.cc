// Verdict text: the sentence verify ends with at each stage of the chapter's
// experiment, the final table in English and in the chapter's Chinese, check's
// verdict lines and the short id lists.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "lab/check/checker.h"
#include "lab/check/reconciliation.h"
#include "lab/check/topic_reader.h"
#include "lab/check/verdict_text.h"
#include "outbox/error.h"

namespace {

using outbox::lab::DbSnapshot;
using outbox::lab::ExplainReconciliation;
using outbox::lab::KafkaReconciliation;
using outbox::lab::Lang;
using outbox::lab::TopicLog;
using outbox::lab::TopicRecord;
using Strings = std::vector<std::string>;

// The chapter's database: loans 1..total with events evt-1001.., the first published ones marked.
DbSnapshot ChapterDb(int total, int published, int orphans = 0) {
  DbSnapshot db;
  db.business_loans = total + orphans;
  db.orphan_loans = orphans;
  db.outbox.total = total;
  db.outbox.published = published;
  db.outbox.unpublished = total - published;
  for (int i = 1; i <= total; ++i) {
    const std::string id = "evt-" + std::to_string(1000 + i);
    db.outbox_event_ids.push_back(id);
    if (i > published) db.unpublished_event_ids.push_back(id);
  }
  db.run_id = "run-1";
  return db;
}

TopicLog Log(const std::vector<int>& events, std::int64_t log_start = 0) {
  TopicLog log;
  std::int64_t offset = log_start;
  for (int i : events) {
    TopicRecord record;
    record.offset = offset++;
    record.event_id = "evt-" + std::to_string(1000 + i);
    record.key = record.event_id;
    record.run_id = "run-1";
    log.records.push_back(record);
  }
  log.partitions.push_back({0, log_start, offset});
  return log;
}

}  // namespace

TEST_CASE("verify explains each stage of the chapter's experiment in one sentence", "[verdict]") {
  SECTION("after write-hold: five intents durable and none sent") {
    const DbSnapshot db = ChapterDb(5, 0);
    const KafkaReconciliation kafka = Reconcile(db, Log({}));
    CHECK(ExplainReconciliation(db, &kafka, Lang::kEn) ==
          "5 intents are durable, not sent yet; the relay will send them");
    CHECK(ExplainReconciliation(db, &kafka, Lang::kZh) ==
          "5 条发送意图已落盘，尚未发送；relay 会补发");
    CHECK(ExplainReconciliation(db, nullptr, Lang::kEn) ==
          "5 intents are durable (unpublished outbox rows); the relay will send them");
  }
  SECTION("a parked intent is not one the relay will send by itself") {
    DbSnapshot db = ChapterDb(5, 3);
    db.parked_event_ids = {"evt-1004"};
    const KafkaReconciliation kafka = Reconcile(db, Log({1, 2, 3}));
    CHECK(ExplainReconciliation(db, &kafka, Lang::kEn) ==
          "2 intents are durable, not sent yet; the relay will send them (1 parked: after "
          "`outbox-lab unpark`)");
    db.parked_event_ids = {"evt-1004", "evt-1005"};
    CHECK(ExplainReconciliation(db, &kafka, Lang::kEn) ==
          "2 intents are durable, not sent yet, and parked: the relay sends them only after "
          "`outbox-lab unpark`");
  }
  SECTION("after publish-hold: three records in Kafka and none marked") {
    const DbSnapshot db = ChapterDb(5, 0);
    const KafkaReconciliation kafka = Reconcile(db, Log({1, 2, 3}));
    CHECK(kafka.sent_unmarked == Strings{"evt-1001", "evt-1002", "evt-1003"});
    CHECK(kafka.unsent == Strings{"evt-1004", "evt-1005"});
    CHECK(ExplainReconciliation(db, &kafka, Lang::kEn) ==
          "3 records are in Kafka but not marked; they will be sent again (at-least-once); "
          "2 more intents are durable, not sent yet");
  }
  SECTION("publish-hold killed twice: three events in Kafka twice each, none marked") {
    const DbSnapshot db = ChapterDb(5, 0);
    const KafkaReconciliation kafka = Reconcile(db, Log({1, 2, 3, 1, 2, 3}));
    CHECK(ExplainReconciliation(db, &kafka, Lang::kEn) ==
          "3 events are in Kafka (6 records) but not marked; they will be sent again "
          "(at-least-once); 2 more intents are durable, not sent yet");
  }
  SECTION("at the end: eight records of five events and three expected duplicates") {
    const DbSnapshot db = ChapterDb(5, 5);
    const KafkaReconciliation kafka = Reconcile(db, Log({1, 2, 3, 1, 2, 3, 4, 5}));
    CHECK(ExplainReconciliation(db, &kafka, Lang::kEn) ==
          "8 records = 3 sent again (a crash before the mark, a second relay or a producer "
          "retry) + 5 sent and marked; the 3 "
          "duplicates are expected (at-least-once)");
    CHECK(ExplainReconciliation(db, &kafka, Lang::kZh) ==
          "8 条记录 = 重复发送的 3 条（标记前崩溃、第二个 relay 或生产者重试）+ 发送并标记的 5 条；3 条重复在预期之内（至少一次）");
  }
  SECTION("read with read_uncommitted: aborted transactions' records are named as a cause") {
    const DbSnapshot db = ChapterDb(5, 5);
    const KafkaReconciliation kafka = Reconcile(db, Log({1, 2, 3, 1, 2, 3, 4, 5}));
    CHECK(ExplainReconciliation(db, &kafka, Lang::kEn, /*aborted_visible=*/true) ==
          "8 records = 3 sent again (a crash before the mark, a second relay, a producer "
          "retry, or an aborted transaction's records, which read_uncommitted shows) + 5 sent "
          "and marked; the 3 duplicates are expected (at-least-once)");
    CHECK(ExplainReconciliation(db, &kafka, Lang::kZh, /*aborted_visible=*/true) ==
          "8 条记录 = 重复发送的 3 条（标记前崩溃、第二个 relay 或生产者重试，或 read_uncommitted "
          "读到的已中止事务的记录）+ 发送并标记的 5 条；3 条重复在预期之内（至少一次）");
  }
  SECTION("after naive-hold: a loan without an outbox row") {
    const DbSnapshot db = ChapterDb(0, 0, 1);
    const KafkaReconciliation kafka = Reconcile(db, Log({}));
    CHECK(ExplainReconciliation(db, &kafka, Lang::kEn) ==
          "a loan committed without an outbox row: its event is lost for good");
    CHECK(ExplainReconciliation(db, nullptr, Lang::kEn) ==
          "a loan committed without an outbox row: its event is lost for good");
  }
  SECTION("a published event absent from a complete log is lost for good") {
    const DbSnapshot db = ChapterDb(3, 3);
    const KafkaReconciliation kafka = Reconcile(db, Log({1, 3}));
    CHECK(kafka.lost == Strings{"evt-1002"});
    CHECK(ExplainReconciliation(db, &kafka, Lang::kEn) ==
          "1 event is marked published but not in Kafka: lost for good");
  }
  SECTION("a published event absent from a log the broker truncated cannot be judged") {
    const DbSnapshot db = ChapterDb(3, 3);
    const KafkaReconciliation kafka = Reconcile(db, Log({3}, 2));
    CHECK(kafka.lost.empty());
    CHECK(kafka.retention_unknown == Strings{"evt-1001", "evt-1002"});
    CHECK(ExplainReconciliation(db, &kafka, Lang::kEn) ==
          "the broker dropped 2 offsets (retention): 2 published events cannot be judged");
  }
  SECTION("more published events missing than the broker dropped are lost beyond retention") {
    const DbSnapshot db = ChapterDb(4, 4);
    const KafkaReconciliation kafka = Reconcile(db, Log({4}, 1));
    CHECK(kafka.retention_unknown == Strings{"evt-1001", "evt-1002", "evt-1003"});
    CHECK(kafka.lost_beyond_retention == 2);
    CHECK(ExplainReconciliation(db, &kafka, Lang::kEn) ==
          "at least 2 events are lost for good: 3 published events are not in Kafka and the "
          "broker dropped only 1 offset (retention)");
  }
}

TEST_CASE("The reconciliation table lists at most 10 duplicated ids and counts the rest",
          "[verdict]") {
  const DbSnapshot db = ChapterDb(12, 12);
  std::vector<int> twice;
  for (int i = 1; i <= 12; ++i) twice.insert(twice.end(), {i, i});
  const KafkaReconciliation kafka = Reconcile(db, Log(twice));
  REQUIRE(kafka.duplicates.size() == 12);
  const std::string table = outbox::lab::ReconciliationTable(db, kafka, Lang::kEn);
  CHECK(table.find("evt-1010 x2, ... and 2 more (--ids prints all)") != std::string::npos);
  CHECK(table.find("evt-1011") == std::string::npos);
  const std::string all = outbox::lab::ReconciliationTable(db, kafka, Lang::kEn, true);
  CHECK(all.find("evt-1012 x2") != std::string::npos);
  CHECK(all.find("more") == std::string::npos);
}

TEST_CASE("Reconcile counts only this run's records and the others apart", "[verdict]") {
  const DbSnapshot db = ChapterDb(3, 3);
  TopicLog log = Log({1, 2, 3});
  TopicRecord stranger = log.records.front();
  stranger.run_id = "run-0";  // the same event id from an earlier reset
  log.records.insert(log.records.begin(), 2, stranger);
  TopicRecord unmarked = log.records.back();
  unmarked.run_id.clear();  // produced without a run id (kcat, an older lab)
  log.records.push_back(unmarked);
  const KafkaReconciliation kafka = Reconcile(db, log);
  CHECK(kafka.records == 3);
  CHECK(kafka.duplicates.empty());
  CHECK(kafka.other_run_records == 3);
}

TEST_CASE("The final table reads as the chapter's in English and in Chinese", "[verdict]") {
  const DbSnapshot db = ChapterDb(5, 5);
  const KafkaReconciliation kafka = Reconcile(db, Log({1, 2, 3, 1, 2, 3, 4, 5}));
  CHECK(outbox::lab::ReconciliationTable(db, kafka, Lang::kEn) ==
        "reconciliation             value\n"
        "business rows              5\n"
        "outbox rows                5\n"
        "published=TRUE             5\n"
        "Kafka records              8\n"
        "Kafka distinct event ids   5\n"
        "duplicated ids             evt-1001 x2, evt-1002 x2, evt-1003 x2\n");
  CHECK(outbox::lab::ReconciliationTable(db, kafka, Lang::kZh) ==
        "账目                       数值\n"
        "业务表行数                 5\n"
        "outbox 行数                5\n"
        "published=TRUE             5\n"
        "Kafka 记录数               8\n"
        "Kafka 不同事件 ID 数       5\n"
        "重复的 ID                  evt-1001、evt-1002、evt-1003 各 2 次\n");
}

TEST_CASE("DisplayWidth counts a CJK character as two columns", "[verdict]") {
  CHECK(outbox::lab::DisplayWidth("abc") == 3);
  CHECK(outbox::lab::DisplayWidth("账目") == 4);
  CHECK(outbox::lab::DisplayWidth("Kafka 记录数") == 12);
  CHECK(outbox::lab::DisplayWidth("（至少一次）") == 12);
}

TEST_CASE("ShortIdList prints the first ten ids and a count unless all are asked for",
          "[verdict]") {
  Strings ids;
  for (int i = 1; i <= 12000; ++i) ids.push_back("evt-" + std::to_string(1000 + i));
  const std::string short_list = outbox::lab::ShortIdList(ids, false);
  CHECK(short_list ==
        "evt-1001, evt-1002, evt-1003, evt-1004, evt-1005, evt-1006, evt-1007, evt-1008, "
        "evt-1009, evt-1010, ... and 11990 more (--ids prints all)");
  const std::string all = outbox::lab::ShortIdList(ids, true);
  CHECK(all.find("evt-13000") != std::string::npos);
  CHECK(all.find("more") == std::string::npos);
  CHECK(outbox::lab::ShortIdList({"evt-1", "evt-2"}, false) == "evt-1, evt-2");
  CHECK(outbox::lab::ShortIdList({}, false).empty());
}

TEST_CASE("check's verdict line says what to do for each verdict", "[verdict]") {
  outbox::lab::CheckResult r;
  CHECK(outbox::lab::CheckVerdictLine(r, Lang::kEn) == "valid");
  r.pending = {"evt-1004"};
  r.parked = {"evt-1005"};
  r.stuck = {"evt-1004", "evt-1005"};
  CHECK(r.verdict() == outbox::lab::Verdict::kNotDrained);
  CHECK(outbox::lab::CheckVerdictLine(r, Lang::kEn) ==
        "not drained yet: run the relay, then check (1 row is parked: `outbox-lab unpark --all` "
        "first)");
  CHECK(outbox::lab::CheckVerdictLine(r, Lang::kZh) ==
        "尚未发完：2 条 outbox 行还没发布；先运行 relay，再 check（其中 1 条已停放，先 outbox-lab "
        "unpark --all）");
  r.lost = {"evt-1001"};
  CHECK(r.verdict() == outbox::lab::Verdict::kInvalid);
  CHECK(outbox::lab::CheckVerdictLine(r, Lang::kEn) == "INVALID");
  outbox::lab::CheckResult truncated;
  truncated.retention_unknown = {"evt-1001", "evt-1002"};
  truncated.dropped_offsets = 12000;
  CHECK(truncated.verdict() == outbox::lab::Verdict::kCannotJudge);
  CHECK(outbox::lab::CheckVerdictLine(truncated, Lang::kEn) ==
        "cannot judge 2 published events (broker retention): the broker dropped 12000 offsets; "
        "they may have been among them, so they are not counted as lost");
}

TEST_CASE("ParseLang accepts en and zh only", "[verdict]") {
  CHECK(outbox::lab::ParseLang("en") == Lang::kEn);
  CHECK(outbox::lab::ParseLang("zh") == Lang::kZh);
  CHECK_THROWS_AS(outbox::lab::ParseLang("fr"), outbox::ConfigError);
}
