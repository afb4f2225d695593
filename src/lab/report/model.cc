#include "lab/report/model.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace outbox::lab {

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
                             const std::string& broker_incarnation,
                             const std::vector<PartitionExtent>& partitions,
                             const std::unordered_set<std::string>* published_before_read) {
  ReportModel model;
  model.generated_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  model.check = CheckRun(store, records, has_history ? &ops : nullptr, partitions,
                         broker_incarnation, nullptr, nullptr, published_before_read);
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

}  // namespace outbox::lab
