// The report's timeline: one lane per process of the histories, one glyph per operation
// (detailed) or time bins (aggregated), kills and hold points drawn where they happened.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "lab/report/html_text.h"
#include "lab/report/page_parts.h"

namespace outbox::lab::report_page {

namespace {

constexpr int kLabelWidth = 170;
constexpr int kTrackHeight = 20;
constexpr int kLanePadding = 14;
constexpr int kAxisHeight = 34;

std::string LaneTitle(const ReportLane& lane) {
  return lane.name.empty() ? fmt::format("pid {}", lane.process) : lane.name;
}

std::string LaneEnd(const ReportLane& lane) {
  if (lane.never_finished) return "killed (never finished)";
  if (lane.failed) return "ended with an error";
  return lane.name.empty() ? "finished" : "exited";
}

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


}  // namespace

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

}  // namespace outbox::lab::report_page
