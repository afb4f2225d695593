#include "lab/report/page.h"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "lab/report/html_text.h"
#include "lab/report/page_parts.h"

namespace outbox::lab {

namespace {

using report_page::EventIndex;
using report_page::Out;
using report_page::RenderKafka;
using report_page::RenderTimeline;
using report_page::UtcTime;

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
  // Shown only when there are some: neither lost nor ok (check's cannot-judge).
  if (!r.retention_unknown.empty())
    row("retention-unknown", "cannot judge (the broker dropped records: retention)",
        size(r.retention_unknown), kWarn, IdList(r.retention_unknown, max));
  if (r.lost_beyond_retention > 0)
    row("lost-beyond-retention", "lost (at least: more missing than the broker dropped)",
        r.lost_beyond_retention, kBad, "");
  if (!r.restart_unknown.empty())
    row("restart-unknown", "cannot judge (the broker restarted since)", size(r.restart_unknown),
        kWarn, IdList(r.restart_unknown, max));
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
