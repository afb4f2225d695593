#include "lab/report/page_parts.h"

#include <fmt/format.h>

#include <ctime>

#include "lab/report/html_text.h"

namespace outbox::lab::report_page {

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

}  // namespace

std::string EscapeShort(std::string_view bytes, std::size_t max_chars) {
  return EscapeHtml(Shorten(SanitizeUtf8(bytes), max_chars));
}

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

EventIndex::EventIndex(const ReportModel& model) {
  for (const OutboxEntry& entry : model.check.outbox) outbox_id.emplace(entry.event_id, entry.id);
  for (const ReportCell& cell : model.cells) {
    auto& text = positions[cell.record.event_id];
    if (text.size() < 200)
      text += fmt::format("{}p{}:{}", text.empty() ? "" : " ", cell.record.partition,
                          cell.record.offset);
  }
}

}  // namespace outbox::lab::report_page
