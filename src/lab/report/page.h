// The report's page: one self-contained HTML page of a run (issue 11), drawn from a
// ReportModel (lab/report/model.h) and nothing else.
//
// The page is inline SVG + CSS + a little plain JavaScript (hover and click
// show an element's details). It references nothing outside itself, and its
// Content-Security-Policy forbids any network request, so it opens from disk
// in any browser. Every string from the database, the topic or a history is
// untrusted bytes: it is made valid UTF-8 (invalid sequences become U+FFFD)
// and HTML-escaped before it reaches the page.
//
// Elements the browser test asserts on (stable ids, classes and data-):
//   #timeline .lane[data-process][data-name]       one lane per process
//   .lane .op[data-f][data-outcome][data-value]    one operation (detailed mode)
//   .lane .kill#kill-PID[data-process]             a process that never finished
//   .lane .hold[data-value]                        a hold point it recorded
//   #kafka .partition[data-partition] .cell[data-offset][data-event]
//   .cell.dup[data-cause]                          a copy after the first of an event id
//   #kafka .range[data-first][data-last]           an offset range (binned mode)
//   #reconciliation tr[data-key], #counts tr[data-key][data-count], #verdict[data-valid]
//   #order .violation                              one order violation, both records
// Thread-safety: plain functions over values.
#pragma once

#include <cstdint>
#include <string>

#include "lab/report/model.h"

namespace outbox::lab {

struct RenderOptions {
  // Above these, the page aggregates: time bins instead of one glyph per
  // operation, offset ranges instead of one cell per record.
  std::int64_t max_detailed_ops = 800;       // operations over all lanes
  std::int64_t max_detailed_records = 1000;  // records over all partitions
  int time_bins = 160;                       // bins across the timeline
  int offset_ranges = 160;                   // ranges per partition
  std::int64_t max_listed_ids = 50;          // ids listed per count; "and N more" after
  std::int64_t max_listed_duplicates = 10;   // duplicated ids listed (allowed, so kept short)
};

// The page, as UTF-8 text. Pure: reads only model and options.
std::string RenderReportHtml(const ReportModel& model, const RenderOptions& options = {});

}  // namespace outbox::lab
