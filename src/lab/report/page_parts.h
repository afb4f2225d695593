// Internal to the report's page (page.cc, timeline.cc, kafka_strip.cc): what the page's
// sections share, and the two large sections each in its own file. Not for other callers.
// Thread-safety: plain functions over values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <unordered_map>

#include "lab/report/model.h"
#include "lab/report/page.h"

namespace outbox::lab::report_page {

using Out = std::back_insert_iterator<std::string>;

// epoch_ms as "YYYY-MM-DD HH:MM:SS.mmm UTC".
std::string UtcTime(std::int64_t epoch_ms);

// ms as "N ms", "N.NN s" or "N.N min".
std::string Duration(std::int64_t ms);

// bytes made valid UTF-8, cut to at most max_chars code points ("…" when cut), HTML-escaped.
std::string EscapeShort(std::string_view bytes, std::size_t max_chars);

// Joins in the renderer: outbox id and topic positions of an event id.
struct EventIndex {
  std::unordered_map<std::string, std::int64_t> outbox_id;
  std::unordered_map<std::string, std::string> positions;  // "p0:0 p0:3"

  explicit EventIndex(const ReportModel& model);
};

// The timeline section (timeline.cc): one lane per process.
void RenderTimeline(Out out, const ReportModel& model, const RenderOptions& options,
                    const EventIndex& index);

// The Kafka log section (kafka_strip.cc): the topic's records and the causes of duplicates.
void RenderKafka(Out out, const ReportModel& model, const RenderOptions& options);

}  // namespace outbox::lab::report_page
