#include "lab/report/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "outbox/error.h"

namespace outbox::lab {

namespace {

// Throws ConfigError naming path's folder when it does not exist or is not a folder: the
// temporary file's strerror ("write 'out/x.html.tmp': No such file or directory") names a file
// the user never asked for.
void RequireFolderOf(const std::string& path) {
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  if (folder.empty()) return;
  std::error_code ec;
  const auto status = std::filesystem::status(folder, ec);
  if (status.type() == std::filesystem::file_type::not_found)
    throw ConfigError(fmt::format("write '{}': the folder '{}' does not exist (create it first: "
                                  "mkdir -p '{}')",
                                  path, folder.string(), folder.string()));
  if (!ec && status.type() != std::filesystem::file_type::directory)
    throw ConfigError(
        fmt::format("write '{}': '{}' is not a folder", path, folder.string()));
}

}  // namespace

void WriteFileAtomically(const std::string& path, const std::string& text) {
  RequireFolderOf(path);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) throw ConfigError(fmt::format("write '{}': {}", tmp, std::strerror(errno)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(tmp.c_str());
    throw ConfigError(fmt::format("write '{}': {}", path, std::strerror(error)));
  }
}

void RequireWritableFile(const std::string& path) {
  RequireFolderOf(path);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw ConfigError(fmt::format("write '{}': {}", tmp, std::strerror(errno)));
  }
  std::remove(tmp.c_str());
}

// --- untrusted bytes -----------------------------------------------------------------------------

std::string SanitizeUtf8(std::string_view bytes) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  out.reserve(bytes.size());
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(bytes[i]); };
  std::size_t i = 0;
  while (i < bytes.size()) {
    const unsigned char b = byte(i);
    if (b < 0x80) {
      if (b < 0x20 && b != '\t' && b != '\n')
        out += kReplacement;
      else if (b == 0x7F)
        out += kReplacement;
      else
        out += static_cast<char>(b);
      ++i;
      continue;
    }
    // Table 3-7: the allowed range of the second byte depends on the first.
    std::size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;
    if (b >= 0xC2 && b <= 0xDF)
      length = 2;
    else if (b == 0xE0)
      length = 3, low = 0xA0;
    else if (b >= 0xE1 && b <= 0xEC)
      length = 3;
    else if (b == 0xED)
      length = 3, high = 0x9F;  // no surrogates
    else if (b >= 0xEE && b <= 0xEF)
      length = 3;
    else if (b == 0xF0)
      length = 4, low = 0x90;
    else if (b >= 0xF1 && b <= 0xF3)
      length = 4;
    else if (b == 0xF4)
      length = 4, high = 0x8F;  // nothing above U+10FFFF
    std::size_t good = 0;       // bytes of a valid sequence
    if (length > 0 && i + 1 < bytes.size() && byte(i + 1) >= low && byte(i + 1) <= high) {
      good = 2;
      while (good < length && i + good < bytes.size() && byte(i + good) >= 0x80 &&
             byte(i + good) <= 0xBF)
        ++good;
    }
    if (length > 0 && good == length) {
      out.append(bytes.substr(i, length));
      i += length;
    } else {
      // A maximal invalid prefix becomes one U+FFFD (Unicode's "substitution of maximal subparts").
      out += kReplacement;
      i += std::max<std::size_t>(good == 0 ? 1 : good, 1);
    }
  }
  return out;
}

std::string EscapeHtml(std::string_view bytes) {
  const std::string clean = SanitizeUtf8(bytes);
  std::string out;
  out.reserve(clean.size());
  for (const char c : clean) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

// At most max_chars code points of already-valid UTF-8, with "…" when cut.
std::string Shorten(const std::string& valid_utf8, std::size_t max_chars) {
  std::size_t chars = 0, i = 0;
  while (i < valid_utf8.size()) {
    if (chars == max_chars) return valid_utf8.substr(0, i) + "\xE2\x80\xA6";
    ++chars;
    ++i;
    while (i < valid_utf8.size() && (static_cast<unsigned char>(valid_utf8[i]) & 0xC0) == 0x80) ++i;
  }
  return valid_utf8;
}

std::string EscapeShort(std::string_view bytes, std::size_t max_chars) {
  return EscapeHtml(Shorten(SanitizeUtf8(bytes), max_chars));
}

}  // namespace

// --- gathering -----------------------------------------------------------------------------------

std::vector<ReportLane> BuildLanes(const std::vector<HistoryOp>& ops) {
  enum class ProcessState { kNone, kRunning, kEnded };
  std::vector<ReportLane> lanes;
  std::vector<ProcessState> states;
  std::vector<std::map<std::pair<std::string, std::string>, std::deque<std::size_t>>> open;
  std::unordered_map<std::int64_t, std::size_t> lane_of;
  std::unordered_map<std::string, std::int64_t> sends_of_event;

  for (std::size_t seq = 0; seq < ops.size(); ++seq) {
    const HistoryOp& op = ops[seq];
    auto found = lane_of.find(op.process);
    // A PID seen again after its process ended is a new process.
    const bool reused = found != lane_of.end() && op.f == "process" && op.type == "invoke" &&
                        states[found->second] != ProcessState::kNone;
    if (found == lane_of.end() || reused) {
      lane_of[op.process] = lanes.size();
      lanes.emplace_back();
      lanes.back().process = op.process;
      lanes.back().first_ms = op.time_ms;
      states.push_back(ProcessState::kNone);
      open.emplace_back();
      found = lane_of.find(op.process);
    }
    const std::size_t index = found->second;
    ReportLane& lane = lanes[index];
    lane.last_ms = std::max(lane.last_ms, op.time_ms);
    lane.last_seq = static_cast<std::int64_t>(seq);
    const auto now_seq = static_cast<std::int64_t>(seq);

    if (op.f == "process") {
      if (op.type == "invoke") {
        lane.name = op.value;
        states[index] = ProcessState::kRunning;
      } else {
        states[index] = ProcessState::kEnded;
        lane.failed = op.type == "fail";
      }
      continue;
    }
    auto& pending = open[index][{op.f, op.value}];
    if (op.type == "invoke") {
      ReportOp r;
      r.f = op.f;
      r.value = op.value;
      r.outcome = "open";
      r.start_ms = r.end_ms = op.time_ms;
      r.start_seq = r.end_seq = now_seq;
      if (op.f == "send") r.attempt = ++sends_of_event[op.value];
      pending.push_back(lane.ops.size());
      lane.ops.push_back(std::move(r));
      continue;
    }
    if ((op.type == "ok" || op.type == "fail") && !pending.empty()) {
      ReportOp& r = lane.ops[pending.front()];
      pending.pop_front();
      r.outcome = op.type;
      r.end_ms = op.time_ms;
      r.end_seq = now_seq;
      r.error = op.error;
      r.details = op.details;
      continue;
    }
    ReportOp r;  // a record without invoke: a mark, a hold point, or something newer
    r.f = op.f;
    r.value = op.value;
    r.outcome = op.type;
    r.start_ms = r.end_ms = op.time_ms;
    r.start_seq = r.end_seq = now_seq;
    r.error = op.error;
    r.details = op.details;
    lane.ops.push_back(std::move(r));
  }
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    if (states[i] == ProcessState::kRunning) lanes[i].never_finished = true;
    if (states[i] == ProcessState::kNone)
      lanes[i].never_finished = std::any_of(lanes[i].ops.begin(), lanes[i].ops.end(),
                                            [](const ReportOp& r) { return r.outcome == "open"; });
  }
  return lanes;
}

std::vector<ReportCell> BuildCells(const std::vector<TopicRecord>& records,
                                   const std::vector<OutboxEntry>& outbox,
                                   const std::vector<ReportLane>& lanes) {
  std::unordered_map<std::string, std::int64_t> outbox_id;
  for (const OutboxEntry& entry : outbox) outbox_id.emplace(entry.event_id, entry.id);
  std::unordered_map<std::string, std::int64_t> copies;
  for (const TopicRecord& record : records) ++copies[record.event_id];

  // The first killed process that acknowledged a send of the event and never marked it; else
  // the first process whose send of it failed.
  std::unordered_map<std::string, DuplicateCause> cause_of;
  for (const ReportLane& lane : lanes) {
    std::unordered_set<std::string> marked;
    for (const ReportOp& op : lane.ops)
      if (op.f == "mark" && op.outcome == "ok") marked.insert(op.value);
    for (const ReportOp& op : lane.ops) {
      if (op.f != "send" || copies.count(op.value) == 0 || copies[op.value] < 2) continue;
      auto& cause = cause_of[op.value];
      if (op.outcome == "ok" && lane.never_finished && !marked.count(op.value) &&
          cause.kind != DuplicateCause::Kind::kKill)
        cause = {DuplicateCause::Kind::kKill, lane.process};
      else if (op.outcome == "fail" && cause.kind == DuplicateCause::Kind::kUnknown)
        cause = {DuplicateCause::Kind::kFailedSend, lane.process};
    }
  }

  std::vector<ReportCell> cells;
  cells.reserve(records.size());
  std::unordered_map<std::string, std::int64_t> seen;
  for (const TopicRecord& record : records) {
    ReportCell cell;
    cell.record = record;
    const auto id = outbox_id.find(record.event_id);
    if (id != outbox_id.end()) cell.outbox_id = id->second;
    cell.copy = ++seen[record.event_id];
    cell.copies = copies[record.event_id];
    if (cell.copy > 1) {
      const auto cause = cause_of.find(record.event_id);
      if (cause != cause_of.end()) cell.cause = cause->second;
    }
    cells.push_back(std::move(cell));
  }
  return cells;
}

ReportModel BuildReportModel(Store& store, const std::vector<TopicRecord>& records,
                             const std::vector<HistoryOp>& ops, bool has_history,
                             std::int64_t malformed_lines,
                             const std::string& broker_incarnation) {
  ReportModel model;
  model.generated_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  model.check = CheckRun(store, records, has_history ? &ops : nullptr, {}, broker_incarnation);
  model.check.history.malformed_lines = malformed_lines;
  model.db = TakeDbSnapshot(store);
  model.kafka = Reconcile(model.db.outbox_event_ids, records);
  model.lanes = BuildLanes(ops);
  model.cells = BuildCells(records, model.check.outbox, model.lanes);
  model.has_history = has_history;
  model.history_records = static_cast<std::int64_t>(ops.size());
  model.malformed_lines = malformed_lines;
  return model;
}

// --- rendering -----------------------------------------------------------------------------------

namespace {

constexpr int kLabelWidth = 170;
constexpr int kTrackHeight = 20;
constexpr int kLanePadding = 14;
constexpr int kAxisHeight = 34;

using Out = std::back_insert_iterator<std::string>;

std::string UtcTime(std::int64_t epoch_ms) {
  const std::time_t seconds = static_cast<std::time_t>(epoch_ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:03} UTC", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     static_cast<int>(epoch_ms % 1000));
}

std::string Duration(std::int64_t ms) {
  if (ms < 1000) return fmt::format("{} ms", ms);
  if (ms < 60000) return fmt::format("{:.2f} s", ms / 1000.0);
  return fmt::format("{:.1f} min", ms / 60000.0);
}

// A light colour per event id (FNV-1a of its bytes picks the hue).
std::string ColourOf(const std::string& event_id) {
  std::uint32_t hash = 2166136261u;
  for (const char c : event_id) hash = (hash ^ static_cast<unsigned char>(c)) * 16777619u;
  // murmur3's finaliser: ids that differ in one last digit get unrelated hues.
  hash ^= hash >> 16;
  hash *= 0x85ebca6bu;
  hash ^= hash >> 13;
  hash *= 0xc2b2ae35u;
  hash ^= hash >> 16;
  return fmt::format("hsl({},62%,{}%)", hash % 360, 70 + (hash >> 9) % 12);
}

std::string LaneTitle(const ReportLane& lane) {
  return lane.name.empty() ? fmt::format("pid {}", lane.process) : lane.name;
}

std::string LaneEnd(const ReportLane& lane) {
  if (lane.never_finished) return "killed (never finished)";
  if (lane.failed) return "ended with an error";
  return lane.name.empty() ? "finished" : "exited";
}

// Ids of a count, escaped and capped at max with "and N more".
std::string IdList(const std::vector<std::string>& ids, std::int64_t max) {
  std::string text;
  std::int64_t shown = 0;
  for (const auto& id : ids) {
    if (shown == max) {
      text += fmt::format(" and {} more", static_cast<std::int64_t>(ids.size()) - max);
      break;
    }
    text += (shown++ ? ", " : "") + EscapeHtml(id);
  }
  return text;
}

// Joins in the renderer: outbox id and topic positions of an event id.
struct EventIndex {
  std::unordered_map<std::string, std::int64_t> outbox_id;
  std::unordered_map<std::string, std::string> positions;  // "p0:0 p0:3"

  explicit EventIndex(const ReportModel& model) {
    for (const OutboxEntry& entry : model.check.outbox) outbox_id.emplace(entry.event_id, entry.id);
    for (const ReportCell& cell : model.cells) {
      auto& text = positions[cell.record.event_id];
      if (text.size() < 200)
        text += fmt::format("{}p{}:{}", text.empty() ? "" : " ", cell.record.partition,
                            cell.record.offset);
    }
  }
};

void RenderStyle(Out out) {
  fmt::format_to(out, "{}", R"CSS(<style>
:root{--ok:#2e7d32;--fail:#c62828;--open:#ef6c00;--mark:#1565c0;--other:#616161;--hold:#f9a825;--ink:#1d2330;--muted:#5b6475;--line:#d6dbe4}
*{box-sizing:border-box}
body{margin:0;padding:18px 22px;font:14px/1.4 "DejaVu Sans",system-ui,sans-serif;color:var(--ink);background:#f4f6f9}
h1{font-size:21px;margin:0 0 2px}h2{font-size:16px;margin:0 0 8px}
.meta{color:var(--muted);font-size:12px;margin:0 0 12px;word-break:break-all}
.row{display:flex;gap:14px;flex-wrap:wrap;align-items:flex-start}
section{background:#fff;border:1px solid var(--line);border-radius:8px;padding:12px 14px;margin-bottom:14px}
.row>section{flex:1 1 380px}
table{border-collapse:collapse;font-size:13px;width:100%}
td,th{border-bottom:1px solid #eceff4;padding:3px 8px;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.bad td{color:var(--fail);font-weight:bold}tr.warn td{color:var(--open)}
td.ids{font-size:12px;word-break:break-all;font-weight:normal}
.badge{display:inline-block;padding:3px 12px;border-radius:14px;font-weight:bold;font-size:15px;color:#fff}
.badge.valid{background:var(--ok)}.badge.invalid{background:var(--fail)}
.scroll{overflow-x:auto}
.legend{font-size:12px;color:var(--muted);margin:4px 0 8px}
.legend span{margin-right:14px;white-space:nowrap}
svg text{font-family:"DejaVu Sans",system-ui,sans-serif}
.lane-bg{fill:#fafbfd}.lane-bg.alt{fill:#f0f3f8}
.lane-name{font-weight:bold;font-size:13px}.lane-sub{font-size:11px;fill:var(--muted)}
.track-name{font-size:10px;fill:var(--muted)}
.axis{font-size:10px;fill:var(--muted)}.gap{stroke:#9aa3b5;stroke-dasharray:3 3}
.op{cursor:pointer}.op .span{stroke:#9aa3b5;stroke-width:2}
.ok .g{fill:var(--ok)}.fail .g{fill:var(--fail)}.open .g{fill:#fff;stroke:var(--open);stroke-width:2}
.f-mark.ok .g{fill:var(--mark)}.other .g{fill:var(--other)}
.kill line{stroke:var(--fail);stroke-width:3.5}.kill text{fill:var(--fail);font-weight:bold;font-size:11px}
.hold line{stroke:var(--hold);stroke-width:3;stroke-dasharray:5 3}.hold text{fill:#8d6e00;font-size:10px;font-weight:bold}
.cell rect{stroke:#fff;stroke-width:1}.cell.dup rect{stroke:#b71c1c;stroke-width:3}
.cell text{font-size:10px;pointer-events:none}.cell .off{fill:#4a5160;font-size:9px}
.cell .dot{fill:#b71c1c}
.range{cursor:pointer}
.cmp{display:flex;gap:10px}.cmp>div{flex:1;border:1px solid var(--line);border-radius:6px;padding:6px 8px;font-size:13px}
.cmp .arrow{flex:0 0 auto;border:0;align-self:center;color:var(--fail);font-weight:bold}
.violation{margin-bottom:8px}
#details{position:fixed;right:14px;bottom:14px;max-width:420px;background:#1d2330;color:#fff;border-radius:6px;padding:8px 10px;font:12px/1.45 "DejaVu Sans Mono",monospace;white-space:pre-wrap;word-break:break-all;box-shadow:0 2px 10px rgba(0,0,0,.3)}
</style>
)CSS");
}

void RenderScript(Out out) {
  // textContent only: no string from the data is ever parsed as HTML.
  fmt::format_to(out, "{}", R"JS(<script>
(function () {
  var box = document.getElementById('details');
  function show(el) {
    var d = el.dataset, lines = [];
    for (var k in d) if (k !== 'tip') lines.push(k.replace(/[A-Z]/g, function (c) { return '-' + c.toLowerCase(); }) + ': ' + d[k]);
    box.textContent = lines.join('\n');
    box.hidden = false;
  }
  function pick(e) { var el = e.target.closest && e.target.closest('[data-tip]'); if (el) show(el); }
  document.addEventListener('mouseover', pick);
  document.addEventListener('click', pick);
  document.addEventListener('keydown', function (e) { if (e.key === 'Escape') box.hidden = true; });
  window.addEventListener('load', function () {
    document.documentElement.setAttribute('data-loaded-ms', String(Math.round(performance.now())));
  });
})();
</script>
)JS");
}

void RenderVerdict(Out out, const ReportModel& model, const RenderOptions& options) {
  const CheckResult& r = model.check;
  const bool valid = r.valid();
  fmt::format_to(out,
                 "<section id=\"verdict\" data-valid=\"{}\"><h2>Checker verdict: <span "
                 "class=\"badge {}\" id=\"verdict-text\">{}</span></h2>\n",
                 valid ? "true" : "false", valid ? "valid" : "invalid",
                 r.verdict() == Verdict::kInvalid ? "INVALID" : VerdictName(r.verdict()));
  fmt::format_to(out, "<table id=\"counts\"><tr><th>count</th><th>value</th><th>ids</th></tr>\n");
  // kBad: invalidates the run (red when non-zero); kWarn: worth a look (orange); kPlain: a tally.
  enum Kind { kPlain, kWarn, kBad };
  const auto row = [&](const char* key, const char* label, std::int64_t count, Kind kind,
                       const std::string& ids) {
    const char* cls = count == 0 || kind == kPlain ? "" : kind == kBad ? "bad" : "warn";
    fmt::format_to(out,
                   "<tr data-key=\"{}\" data-count=\"{}\" class=\"{}\"><td>{}</td><td "
                   "class=\"n\">{}</td><td class=\"ids\">{}</td></tr>\n",
                   key, count, cls, label, count, ids);
  };
  const auto size = [](const auto& v) { return static_cast<std::int64_t>(v.size()); };
  const std::int64_t max = options.max_listed_ids;
  fmt::format_to(out,
                 "<tr data-key=\"ok\" data-count=\"{0}\"><td>ok (outbox events in Kafka)</td><td "
                 "class=\"n\">{0}</td><td></td></tr>\n",
                 r.ok);
  row("lost", "lost", size(r.lost), kBad, IdList(r.lost, max));
  std::vector<std::string> duplicated;
  for (const auto& [id, n] : r.duplicated) duplicated.push_back(fmt::format("{} x{}", id, n));
  // Duplicates are allowed (at-least-once): counted, never red.
  fmt::format_to(out,
                 "<tr data-key=\"duplicated\" data-count=\"{0}\"><td>duplicated (allowed: "
                 "at-least-once)</td><td class=\"n\">{0}</td><td class=\"ids\">{1}</td></tr>\n",
                 size(r.duplicated), IdList(duplicated, options.max_listed_duplicates));
  row("phantom", "phantom", size(r.phantom), kBad, IdList(r.phantom, max));
  row("atomicity", "atomicity", size(r.atomicity), kBad, IdList(r.atomicity, max));
  row("lost-after-mark", "lost after mark", size(r.lost_after_mark), kBad,
      IdList(r.lost_after_mark, max));
  // Not lost: the relay will send them (not drained yet).
  row("stuck", "pending (unpublished: not drained yet)", size(r.stuck), kWarn, IdList(r.stuck, max));
  row("order-violations", "order violations", size(r.order_violations), kWarn,
      IdList(r.order_violations, max));
  const HistoryVerdict& h = r.history;
  if (h.present) {
    fmt::format_to(out, "<tr><th colspan=\"3\">history ({} records)</th></tr>\n",
                   model.history_records);
    row("attempts", "attempts", h.attempts, kPlain, "");
    row("acknowledged", "acknowledged", h.acknowledged, kPlain, "");
    row("failed", "failed", h.failed, kPlain, "");
    row("indeterminate", "indeterminate (open at a crash)", h.indeterminate, kWarn, "");
    row("recovered", "recovered (indeterminate, yet in Kafka)", h.recovered, kPlain, "");
    row("unexpected", "unexpected (never attempted)", size(h.unexpected), kBad,
        IdList(h.unexpected, max));
    row("malformed-lines", "malformed history lines", h.malformed_lines, kWarn, "");
  }
  fmt::format_to(out, "</table></section>\n");
}

void RenderReconciliation(Out out, const ReportModel& model, const RenderOptions& options) {
  fmt::format_to(out,
                 "<section id=\"reconciliation-section\"><h2>Reconciliation</h2>\n"
                 "<table id=\"reconciliation\">\n");
  const auto row = [&](const char* key, const char* label, std::int64_t value,
                       const std::string& extra = {}) {
    fmt::format_to(out,
                   "<tr data-key=\"{}\" data-value=\"{}\"><td>{}</td><td class=\"n\">{}</td><td "
                   "class=\"ids\">{}</td></tr>\n",
                   key, value, label, value, extra);
  };
  row("business", "business rows", model.db.business_loans);
  row("outbox", "outbox rows", model.db.outbox.total);
  row("published", "published=TRUE", model.db.outbox.published);
  row("unpublished", "unpublished", model.db.outbox.unpublished);
  row("kafka-records", "Kafka records", model.kafka.records);
  row("kafka-distinct", "Kafka distinct event ids", model.kafka.distinct_event_ids);
  std::vector<std::string> duplicates;
  for (const auto& [id, n] : model.kafka.duplicates)
    duplicates.push_back(fmt::format("{} x{}", id, n));
  row("duplicated-ids", "duplicated ids", static_cast<std::int64_t>(duplicates.size()),
      duplicates.empty() ? std::string("none") : IdList(duplicates, options.max_listed_duplicates));
  fmt::format_to(out, "</table></section>\n");
}

// --- timeline
// --------------------------------------------------------------------------------------

std::vector<std::string> TracksOf(const ReportLane& lane) {
  static const std::vector<std::string> kFixed = {"txn", "send", "mark"};
  std::set<std::string> used;
  for (const ReportOp& op : lane.ops)
    if (op.f != "hold") used.insert(op.f);
  std::vector<std::string> tracks;
  for (const auto& f : kFixed)
    if (used.erase(f)) tracks.push_back(f);
  tracks.insert(tracks.end(), used.begin(), used.end());
  if (tracks.empty()) tracks.push_back("txn");
  return tracks;
}

int TrackIndex(const std::vector<std::string>& tracks, const std::string& f) {
  const auto it = std::find(tracks.begin(), tracks.end(), f);
  return it == tracks.end() ? 0 : static_cast<int>(it - tracks.begin());
}

std::string OpClass(const ReportOp& op) {
  const bool known = op.f == "txn" || op.f == "send" || op.f == "mark";
  const bool outcome_known = op.outcome == "ok" || op.outcome == "fail" || op.outcome == "open";
  return fmt::format("op f-{} {}{}", known ? op.f : "other", outcome_known ? op.outcome : "other",
                     known ? "" : " other");
}

std::string OpTitle(const ReportOp& op, const ReportLane& lane, const EventIndex& index) {
  std::string text = fmt::format("{} {} {}: {}", LaneTitle(lane), op.f, op.value, op.outcome);
  const auto outbox = index.outbox_id.find(op.value);
  if (outbox != index.outbox_id.end()) text += fmt::format(", outbox id {}", outbox->second);
  const auto kafka = index.positions.find(op.value);
  if (kafka != index.positions.end()) text += fmt::format(", in Kafka at {}", kafka->second);
  if (op.attempt > 0) text += fmt::format(", send attempt {}", op.attempt);
  if (!op.error.empty()) text += ", error: " + op.error;
  if (!op.details.empty()) text += ", " + op.details;
  return text;
}

// Data attributes shared by both modes for one operation.
std::string OpData(const ReportOp& op, const ReportLane& lane, const EventIndex& index) {
  std::string data = fmt::format(
      "data-tip=\"\" data-process=\"{}\" data-f=\"{}\" data-value=\"{}\" data-outcome=\"{}\" "
      "data-time=\"{}\"",
      lane.process, EscapeHtml(op.f), EscapeHtml(op.value), EscapeHtml(op.outcome),
      EscapeHtml(op.start_ms == op.end_ms ? UtcTime(op.start_ms)
                                          : UtcTime(op.start_ms) + " .. " + UtcTime(op.end_ms)));
  const auto outbox = index.outbox_id.find(op.value);
  if (outbox != index.outbox_id.end())
    data += fmt::format(" data-outbox-id=\"{}\"", outbox->second);
  const auto kafka = index.positions.find(op.value);
  if (kafka != index.positions.end()) data += fmt::format(" data-kafka=\"{}\"", kafka->second);
  if (op.attempt > 0) data += fmt::format(" data-attempt=\"{}\"", op.attempt);
  if (!op.error.empty()) data += fmt::format(" data-error=\"{}\"", EscapeHtml(op.error));
  if (!op.details.empty()) data += fmt::format(" data-details=\"{}\"", EscapeHtml(op.details));
  return data;
}

struct LaneGeometry {
  int top = 0;
  int height = 0;
  std::vector<std::string> tracks;
  int TrackY(int track) const {
    return top + kLanePadding / 2 + track * kTrackHeight + kTrackHeight / 2;
  }
};

std::vector<LaneGeometry> LayOutLanes(const std::vector<ReportLane>& lanes, int* total_height) {
  std::vector<LaneGeometry> geometry;
  int y = kAxisHeight;
  for (const ReportLane& lane : lanes) {
    LaneGeometry g;
    g.tracks = TracksOf(lane);
    g.top = y;
    g.height = std::max<int>(static_cast<int>(g.tracks.size()), 2) * kTrackHeight + kLanePadding;
    y += g.height;
    geometry.push_back(std::move(g));
  }
  *total_height = y + 6;
  return geometry;
}

void RenderLaneOpen(Out out, const ReportLane& lane, const LaneGeometry& g, std::size_t i,
                    int width) {
  fmt::format_to(out,
                 "<g class=\"lane{}\" id=\"lane-{}-{}\" data-process=\"{}\" data-name=\"{}\" "
                 "data-never-finished=\"{}\">\n",
                 lane.never_finished ? " killed" : "", lane.process, i, lane.process,
                 EscapeHtml(lane.name), lane.never_finished ? "true" : "false");
  fmt::format_to(out, "<rect class=\"lane-bg{}\" x=\"0\" y=\"{}\" width=\"{}\" height=\"{}\"/>\n",
                 i % 2 ? " alt" : "", g.top, width, g.height);
  fmt::format_to(out, "<text class=\"lane-name\" x=\"8\" y=\"{}\">{}</text>\n", g.top + 18,
                 EscapeShort(LaneTitle(lane), 22));
  fmt::format_to(out, "<text class=\"lane-sub\" x=\"8\" y=\"{}\">pid {} · {}</text>\n", g.top + 33,
                 lane.process, LaneEnd(lane));
  for (std::size_t t = 0; t < g.tracks.size(); ++t)
    fmt::format_to(
        out, "<text class=\"track-name\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n",
        kLabelWidth - 6, g.TrackY(static_cast<int>(t)) + 3, EscapeShort(g.tracks[t], 10));
}

void RenderKill(Out out, const ReportLane& lane, const LaneGeometry& g, double x) {
  const int mid = g.top + g.height / 2;
  fmt::format_to(
      out,
      "<g class=\"kill\" id=\"kill-{0}\" data-tip=\"\" data-process=\"{0}\" "
      "data-name=\"{1}\" data-time=\"{2}\" data-what=\"no record after this one: "
      "killed (kill -9) or still running\"><title>kill -9: {1} (pid {0}) never "
      "finished; last record at {2}</title>\n"
      "<line x1=\"{3:.1f}\" y1=\"{4}\" x2=\"{5:.1f}\" y2=\"{6}\"/><line x1=\"{3:.1f}\" "
      "y1=\"{6}\" x2=\"{5:.1f}\" y2=\"{4}\"/><text x=\"{7:.1f}\" y=\"{8}\">kill -9</text></g>\n",
      lane.process, EscapeHtml(LaneTitle(lane)), UtcTime(lane.last_ms), x - 7, mid - 7, x + 7,
      mid + 7, x + 10, mid + 4);
}

void RenderHold(Out out, const ReportOp& op, const ReportLane& lane, const LaneGeometry& g,
                double x) {
  fmt::format_to(out,
                 "<g class=\"hold\" data-tip=\"\" data-process=\"{0}\" data-value=\"{1}\" "
                 "data-time=\"{2}\"><title>HOLD {1} ({3})</title><line x1=\"{4:.1f}\" y1=\"{5}\" "
                 "x2=\"{4:.1f}\" y2=\"{6}\"/><text x=\"{7:.1f}\" y=\"{8}\">HOLD</text></g>\n",
                 lane.process, EscapeHtml(op.value), UtcTime(op.start_ms),
                 EscapeHtml(LaneTitle(lane)), x, g.top + 3, g.top + g.height - 3, x + 3,
                 g.top + 11);
}

// End glyph of an operation at (x, y).
void RenderGlyph(Out out, const ReportOp& op, double x, int y) {
  if (op.f == "txn")
    fmt::format_to(out, "<circle class=\"g\" cx=\"{:.1f}\" cy=\"{}\" r=\"6\"/>", x, y);
  else if (op.f == "send")
    fmt::format_to(out, "<path class=\"g\" d=\"M{:.1f} {}l12 6l-12 6z\"/>", x - 6, y - 6);
  else if (op.f == "mark")
    fmt::format_to(out, "<rect class=\"g\" x=\"{:.1f}\" y=\"{}\" width=\"11\" height=\"11\"/>",
                   x - 5.5, y - 5);
  else
    fmt::format_to(out, "<path class=\"g\" d=\"M{:.1f} {}l6 6l-6 6l-6 -6z\"/>", x, y - 6);
  if (op.outcome == "open")
    fmt::format_to(out,
                   "<text x=\"{:.1f}\" y=\"{}\" font-size=\"9\" text-anchor=\"middle\" "
                   "fill=\"#ef6c00\">?</text>",
                   x, y + 3);
}

void RenderDetailedTimeline(Out out, const ReportModel& model, const EventIndex& index) {
  // Ordinal x: every record gets a slot in (time, read order); idle gaps are marked, not drawn
  // to scale, so that five transactions within one millisecond stay apart.
  std::vector<std::pair<std::int64_t, std::int64_t>> points;  // (time_ms, seq)
  for (const ReportLane& lane : model.lanes) {
    points.emplace_back(lane.last_ms, lane.last_seq);
    for (const ReportOp& op : lane.ops) {
      points.emplace_back(op.start_ms, op.start_seq);
      points.emplace_back(op.end_ms, op.end_seq);
    }
  }
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  std::unordered_map<std::int64_t, std::size_t> rank;  // seq -> slot
  for (std::size_t i = 0; i < points.size(); ++i) rank[points[i].second] = i;
  const double step = std::clamp(1000.0 / std::max<std::size_t>(points.size(), 1), 9.0, 30.0);
  const auto x_of = [&](std::int64_t seq) { return kLabelWidth + 24 + step * rank[seq]; };
  const int width = static_cast<int>(kLabelWidth + 24 + step * points.size() + 80);
  int height = 0;
  const auto geometry = LayOutLanes(model.lanes, &height);

  fmt::format_to(out,
                 "<div class=\"scroll\"><svg id=\"timeline\" data-mode=\"detailed\" "
                 "width=\"{0}\" height=\"{1}\" "
                 "viewBox=\"0 0 {0} {1}\">\n",
                 width, height);
  if (!points.empty()) {
    const std::int64_t t0 = points.front().first;
    fmt::format_to(out, "<text class=\"axis\" x=\"{}\" y=\"14\">t0 = {}</text>\n", kLabelWidth + 4,
                   UtcTime(t0));
    double last_label_x = -1000;
    int label_y = 30;
    for (std::size_t i = 1; i < points.size(); ++i) {
      const std::int64_t gap = points[i].first - points[i - 1].first;
      if (gap < 100) continue;
      const double x = kLabelWidth + 24 + step * (i - 0.5);
      // Two gaps a slot or two apart: the second label goes one row up.
      label_y = x - last_label_x < 70 && label_y == 30 ? 20 : 30;
      last_label_x = x;
      fmt::format_to(out,
                     "<g class=\"gap-mark\" data-gap-ms=\"{0}\"><line class=\"gap\" x1=\"{1:.1f}\" "
                     "y1=\"{4}\" x2=\"{1:.1f}\" y2=\"{2}\"/><text class=\"axis\" x=\"{1:.1f}\" "
                     "y=\"{5}\" text-anchor=\"middle\">+{3}</text></g>\n",
                     gap, x, height, Duration(gap), label_y + 3, label_y);
    }
  }
  for (std::size_t i = 0; i < model.lanes.size(); ++i) {
    const ReportLane& lane = model.lanes[i];
    const LaneGeometry& g = geometry[i];
    RenderLaneOpen(out, lane, g, i, width);
    for (const ReportOp& op : lane.ops) {
      if (op.f == "hold") {
        RenderHold(out, op, lane, g, x_of(op.start_seq));
        continue;
      }
      const int y = g.TrackY(TrackIndex(g.tracks, op.f));
      const double x1 = x_of(op.start_seq), x2 = x_of(op.end_seq);
      fmt::format_to(out, "<g class=\"{}\" {}><title>{}</title>", OpClass(op),
                     OpData(op, lane, index), EscapeHtml(OpTitle(op, lane, index)));
      if (x2 > x1)
        fmt::format_to(out,
                       "<line class=\"span\" x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\"/>", x1,
                       y, x2, y);
      RenderGlyph(out, op, x2, y);
      fmt::format_to(out, "</g>\n");
    }
    if (lane.never_finished) RenderKill(out, lane, g, x_of(lane.last_seq) + step * 0.6 + 4);
    fmt::format_to(out, "</g>\n");
  }
  fmt::format_to(out, "</svg></div>\n");
}

void RenderBinnedTimeline(Out out, const ReportModel& model, const RenderOptions& options) {
  std::int64_t t0 = INT64_MAX, t1 = INT64_MIN;
  for (const ReportLane& lane : model.lanes) {
    t0 = std::min(t0, lane.first_ms);
    t1 = std::max(t1, lane.last_ms);
  }
  const int bins = std::max(options.time_bins, 1);
  const double bin_ms = std::max<double>(static_cast<double>(t1 - t0 + 1) / bins, 1.0);
  const double bin_px = 6;
  const auto x_of = [&](std::int64_t ms) { return kLabelWidth + 10 + (ms - t0) / bin_ms * bin_px; };
  const int width = static_cast<int>(kLabelWidth + 10 + bins * bin_px + 130);
  int height = 0;
  const auto geometry = LayOutLanes(model.lanes, &height);

  // counts[lane][track][bin] = {ok, fail, open/other}
  struct Counts {
    std::int64_t ok = 0, fail = 0, other = 0;
  };
  // Each track has its own scale (its busiest bin is full height): a writer's steady trickle
  // stays visible beside a relay's burst. The scale is printed beside the track.
  std::vector<std::vector<std::int64_t>> max_count(model.lanes.size());
  std::vector<std::vector<std::map<int, Counts>>> counts(model.lanes.size());
  for (std::size_t i = 0; i < model.lanes.size(); ++i) {
    counts[i].resize(geometry[i].tracks.size());
    max_count[i].assign(geometry[i].tracks.size(), 1);
    for (const ReportOp& op : model.lanes[i].ops) {
      if (op.f == "hold") continue;
      const int bin = std::min(bins - 1, static_cast<int>((op.end_ms - t0) / bin_ms));
      const int track = TrackIndex(geometry[i].tracks, op.f);
      Counts& c = counts[i][track][bin];
      if (op.outcome == "ok")
        ++c.ok;
      else if (op.outcome == "fail")
        ++c.fail;
      else
        ++c.other;
      max_count[i][track] = std::max(max_count[i][track], c.ok + c.fail + c.other);
    }
  }

  fmt::format_to(
      out,
      "<div class=\"scroll\"><svg id=\"timeline\" data-mode=\"binned\" data-bin-ms=\"{2:.1f}\" "
      "width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\">\n",
      width, height, bin_ms);
  fmt::format_to(out, "<text class=\"axis\" x=\"{}\" y=\"14\">t0 = {}, {} bins of {}</text>\n",
                 kLabelWidth + 4, UtcTime(t0), bins, Duration(static_cast<std::int64_t>(bin_ms)));
  for (int b = 0; b <= bins; b += 20) {
    const double x = kLabelWidth + 10 + b * bin_px;
    fmt::format_to(out,
                   "<line class=\"gap\" x1=\"{0:.1f}\" y1=\"20\" x2=\"{0:.1f}\" y2=\"{1}\"/><text "
                   "class=\"axis\" x=\"{0:.1f}\" y=\"30\" text-anchor=\"middle\">+{2}</text>\n",
                   x, height, Duration(static_cast<std::int64_t>(b * bin_ms)));
  }
  for (std::size_t i = 0; i < model.lanes.size(); ++i) {
    const ReportLane& lane = model.lanes[i];
    const LaneGeometry& g = geometry[i];
    RenderLaneOpen(out, lane, g, i, width);
    for (std::size_t t = 0; t < g.tracks.size(); ++t) {
      const int base = g.TrackY(static_cast<int>(t)) + kTrackHeight / 2 - 1;
      const double scale = (kTrackHeight - 3) / static_cast<double>(max_count[i][t]);
      fmt::format_to(out, "<text class=\"axis\" x=\"{:.1f}\" y=\"{}\">max {}/bin</text>\n",
                     kLabelWidth + 14 + bins * bin_px, g.TrackY(static_cast<int>(t)) + 3,
                     max_count[i][t]);
      for (const auto& [bin, c] : counts[i][t]) {
        const double x = kLabelWidth + 10 + bin * bin_px;
        double y = base;
        fmt::format_to(
            out,
            "<g class=\"bin\" data-tip=\"\" data-process=\"{}\" data-f=\"{}\" "
            "data-from=\"{}\" data-ok=\"{}\" data-fail=\"{}\" data-open-or-other=\"{}\">",
            lane.process, EscapeHtml(g.tracks[t]),
            UtcTime(t0 + static_cast<std::int64_t>(bin * bin_ms)), c.ok, c.fail, c.other);
        for (const auto& [n, colour] :
             {std::pair{c.ok, g.tracks[t] == "mark" ? "var(--mark)" : "var(--ok)"},
              std::pair{c.fail, "var(--fail)"}, std::pair{c.other, "var(--open)"}}) {
          if (n == 0) continue;
          const double h = std::max(1.0, n * scale);
          y -= h;
          fmt::format_to(
              out,
              "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"/>", x,
              y, bin_px - 1, h, colour);
        }
        fmt::format_to(out, "</g>\n");
      }
    }
    for (const ReportOp& op : lane.ops)
      if (op.f == "hold") RenderHold(out, op, lane, g, x_of(op.start_ms));
    if (lane.never_finished) RenderKill(out, lane, g, x_of(lane.last_ms) + 6);
    fmt::format_to(out, "</g>\n");
  }
  fmt::format_to(out, "</svg></div>\n");
}

void RenderTimeline(Out out, const ReportModel& model, const RenderOptions& options,
                    const EventIndex& index) {
  std::int64_t ops = 0;
  for (const ReportLane& lane : model.lanes) ops += static_cast<std::int64_t>(lane.ops.size());
  const bool detailed = ops <= options.max_detailed_ops;
  fmt::format_to(out, "<section id=\"timeline-section\"><h2>Timeline: one lane per process</h2>\n");
  if (!model.has_history) {
    fmt::format_to(out,
                   "<p class=\"legend\" id=\"no-history\">No history given: run the lab's "
                   "commands with --history FILE (or OUTBOX_HISTORY) and pass the same files "
                   "to report --history.</p></section>\n");
    return;
  }
  fmt::format_to(
      out,
      "<p class=\"legend\"><span>● txn</span><span>▶ send (line: invoke → ack)</span>"
      "<span>■ mark</span><span>◆ other record</span><span style=\"color:var(--ok)\">"
      "ok</span><span style=\"color:var(--fail)\">failed</span><span "
      "style=\"color:var(--open)\">open ? (indeterminate)</span><span "
      "style=\"color:#8d6e00\">┆ HOLD point</span><span style=\"color:var(--fail)\">✕ kill "
      "-9 (no record after it)</span>{}</p>\n",
      detailed ? "<span>x: records in time order; dashed lines mark idle gaps</span>"
               : fmt::format("<span>{} operations: aggregated into time bins</span>", ops));
  if (detailed)
    RenderDetailedTimeline(out, model, index);
  else
    RenderBinnedTimeline(out, model, options);
  fmt::format_to(out, "</section>\n");
}

// --- the Kafka log
// ---------------------------------------------------------------------------------

std::string CauseText(const DuplicateCause& cause, const ReportModel& model) {
  std::string name = fmt::format("pid {}", cause.process);
  for (const ReportLane& lane : model.lanes)
    if (lane.process == cause.process && !lane.name.empty())
      name = fmt::format("{} (pid {})", lane.name, cause.process);
  switch (cause.kind) {
    case DuplicateCause::Kind::kKill:
      return fmt::format(
          "kill -9 of {} after the ack, before the mark: the row stayed unpublished "
          "and was sent again",
          name);
    case DuplicateCause::Kind::kFailedSend:
      return fmt::format(
          "a send in {} failed (e.g. timed out), yet the broker stored it: sent again", name);
    case DuplicateCause::Kind::kUnknown:
      break;
  }
  return "no history explains it";
}

std::string CauseId(const DuplicateCause& cause) {
  switch (cause.kind) {
    case DuplicateCause::Kind::kKill:
      return fmt::format("kill-{}", cause.process);
    case DuplicateCause::Kind::kFailedSend:
      return fmt::format("failed-send-{}", cause.process);
    case DuplicateCause::Kind::kUnknown:
      break;
  }
  return "unknown";
}

void RenderDetailedKafka(Out out, const ReportModel& model) {
  constexpr int kCellW = 74, kCellH = 40, kGap = 4, kPerRow = 14, kRowLabel = 36;
  std::map<std::int32_t, std::vector<const ReportCell*>> by_partition;
  for (const ReportCell& cell : model.cells) by_partition[cell.record.partition].push_back(&cell);
  int rows = 0;
  for (const auto& [p, cells] : by_partition)
    rows += static_cast<int>((cells.size() + kPerRow - 1) / kPerRow);
  const int width = kRowLabel + kPerRow * (kCellW + kGap);
  const int height = std::max(rows, 1) * (kCellH + 18) + 8 * static_cast<int>(by_partition.size());
  fmt::format_to(out,
                 "<div class=\"scroll\"><svg id=\"kafka\" data-mode=\"detailed\" "
                 "width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
                 "{1}\">\n",
                 width, height);
  int y = 4;
  for (const auto& [partition, cells] : by_partition) {
    fmt::format_to(out,
                   "<g class=\"partition\" data-partition=\"{0}\"><text class=\"axis\" x=\"2\" "
                   "y=\"{1}\">p{0}</text>\n",
                   partition, y + 26);
    for (std::size_t i = 0; i < cells.size(); ++i) {
      const ReportCell& c = *cells[i];
      const int x = kRowLabel + static_cast<int>(i % kPerRow) * (kCellW + kGap);
      const int cy = y + static_cast<int>(i / kPerRow) * (kCellH + 18) + 12;
      const bool dup = c.copy > 1;
      const std::string event = EscapeHtml(c.record.event_id);
      std::string title = fmt::format("partition {} offset {}: {} (copy {} of {}{})", partition,
                                      c.record.offset, c.record.event_id, c.copy, c.copies,
                                      c.outbox_id >= 0 ? fmt::format(", outbox id {}", c.outbox_id)
                                                       : std::string(", no outbox row: phantom"));
      if (dup) title += "; cause: " + CauseText(c.cause, model);
      if (dup && c.cause.kind == DuplicateCause::Kind::kKill)
        fmt::format_to(out, "<a href=\"#kill-{}\">", c.cause.process);
      fmt::format_to(out,
                     "<g class=\"cell{}{}\" id=\"rec-{}-{}\" data-tip=\"\" data-partition=\"{}\" "
                     "data-offset=\"{}\" data-event=\"{}\" data-outbox-id=\"{}\" data-copy=\"{}\" "
                     "data-copies=\"{}\"",
                     dup ? " dup" : "", c.copies > 1 && !dup ? " first-of-dup" : "", partition,
                     c.record.offset, partition, c.record.offset, event, c.outbox_id, c.copy,
                     c.copies);
      if (dup)
        fmt::format_to(out, " data-cause=\"{}\" data-cause-text=\"{}\"", CauseId(c.cause),
                       EscapeHtml(CauseText(c.cause, model)));
      fmt::format_to(
          out,
          "><title>{}</title><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"4\" "
          "fill=\"{}\"/><text class=\"off\" x=\"{}\" y=\"{}\">{}</text><text x=\"{}\" "
          "y=\"{}\" text-anchor=\"middle\">{}</text>",
          EscapeHtml(title), x, cy, kCellW, kCellH, ColourOf(c.record.event_id), x + 2, cy - 2,
          c.record.offset, x + kCellW / 2, cy + 24, EscapeShort(c.record.event_id, 11));
      if (c.copies > 1 && !dup)
        fmt::format_to(out, "<circle class=\"dot\" cx=\"{}\" cy=\"{}\" r=\"3\"/>", x + kCellW - 6,
                       cy + 6);
      fmt::format_to(out, "</g>{}\n",
                     dup && c.cause.kind == DuplicateCause::Kind::kKill ? "</a>" : "");
    }
    y += static_cast<int>((cells.size() + kPerRow - 1) / kPerRow) * (kCellH + 18) + 8;
    fmt::format_to(out, "</g>\n");
  }
  fmt::format_to(out, "</svg></div>\n");
}

void RenderBinnedKafka(Out out, const ReportModel& model, const RenderOptions& options) {
  std::map<std::int32_t, std::vector<const ReportCell*>> by_partition;
  for (const ReportCell& cell : model.cells) by_partition[cell.record.partition].push_back(&cell);
  const int ranges = std::max(options.offset_ranges, 1);
  constexpr int kRangeW = 6, kRowH = 26, kRowLabel = 36;
  const int width = kRowLabel + ranges * kRangeW + 10;
  const int height = static_cast<int>(by_partition.size()) * (kRowH + 8) + 8;
  fmt::format_to(out,
                 "<div class=\"scroll\"><svg id=\"kafka\" data-mode=\"binned\" "
                 "width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
                 "{1}\">\n",
                 width, height);
  int y = 4;
  for (const auto& [partition, cells] : by_partition) {
    fmt::format_to(out,
                   "<g class=\"partition\" data-partition=\"{0}\" data-records=\"{1}\"><text "
                   "class=\"axis\" x=\"2\" y=\"{2}\">p{0}</text>\n",
                   partition, cells.size(), y + 17);
    const std::size_t per_range = (cells.size() + ranges - 1) / ranges;
    for (std::size_t start = 0, r = 0; start < cells.size(); start += per_range, ++r) {
      const std::size_t end = std::min(cells.size(), start + per_range);
      std::int64_t dups = 0;
      for (std::size_t i = start; i < end; ++i) dups += cells[i]->copy > 1;
      const double share = static_cast<double>(dups) / static_cast<double>(end - start);
      const std::string fill =
          dups == 0 ? "#9fb3d1" : fmt::format("hsl(0,75%,{:.0f}%)", 70 - 35 * share);
      fmt::format_to(
          out,
          "<rect class=\"range{}\" data-tip=\"\" data-partition=\"{}\" data-first=\"{}\" "
          "data-last=\"{}\" data-records=\"{}\" data-dups=\"{}\" x=\"{}\" y=\"{}\" "
          "width=\"{}\" height=\"{}\" fill=\"{}\"{}/>\n",
          dups ? " dup" : "", partition, cells[start]->record.offset, cells[end - 1]->record.offset,
          end - start, dups, kRowLabel + r * kRangeW, y, kRangeW - 1, kRowH, fill,
          dups ? " stroke=\"#b71c1c\"" : "");
    }
    y += kRowH + 8;
    fmt::format_to(out, "</g>\n");
  }
  fmt::format_to(out, "</svg></div>\n");
}

// One row per cause: how many copies it explains, and the first few of them. Each copy is
// linked to its cell when the strip has one cell per record.
void RenderDuplicateCauses(Out out, const ReportModel& model, const RenderOptions& options,
                           bool cells_have_ids) {
  struct Group {
    const DuplicateCause* cause = nullptr;
    std::int64_t copies = 0;
    std::vector<const ReportCell*> examples;
  };
  std::vector<Group> groups;
  std::map<std::string, std::size_t> group_of;  // CauseId -> index, in order of first copy
  for (const ReportCell& cell : model.cells) {
    if (cell.copy < 2) continue;
    const auto [it, inserted] = group_of.emplace(CauseId(cell.cause), groups.size());
    if (inserted) groups.push_back({&cell.cause, 0, {}});
    Group& g = groups[it->second];
    ++g.copies;
    if (static_cast<std::int64_t>(g.examples.size()) < options.max_listed_duplicates)
      g.examples.push_back(&cell);
  }
  if (groups.empty()) return;
  fmt::format_to(out,
                 "<h2>Duplicates and their cause</h2><table id=\"duplicates\"><tr><th>cause</th>"
                 "<th>copies</th><th>records (copy k of n)</th></tr>\n");
  for (const Group& g : groups) {
    const std::string cause = EscapeHtml(CauseText(*g.cause, model));
    fmt::format_to(out,
                   "<tr class=\"duplicate-cause\" data-cause=\"{}\" data-copies=\"{}\"><td>{}</td>"
                   "<td class=\"n\">{}</td><td class=\"ids\">",
                   CauseId(*g.cause), g.copies,
                   g.cause->kind == DuplicateCause::Kind::kKill
                       ? fmt::format("<a href=\"#kill-{}\">{}</a>", g.cause->process, cause)
                       : cause,
                   g.copies);
    for (std::size_t i = 0; i < g.examples.size(); ++i) {
      const ReportCell& c = *g.examples[i];
      const std::string where = fmt::format("p{}:{}", c.record.partition, c.record.offset);
      fmt::format_to(out, "{}{} {} ({} of {})", i ? ", " : "",
                     cells_have_ids ? fmt::format("<a href=\"#rec-{}-{}\">{}</a>",
                                                  c.record.partition, c.record.offset, where)
                                    : where,
                     EscapeHtml(c.record.event_id), c.copy, c.copies);
    }
    if (g.copies > static_cast<std::int64_t>(g.examples.size()))
      fmt::format_to(out, " and {} more", g.copies - static_cast<std::int64_t>(g.examples.size()));
    fmt::format_to(out, "</td></tr>\n");
  }
  fmt::format_to(out, "</table>\n");
}

void RenderKafka(Out out, const ReportModel& model, const RenderOptions& options) {
  const bool detailed =
      static_cast<std::int64_t>(model.cells.size()) <= options.max_detailed_records;
  fmt::format_to(out,
                 "<section id=\"kafka-section\"><h2>Kafka log: topic {}, {} records</h2>\n<p "
                 "class=\"legend\">{}</p>\n",
                 EscapeHtml(model.topic), model.cells.size(),
                 detailed ? "One cell per record, by partition and offset, coloured by event id. "
                            "Outlined in red: a copy after the first (click it to see the crash "
                            "that caused it); a dot marks the first copy of a duplicated id."
                          : "Aggregated into offset ranges; red: ranges holding copies after the "
                            "first (darker: more).");
  if (model.cells.empty())
    fmt::format_to(out, "<p id=\"kafka-empty\">The topic is empty.</p>\n");
  else if (detailed)
    RenderDetailedKafka(out, model);
  else
    RenderBinnedKafka(out, model, options);
  RenderDuplicateCauses(out, model, options, detailed && !model.cells.empty());
  fmt::format_to(out, "</section>\n");
}

// --- per-aggregate order -------------------------------------------------------------------------

void RenderOrder(Out out, const ReportModel& model, const RenderOptions& options) {
  const auto& pairs = model.check.order_pairs;
  fmt::format_to(out, "<section id=\"order\" data-count=\"{}\"><h2>Per-aggregate order</h2>\n",
                 pairs.size());
  if (pairs.empty()) {
    fmt::format_to(out,
                   "<p>No order violations: per partition, every aggregate's events were first "
                   "seen in outbox id order.</p></section>\n");
    return;
  }
  const auto card = [&](const char* role, const TopicRecord& r, std::int64_t outbox_id) {
    fmt::format_to(out,
                   "<div class=\"{}\"><b>{}</b><br>partition {} offset {}<br>event {}<br>outbox id "
                   "{}</div>",
                   role, role, r.partition, r.offset, EscapeHtml(r.event_id), outbox_id);
  };
  std::int64_t shown = 0;
  for (const OrderViolation& v : pairs) {
    if (shown++ == options.max_listed_ids) break;
    fmt::format_to(
        out,
        "<div class=\"violation\" data-aggregate=\"{}\"><div>aggregate {}</div><div class=\"cmp\">",
        EscapeHtml(v.aggregate_id), EscapeHtml(v.aggregate_id));
    card("first", v.first, v.first_outbox_id);
    fmt::format_to(out, "<div class=\"arrow\">then</div>");
    card("second", v.second, v.second_outbox_id);
    fmt::format_to(out, "</div></div>\n");
  }
  if (static_cast<std::int64_t>(pairs.size()) > options.max_listed_ids)
    fmt::format_to(out, "<p class=\"legend\">and {} more</p>\n",
                   static_cast<std::int64_t>(pairs.size()) - options.max_listed_ids);
  fmt::format_to(out, "</section>\n");
}

}  // namespace

std::string RenderReportHtml(const ReportModel& model, const RenderOptions& options) {
  std::string html;
  html.reserve(64 * 1024);
  Out out(html);
  const EventIndex index(model);
  fmt::format_to(out,
                 "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                 "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
                 "style-src 'unsafe-inline'; script-src 'unsafe-inline'\">\n"
                 "<title>{}</title>\n",
                 EscapeHtml(model.title.empty() ? std::string("outbox-lab report") : model.title));
  RenderStyle(out);
  fmt::format_to(out,
                 "</head><body data-valid=\"{}\">\n<h1>{}</h1>\n<p class=\"meta\">database {} · "
                 "topic {} · generated {} · {} history records{}</p>\n<div class=\"row\">\n",
                 model.check.valid() ? "true" : "false",
                 EscapeHtml(model.title.empty() ? std::string("outbox-lab report") : model.title),
                 EscapeHtml(model.db_path), EscapeHtml(model.topic), UtcTime(model.generated_ms),
                 model.history_records,
                 model.malformed_lines
                     ? fmt::format(" ({} malformed lines skipped)", model.malformed_lines)
                     : std::string());
  RenderVerdict(out, model, options);
  RenderReconciliation(out, model, options);
  fmt::format_to(out, "</div>\n");
  RenderTimeline(out, model, options, index);
  RenderKafka(out, model, options);
  RenderOrder(out, model, options);
  fmt::format_to(out, "<div id=\"details\" hidden></div>\n");
  RenderScript(out);
  fmt::format_to(out, "</body></html>\n");
  return html;
}

}  // namespace outbox::lab
