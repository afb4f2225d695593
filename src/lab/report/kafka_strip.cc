// The report's Kafka log: one cell per record by partition and offset (detailed) or offset
// ranges (aggregated), and the table of why each copy after the first reached the topic.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "lab/report/html_text.h"
#include "lab/report/page_parts.h"

namespace outbox::lab::report_page {

namespace {

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

// The topic's cells by partition, each partition's in the model's order (by offset).
std::map<std::int32_t, std::vector<const ReportCell*>> CellsByPartition(const ReportModel& model) {
  std::map<std::int32_t, std::vector<const ReportCell*>> by_partition;
  for (const ReportCell& cell : model.cells) by_partition[cell.record.partition].push_back(&cell);
  return by_partition;
}

// Opens the strip's scrolling <svg id="kafka">; mode is "detailed" or "binned".
void OpenKafkaSvg(Out out, std::string_view mode, int width, int height) {
  fmt::format_to(out,
                 "<div class=\"scroll\"><svg id=\"kafka\" data-mode=\"{2}\" width=\"{0}\" "
                 "height=\"{1}\" viewBox=\"0 0 {0} {1}\">\n",
                 width, height, mode);
}

// Opens one partition's <g class="partition"> with its label at label_y; attributes (each with its
// leading space) go after data-partition.
void OpenPartitionRow(Out out, std::int32_t partition, std::string_view attributes, int label_y) {
  fmt::format_to(out,
                 "<g class=\"partition\" data-partition=\"{0}\"{1}><text class=\"axis\" x=\"2\" "
                 "y=\"{2}\">p{0}</text>\n",
                 partition, attributes, label_y);
}

void RenderDetailedKafka(Out out, const ReportModel& model) {
  constexpr int kCellW = 74, kCellH = 40, kGap = 4, kPerRow = 14, kRowLabel = 36;
  const auto by_partition = CellsByPartition(model);
  int rows = 0;
  for (const auto& [p, cells] : by_partition)
    rows += static_cast<int>((cells.size() + kPerRow - 1) / kPerRow);
  const int width = kRowLabel + kPerRow * (kCellW + kGap);
  const int height = std::max(rows, 1) * (kCellH + 18) + 8 * static_cast<int>(by_partition.size());
  OpenKafkaSvg(out, "detailed", width, height);
  int y = 4;
  for (const auto& [partition, cells] : by_partition) {
    OpenPartitionRow(out, partition, "", y + 26);
    for (std::size_t i = 0; i < cells.size(); ++i) {
      const ReportCell& c = *cells[i];
      const int x = kRowLabel + static_cast<int>(i % kPerRow) * (kCellW + kGap);
      const int cy = y + static_cast<int>(i / kPerRow) * (kCellH + 18) + 12;
      const bool dup = c.copy > 1;
      const std::string event = EscapeHtml(c.record.event_id);
      std::string title = fmt::format("partition {} offset {}: {} (copy {} of {}{})", partition,
                                      c.record.offset, c.record.event_id, c.copy, c.copies,
                                      c.outbox_id ? fmt::format(", outbox id {}", *c.outbox_id)
                                                  : std::string(", no outbox row: phantom"));
      if (dup) title += "; cause: " + CauseText(c.cause, model);
      if (dup && c.cause.kind == DuplicateCause::Kind::kKill)
        fmt::format_to(out, "<a href=\"#kill-{}\">", c.cause.process);
      fmt::format_to(out,
                     "<g class=\"cell{}{}\" id=\"rec-{}-{}\" data-tip=\"\" data-partition=\"{}\" "
                     "data-offset=\"{}\" data-event=\"{}\" data-copy=\"{}\" data-copies=\"{}\"",
                     dup ? " dup" : "", c.copies > 1 && !dup ? " first-of-dup" : "", partition,
                     c.record.offset, partition, c.record.offset, event, c.copy, c.copies);
      if (c.outbox_id) fmt::format_to(out, " data-outbox-id=\"{}\"", *c.outbox_id);  // else phantom
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
  const auto by_partition = CellsByPartition(model);
  const int ranges = std::max(options.offset_ranges, 1);
  constexpr int kRangeW = 6, kRowH = 26, kRowLabel = 36;
  const int width = kRowLabel + ranges * kRangeW + 10;
  const int height = static_cast<int>(by_partition.size()) * (kRowH + 8) + 8;
  OpenKafkaSvg(out, "binned", width, height);
  int y = 4;
  for (const auto& [partition, cells] : by_partition) {
    OpenPartitionRow(out, partition, fmt::format(" data-records=\"{}\"", cells.size()), y + 17);
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


}  // namespace

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

}  // namespace outbox::lab::report_page
