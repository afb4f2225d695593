// Report: untrusted bytes made safe, lanes and cells built from a history and
// a topic, and the page rendered from hand-made models (the chapter's run, a
// hostile one, a big one, one with an order violation).
#include "lab/report/html_text.h"
#include "lab/report/model.h"
#include "lab/report/page.h"
#include "lab/report/page_file.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "outbox/error.h"
#include "test_support.h"

namespace {

using outbox::lab::BuildCells;
using outbox::lab::BuildLanes;
using outbox::lab::DuplicateCause;
using outbox::lab::EscapeHtml;
using outbox::lab::HistoryOp;
using outbox::lab::OutboxEntry;
using outbox::lab::RenderReportHtml;
using outbox::lab::ReportModel;
using outbox::lab::SanitizeUtf8;
using outbox::lab::TopicRecord;

std::int64_t Count(const std::string& text, const std::string& needle) {
  std::int64_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// nlohmann_json refuses to dump a string that is not valid UTF-8: an independent judge.
bool IsValidUtf8(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

HistoryOp Op(std::int64_t process, std::int64_t time_ms, const std::string& type,
             const std::string& f, const std::string& value) {
  HistoryOp op;
  op.process = process;
  op.time_ms = time_ms;
  op.type = type;
  op.f = f;
  op.value = value;
  return op;
}

constexpr std::int64_t kWriter = 101, kPublishHold = 202, kPublish = 303;

// The chapter's run as the three processes record it: write-hold 5 (killed at its hold),
// publish-hold 3 (killed after three acks, before any mark), publish 10 (exits).
std::vector<HistoryOp> ChapterHistory() {
  std::vector<HistoryOp> ops;
  std::int64_t t = 1000;
  ops.push_back(Op(kWriter, t, "invoke", "process", "write-hold"));
  for (int i = 1; i <= 5; ++i) {
    const std::string id = "evt-100" + std::to_string(i);
    ops.push_back(Op(kWriter, ++t, "invoke", "txn", id));
    ops.push_back(Op(kWriter, ++t, "ok", "txn", id));
  }
  ops.push_back(Op(kWriter, ++t, "info", "hold", "before publish"));
  t += 500;
  ops.push_back(Op(kPublishHold, t, "invoke", "process", "publish-hold"));
  for (int i = 1; i <= 3; ++i)
    ops.push_back(Op(kPublishHold, ++t, "invoke", "send", "evt-100" + std::to_string(i)));
  for (int i = 1; i <= 3; ++i)
    ops.push_back(Op(kPublishHold, ++t, "ok", "send", "evt-100" + std::to_string(i)));
  ops.push_back(Op(kPublishHold, ++t, "info", "hold", "before mark"));
  t += 500;
  ops.push_back(Op(kPublish, t, "invoke", "process", "publish"));
  for (int i = 1; i <= 5; ++i) {
    const std::string id = "evt-100" + std::to_string(i);
    ops.push_back(Op(kPublish, ++t, "invoke", "send", id));
    ops.push_back(Op(kPublish, ++t, "ok", "send", id));
    ops.push_back(Op(kPublish, ++t, "ok", "mark", id));
  }
  ops.push_back(Op(kPublish, ++t, "ok", "process", "publish"));
  return ops;
}

std::vector<TopicRecord> Records(const std::vector<std::string>& event_ids) {
  std::vector<TopicRecord> records;
  for (const auto& id : event_ids) {
    TopicRecord r;
    r.offset = static_cast<std::int64_t>(records.size());
    r.key = id;
    r.event_id = id;
    records.push_back(r);
  }
  return records;
}

std::vector<TopicRecord> ChapterRecords() {
  return Records({"evt-1001", "evt-1002", "evt-1003", "evt-1001", "evt-1002", "evt-1003",
                  "evt-1004", "evt-1005"});
}

std::vector<OutboxEntry> ChapterOutbox() {
  std::vector<OutboxEntry> outbox;
  for (int i = 1; i <= 5; ++i)
    outbox.push_back({i, "evt-100" + std::to_string(i), "L-100" + std::to_string(i), true});
  return outbox;
}

ReportModel ChapterModel() {
  ReportModel model;
  model.title = "chapter";
  model.topic = "v2c7.outbox";
  model.has_history = true;
  const auto history = ChapterHistory();
  model.history_records = static_cast<std::int64_t>(history.size());
  model.lanes = BuildLanes(history);
  model.check.outbox = ChapterOutbox();
  model.check.business_rows = model.check.outbox_rows = 5;
  model.check.kafka_records = 8;
  model.check.ok = 5;
  model.check.duplicated = {{"evt-1001", 2}, {"evt-1002", 2}, {"evt-1003", 2}};
  model.check.history.present = true;
  model.cells = BuildCells(ChapterRecords(), model.check.outbox, model.lanes);
  model.db.business_loans = 5;
  model.db.outbox.total = model.db.outbox.published = 5;
  model.kafka.records = 8;
  model.kafka.distinct_event_ids = 5;
  model.kafka.duplicates = model.check.duplicated;
  return model;
}

}  // namespace

TEST_CASE("SanitizeUtf8 keeps valid text and replaces every invalid sequence with U+FFFD",
          "[report]") {
  CHECK(SanitizeUtf8("evt-1001 é € 😀") == "evt-1001 é € 😀");
  const std::string fffd = "\xEF\xBF\xBD";
  CHECK(SanitizeUtf8("a\xFF"
                     "b") == "a" + fffd + "b");
  CHECK(SanitizeUtf8("\xC0\xAF") == fffd + fffd);                             // overlong '/'
  CHECK(SanitizeUtf8("\xED\xA0\x80") == fffd + fffd + fffd);                  // a surrogate
  CHECK(SanitizeUtf8("\xF4\x90\x80\x80").find("\xF4") == std::string::npos);  // above U+10FFFF
  CHECK(SanitizeUtf8("x\xE2\x82") == "x" + fffd);  // truncated euro sign: one maximal subpart
  CHECK(SanitizeUtf8(std::string("a\0b\x1B", 4)) == "a" + fffd + "b" + fffd);
}

TEST_CASE("SanitizeUtf8 output is valid UTF-8 for every one and two byte input", "[report]") {
  for (int a = 0; a < 256; ++a) {
    const std::string one(1, static_cast<char>(a));
    REQUIRE(IsValidUtf8(SanitizeUtf8(one)));
    for (int b = 0; b < 256; ++b) {
      const std::string two = one + static_cast<char>(b);
      REQUIRE(IsValidUtf8(SanitizeUtf8(two)));
      REQUIRE(IsValidUtf8(SanitizeUtf8(two + "\x80\xBF")));
    }
  }
}

TEST_CASE("EscapeHtml turns markup characters into references", "[report]") {
  CHECK(EscapeHtml("<a href=\"x\">'&'</a>") ==
        "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
}

TEST_CASE("BuildLanes gives the chapter one lane per process with kills on the two held ones",
          "[report]") {
  const auto lanes = BuildLanes(ChapterHistory());
  REQUIRE(lanes.size() == 3);
  CHECK(lanes[0].name == "write-hold");
  CHECK(lanes[0].never_finished);
  CHECK(lanes[1].name == "publish-hold");
  CHECK(lanes[1].never_finished);
  CHECK(lanes[2].name == "publish");
  CHECK_FALSE(lanes[2].never_finished);
  REQUIRE(lanes[0].ops.size() == 6);  // five transactions and the hold point
  CHECK(lanes[0].ops[0].f == "txn");
  CHECK(lanes[0].ops[0].outcome == "ok");
  CHECK(lanes[0].ops[5].f == "hold");
  CHECK(lanes[0].ops[5].outcome == "info");
  // evt-1001 was sent first by publish-hold, then again by publish.
  CHECK(lanes[1].ops[0].attempt == 1);
  CHECK(lanes[2].ops[0].f == "send");
  CHECK(lanes[2].ops[0].attempt == 2);
  CHECK(lanes[2].ops[0].outcome == "ok");
  CHECK(lanes[2].ops[0].end_ms > lanes[2].ops[0].start_ms);
}

TEST_CASE("BuildLanes leaves an unanswered invoke open and shows records it does not know",
          "[report]") {
  const auto lanes =
      BuildLanes({Op(7, 1, "invoke", "txn", "evt-1"), Op(7, 2, "ok", "settle", "token=3"),
                  Op(7, 3, "weird", "phase", "")});
  REQUIRE(lanes.size() == 1);
  CHECK(lanes[0].name.empty());
  CHECK(lanes[0].never_finished);  // no process records: the open txn says it never finished
  REQUIRE(lanes[0].ops.size() == 3);
  CHECK(lanes[0].ops[0].outcome == "open");
  CHECK(lanes[0].ops[1].f == "settle");
  CHECK(lanes[0].ops[2].outcome == "weird");
}

TEST_CASE("BuildLanes starts a new lane when a finished process's PID is reused", "[report]") {
  const auto lanes =
      BuildLanes({Op(9, 1, "invoke", "process", "write"), Op(9, 2, "ok", "process", "write"),
                  Op(9, 3, "invoke", "process", "relay")});
  REQUIRE(lanes.size() == 2);
  CHECK_FALSE(lanes[0].never_finished);
  CHECK(lanes[1].name == "relay");
  CHECK(lanes[1].never_finished);
}

TEST_CASE("BuildCells outlines the chapter's three re-sends and blames publish-hold's kill",
          "[report]") {
  const auto lanes = BuildLanes(ChapterHistory());
  const auto cells = BuildCells(ChapterRecords(), ChapterOutbox(), lanes);
  REQUIRE(cells.size() == 8);
  for (int offset = 0; offset < 8; ++offset) {
    const auto& c = cells[offset];
    CHECK(c.copy == (offset >= 3 && offset <= 5 ? 2 : 1));
    CHECK(c.copies == (offset <= 5 ? 2 : 1));
    CHECK(c.outbox_id == (offset < 3 ? offset + 1 : offset < 6 ? offset - 2 : offset - 2));
    if (c.copy > 1) {
      CHECK(c.cause.kind == DuplicateCause::Kind::kKill);
      CHECK(c.cause.process == kPublishHold);
    }
  }
}

TEST_CASE("BuildCells blames a failed send when no killed process acknowledged the event",
          "[report]") {
  const auto lanes =
      BuildLanes({Op(5, 1, "invoke", "send", "evt-9"), Op(5, 2, "fail", "send", "evt-9"),
                  Op(6, 3, "invoke", "send", "evt-9"), Op(6, 4, "ok", "send", "evt-9"),
                  Op(6, 5, "ok", "mark", "evt-9")});
  const auto cells = BuildCells(Records({"evt-9", "evt-9", "evt-7"}), {}, lanes);
  CHECK(cells[1].cause.kind == DuplicateCause::Kind::kFailedSend);
  CHECK(cells[1].cause.process == 5);
  CHECK_FALSE(cells[2].outbox_id.has_value());
  // A foreign writer's row with id -1 is a row, not a phantom.
  const auto foreign = BuildCells(Records({"evt-7"}), {{-1, "evt-7", "L-7", true}}, lanes);
  CHECK(foreign[0].outbox_id == -1);
}

TEST_CASE(
    "The chapter's page shows eight cells with three outlined and two kills on the held lanes",
    "[report]") {
  const std::string html = RenderReportHtml(ChapterModel());
  CHECK(Count(html, "<g class=\"cell") == 8);
  CHECK(Count(html, "<g class=\"cell dup\"") == 3);
  CHECK(Count(html, "data-cause=\"kill-202\"") == 4);  // three cells and their cause's row
  CHECK(Count(html, "<tr class=\"duplicate-cause\" data-cause=\"kill-202\" data-copies=\"3\">") ==
        1);
  CHECK(Count(html, "<g class=\"kill\"") == 2);
  CHECK(Count(html, "id=\"kill-101\"") == 1);
  CHECK(Count(html, "id=\"kill-202\"") == 1);
  CHECK(Count(html, "id=\"kill-303\"") == 0);
  CHECK(Count(html, "<g class=\"hold\"") == 2);
  CHECK(html.find("<section id=\"verdict\" data-valid=\"true\">") != std::string::npos);
  CHECK(html.find("id=\"timeline\" data-mode=\"detailed\"") != std::string::npos);
  CHECK(html.find("data-name=\"publish-hold\"") != std::string::npos);
  CHECK(html.find("<tr data-key=\"duplicated\" data-count=\"3\"") != std::string::npos);
  CHECK(html.find("http://") == std::string::npos);
  CHECK(html.find("https://") == std::string::npos);
  CHECK(html.find("default-src 'none'") != std::string::npos);
  CHECK(IsValidUtf8(html));
}

TEST_CASE("The page escapes markup and invalid UTF-8 from the topic and the database and the history",
          "[report]") {
  ReportModel model = ChapterModel();
  const std::string hostile = "<script>alert(1)</script>\"'&\xFF\xC0";
  model.cells[0].record.event_id = hostile;
  model.check.lost = {hostile};
  model.check.phantom = {hostile};
  model.topic = hostile;
  model.db_path = hostile;
  model.lanes[0].name = hostile;
  model.lanes[0].ops[0].value = hostile;
  model.lanes[0].ops[0].error = hostile;
  model.lanes[0].ops[0].details = hostile;
  const std::string html = RenderReportHtml(model);
  CHECK(Count(html, "<script") == 1);  // the page's own
  CHECK(html.find("alert(1)</script>") == std::string::npos);
  CHECK(html.find("&lt;script&gt;alert(1)&lt;/script&gt;") != std::string::npos);
  CHECK(IsValidUtf8(html));
  CHECK(html.find("<section id=\"verdict\" data-valid=\"false\">") != std::string::npos);
  CHECK(html.find("<tr data-key=\"lost\" data-count=\"1\" class=\"bad\">") != std::string::npos);
  CHECK(html.find("<tr data-key=\"phantom\" data-count=\"1\" class=\"bad\">") != std::string::npos);
}

TEST_CASE("A run of 100000 events renders as time bins and offset ranges under 5 MB", "[report]") {
  ReportModel model;
  model.has_history = true;
  std::vector<HistoryOp> ops;
  std::vector<std::string> ids;
  std::vector<OutboxEntry> outbox;
  ops.push_back(Op(1, 0, "invoke", "process", "write"));
  for (int i = 1; i <= 100000; ++i) {
    const std::string id = "evt-" + std::to_string(i);
    ops.push_back(Op(1, i / 10, "invoke", "txn", id));
    ops.push_back(Op(1, i / 10, "ok", "txn", id));
    ids.push_back(id);
    outbox.push_back({i, id, "L-" + std::to_string(i), true});
  }
  ops.push_back(Op(1, 10001, "ok", "process", "write"));
  ops.push_back(Op(2, 10002, "invoke", "process", "relay"));
  for (int i = 1; i <= 100000; ++i) {
    ops.push_back(Op(2, 10002 + i / 20, "invoke", "send", ids[i - 1]));
    ops.push_back(Op(2, 10003 + i / 20, "ok", "send", ids[i - 1]));
  }
  ids.push_back("evt-1");  // one duplicate at the end
  model.lanes = BuildLanes(ops);
  model.check.outbox = outbox;
  model.cells = BuildCells(Records(ids), outbox, model.lanes);
  const std::string html = RenderReportHtml(model);
  CHECK(html.size() < 5u * 1024 * 1024);
  CHECK(html.find("id=\"timeline\" data-mode=\"binned\"") != std::string::npos);
  CHECK(html.find("id=\"kafka\" data-mode=\"binned\"") != std::string::npos);
  CHECK(Count(html, "<g class=\"cell") == 0);
  CHECK(Count(html, "class=\"range dup\"") == 1);
  CHECK(Count(html, "<g class=\"kill\"") == 1);  // the relay never recorded its end
  CHECK(html.find("data-cause=\"kill-2\"") != std::string::npos);
}

TEST_CASE("An order violation shows both records side by side", "[report]") {
  ReportModel model = ChapterModel();
  outbox::lab::OrderViolation v;
  v.aggregate_id = "L-7";
  v.first = Records({"evt-8"})[0];
  v.first.offset = 4;
  v.first_outbox_id = 8;
  v.second = Records({"evt-7"})[0];
  v.second.offset = 5;
  v.second_outbox_id = 7;
  model.check.order_pairs = {v};
  model.check.order_violations = {"evt-7 (aggregate L-7) after a later event"};
  const std::string html = RenderReportHtml(model);
  CHECK(html.find("<section id=\"order\" data-count=\"1\">") != std::string::npos);
  CHECK(Count(html, "<div class=\"violation\" data-aggregate=\"L-7\">") == 1);
  CHECK(html.find("partition 0 offset 4<br>event evt-8<br>outbox id 8") != std::string::npos);
  CHECK(html.find("partition 0 offset 5<br>event evt-7<br>outbox id 7") != std::string::npos);
}

TEST_CASE("ReadHistories keeps records it does not know and skips lines that are not JSON objects",
          "[history]") {
  outbox::testing::TempDir dir;
  const std::string path = dir.File("history.jsonl");
  outbox::testing::WriteFileBytes(
      path,
      "{\"process\":1,\"time_ms\":5,\"type\":\"ok\",\"f\":\"settle\",\"value\":[1,2],\"token\":7}\n"
      "{\"process\":\"x\",\"time_ms\":\"y\",\"type\":\"invoke\",\"f\":\"txn\",\"value\":\"evt-1\"}"
      "\n"
      "{\"process\":1,\"type\":\"ok\",\"f\":\"txn\",\"value\":\"evt-\xFF\"}\n"
      "not json\n"
      "[1,2]\n");
  std::int64_t malformed = 0;
  const auto ops = outbox::lab::ReadHistories({path}, &malformed);
  REQUIRE(ops.size() == 2);
  CHECK(ops[0].f == "settle");
  CHECK(ops[0].value == "[1,2]");
  CHECK(ops[0].time_ms == 5);
  CHECK(ops[0].details == "{\"token\":7}");
  CHECK(ops[1].process == 0);  // a process that is not a number is not trusted
  CHECK(ops[1].time_ms == 0);
  CHECK(malformed == 3);
}

TEST_CASE("The page switches to bins one record or operation past its detail limits", "[report]") {
  const ReportModel model = ChapterModel();  // 8 records, 20 operations (holds included)
  outbox::lab::RenderOptions options;
  options.max_detailed_records = 8;
  options.max_detailed_ops = 20;
  std::string html = RenderReportHtml(model, options);
  CHECK(html.find("id=\"kafka\" data-mode=\"detailed\"") != std::string::npos);
  CHECK(html.find("id=\"timeline\" data-mode=\"detailed\"") != std::string::npos);
  options.max_detailed_records = 7;
  options.max_detailed_ops = 19;
  html = RenderReportHtml(model, options);
  CHECK(html.find("id=\"kafka\" data-mode=\"binned\"") != std::string::npos);
  CHECK(html.find("id=\"timeline\" data-mode=\"binned\"") != std::string::npos);
  CHECK(Count(html, "<g class=\"kill\"") == 2);  // kills survive aggregation
  CHECK(Count(html, "class=\"range dup\"") >= 1);
}

TEST_CASE("RequireWritableFile refuses a page under a missing directory naming that folder and "
          "leaves no file behind",
          "[report]") {
  outbox::testing::TempDir dir;
  const std::string missing = dir.File("nonexist/x.html");
  const auto error =
      outbox::testing::CaptureThrow<outbox::ConfigError>([&] { outbox::lab::RequireWritableFile(missing); });
  REQUIRE(error);
  CHECK(std::string(error->what()) == "write '" + missing + "': the folder '" +
                                          dir.File("nonexist") + "' does not exist (create it "
                                          "first: mkdir -p '" + dir.File("nonexist") + "')");
  const auto written = outbox::testing::CaptureThrow<outbox::ConfigError>(
      [&] { outbox::lab::WriteFileAtomically(missing, "<html></html>"); });
  REQUIRE(written);
  CHECK(std::string(written->what()) == std::string(error->what()));

  const std::string page = dir.File("x.html");
  CHECK_NOTHROW(outbox::lab::RequireWritableFile(page));
  CHECK(outbox::testing::ListDir(dir.path()).empty());
}

TEST_CASE("BuildReportModel judges a log the broker truncated as check does and not as lost",
          "[report]") {
  outbox::testing::TempDir dir;
  auto store = outbox::lab::ResetLabDatabase(dir.File("lab.db"), outbox::StoreOptions{});
  for (std::int64_t i = 1; i <= 3; ++i) {
    outbox::lab::WriteLoanWithEvent(*store, i);
    REQUIRE(store->MarkPublished(i));
  }
  // Offsets 0 and 1 dropped (retention); evt-1003 is what is left.
  TopicRecord left;
  left.offset = 2;
  left.key = left.event_id = "evt-1003";
  const std::vector<outbox::lab::PartitionExtent> truncated = {{0, 2, 3}};

  const ReportModel model =
      outbox::lab::BuildReportModel(*store, {left}, {}, false, 0, {}, truncated);

  CHECK(model.check.lost.empty());
  CHECK(model.check.retention_unknown == std::vector<std::string>{"evt-1001", "evt-1002"});
  CHECK(model.check.verdict() == outbox::lab::Verdict::kCannotJudge);
  const std::string html = RenderReportHtml(model);
  CHECK(Count(html, "data-key=\"retention-unknown\" data-count=\"2\"") == 1);

  // One offset dropped for two missing events: at least one is lost, and the page says so.
  const ReportModel beyond =
      outbox::lab::BuildReportModel(*store, {left}, {}, false, 0, {}, {{0, 1, 3}});
  CHECK(beyond.check.lost_beyond_retention == 1);
  CHECK(beyond.check.verdict() == outbox::lab::Verdict::kInvalid);
  CHECK(Count(RenderReportHtml(beyond), "data-key=\"lost-beyond-retention\" data-count=\"1\"") ==
        1);
}
