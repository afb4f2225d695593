#include "lab/check/verdict_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <unordered_set>

#include "lab/broker/json_bytes.h"
#include "outbox/error.h"

namespace outbox::lab {
namespace {

std::string Count(std::int64_t n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

std::int64_t Size(const std::vector<std::string>& ids) { return static_cast<std::int64_t>(ids.size()); }

std::string Pad(const std::string& text, std::size_t width) {
  const std::size_t w = DisplayWidth(text);
  return text + std::string(w < width ? width - w : 1, ' ');
}

// The chapter's duplicate row: "evt-1001、evt-1002、evt-1003 各 2 次" when every
// id was seen equally often, else "evt-1001 2 次、evt-1002 3 次"; "无" for none.
std::string DuplicatesZh(const KafkaReconciliation& kafka, bool all_ids) {
  if (kafka.duplicates.empty()) return "无";
  bool same = true;
  for (const auto& [id, count] : kafka.duplicates) same = same && count == kafka.duplicates[0].second;
  std::string text;
  const std::size_t shown =
      all_ids ? kafka.duplicates.size() : std::min(kafka.duplicates.size(), kIdsShown);
  for (std::size_t i = 0; i < shown; ++i) {
    text += text.empty() ? "" : "、";
    text += EscapeBytes(kafka.duplicates[i].first);
    if (!same) text += fmt::format(" {} 次", kafka.duplicates[i].second);
  }
  if (same) text += fmt::format(" 各 {} 次", kafka.duplicates[0].second);
  if (shown < kafka.duplicates.size())
    text += fmt::format("，另有 {} 个（--ids 全部列出）", kafka.duplicates.size() - shown);
  return text;
}

std::string DuplicatesEn(const KafkaReconciliation& kafka, bool all_ids) {
  if (kafka.duplicates.empty()) return "none";
  std::string text;
  const std::size_t shown =
      all_ids ? kafka.duplicates.size() : std::min(kafka.duplicates.size(), kIdsShown);
  for (std::size_t i = 0; i < shown; ++i)
    text += fmt::format("{}{} x{}", text.empty() ? "" : ", ",
                        EscapeBytes(kafka.duplicates[i].first), kafka.duplicates[i].second);
  if (shown < kafka.duplicates.size())
    text += fmt::format(", ... and {} more (--ids prints all)", kafka.duplicates.size() - shown);
  return text;
}

}  // namespace

Lang ParseLang(const std::string& text) {
  if (text == "en") return Lang::kEn;
  if (text == "zh") return Lang::kZh;
  throw ConfigError(fmt::format("language '{}': expected en or zh", text));
}

std::string ShortIdList(const std::vector<std::string>& ids, bool all) {
  std::string text;
  const std::size_t shown = all ? ids.size() : std::min(ids.size(), kIdsShown);
  for (std::size_t i = 0; i < shown; ++i) text += (i ? ", " : "") + EscapeBytes(ids[i]);
  if (shown < ids.size())
    text += fmt::format(", ... and {} more (--ids prints all)", ids.size() - shown);
  return text;
}

const char* DuplicateNote(Lang lang) {
  return lang == Lang::kZh ? "（预期之内：至少一次）" : "(expected: at-least-once)";
}

std::string ExplainReconciliation(const DbSnapshot& db, const KafkaReconciliation* kafka,
                                  Lang lang, bool aborted_visible) {
  const bool zh = lang == Lang::kZh;
  const std::int64_t orphans = db.orphan_loans;
  if (orphans > 0) {
    if (zh)
      return fmt::format("有业务行、无事件：{} 笔借阅提交时没有 outbox 行，它的事件永远丢失", orphans);
    return orphans == 1 ? "a loan committed without an outbox row: its event is lost for good"
                        : fmt::format("{} loans committed without an outbox row: their events "
                                      "are lost for good",
                                      orphans);
  }
  if (kafka && !kafka->restart_unknown.empty()) {
    const std::int64_t n = Size(kafka->restart_unknown);
    if (zh && kafka->broker_restart.embedded)
      return fmt::format("无法判定 {} 个已发布事件：发布之后内嵌 broker 重启过（记录只在内存里）；"
                         "请从 reset 重新开始",
                         n);
    return fmt::format("cannot judge {} marked published and not in Kafka: {}",
                       Count(n, "event", "events"),
                       BrokerRestartReason(kafka->broker_restart));
  }
  if (kafka && !kafka->lost.empty()) {
    const std::int64_t n = Size(kafka->lost);
    if (zh) return fmt::format("{} 个事件已标记 published，却不在 Kafka：永久丢失", n);
    return fmt::format("{} marked published but not in Kafka: lost for good",
                       Count(n, "event is", "events are"));
  }
  if (kafka && kafka->lost_beyond_retention > 0) {
    if (zh)
      return fmt::format("至少 {} 个事件永久丢失：{} 个已发布事件不在 Kafka，而 broker 只删除了 {} 个 "
                         "offset",
                         kafka->lost_beyond_retention, Size(kafka->retention_unknown),
                         kafka->dropped_offsets);
    return fmt::format("at least {} lost for good: {} not in Kafka and the broker dropped "
                       "only {} (retention)",
                       Count(kafka->lost_beyond_retention, "event is", "events are"),
                       Count(Size(kafka->retention_unknown), "published event is",
                             "published events are"),
                       Count(kafka->dropped_offsets, "offset", "offsets"));
  }
  if (kafka && !kafka->unexpected.empty()) {
    const std::int64_t n = Size(kafka->unexpected);
    if (zh) return fmt::format("{} 条 Kafka 记录在 outbox 里没有对应行：下游收到库里不存在的事件", n);
    return fmt::format("{} in Kafka without an outbox row: phantom events the database never "
                       "committed",
                       Count(n, "record is", "records are"));
  }
  // Rows a live relay marked while the topic was read are not owed any more.
  if (db.outbox.unpublished > (kafka ? Size(kafka->marked_during_read) : 0)) {
    if (!kafka) {
      if (zh)
        return fmt::format("{} 条发送意图已落盘（未发布的 outbox 行）；relay 会补发",
                           db.outbox.unpublished);
      return fmt::format("{} durable (unpublished outbox rows); the relay will send them",
                         Count(db.outbox.unpublished, "intent is", "intents are"));
    }
    const std::int64_t sent = Size(kafka->sent_unmarked);
    const std::int64_t unsent = Size(kafka->unsent);
    const std::int64_t parked = Size(db.parked_event_ids);
    if (sent == 0 && parked > 0 && parked == unsent) {
      if (zh) return fmt::format("{} 条发送意图已落盘，尚未发送，且已停放；outbox-lab unpark 后 relay 才会补发", unsent);
      return fmt::format("{} durable, not sent yet, and parked: the relay sends {} only after "
                         "`outbox-lab unpark`",
                         Count(unsent, "intent is", "intents are"), unsent == 1 ? "it" : "them");
    }
    if (sent == 0) {
      if (zh) return fmt::format("{} 条发送意图已落盘，尚未发送；relay 会补发", unsent);
      return fmt::format("{} durable, not sent yet; the relay will send {}{}",
                         Count(unsent, "intent is", "intents are"), unsent == 1 ? "it" : "them",
                         parked > 0 ? fmt::format(" ({} parked: after `outbox-lab unpark`)", parked)
                                    : std::string());
    }
    // Their records: one each in the chapter; more when some were sent more than once already.
    std::int64_t sent_records = sent;
    {
      const std::unordered_set<std::string> unmarked(kafka->sent_unmarked.begin(),
                                                     kafka->sent_unmarked.end());
      for (const auto& [id, times] : kafka->duplicates)
        if (unmarked.count(id)) sent_records += times - 1;
    }
    std::string text;
    if (sent_records == sent)
      text = zh ? fmt::format("{} 条消息已到 broker，但还没标记 published；下次启动会再发一遍（至少一次）",
                              sent)
                : fmt::format("{} in Kafka but not marked; {} will be sent again (at-least-once)",
                              Count(sent, "record is", "records are"), sent == 1 ? "it" : "they");
    else
      text = zh ? fmt::format("{} 个事件已到 broker（{} 条记录），但还没标记 published；下次启动会再发一遍"
                              "（至少一次）",
                              sent, sent_records)
                : fmt::format("{} in Kafka ({} records) but not marked; {} will be sent again "
                              "(at-least-once)",
                              Count(sent, "event is", "events are"), sent_records,
                              sent == 1 ? "it" : "they");
    if (unsent > 0)
      text += zh ? fmt::format("；另有 {} 条意图已落盘、尚未发送", unsent)
                 : fmt::format("; {} more {} durable, not sent yet", unsent,
                               unsent == 1 ? "intent is" : "intents are");
    return text;
  }
  if (!kafka) {
    if (db.outbox.total == 0)
      return zh ? "库里还没有借阅，也没有事件" : "nothing written yet: no loans, no events";
    if (zh)
      return fmt::format("outbox {} 行，全部已发布；连上 broker 再 verify 才能看到 Kafka 记录",
                         db.outbox.total);
    return fmt::format("{}, all published; verify with a broker to see the records",
                       Count(db.outbox.total, "outbox row", "outbox rows"));
  }
  if (!kafka->retention_unknown.empty()) {
    const std::int64_t n = Size(kafka->retention_unknown);
    if (zh)
      return fmt::format("broker 按保留策略删除了 {} 个 offset：{} 个已发布事件无法判定是否到达",
                         kafka->dropped_offsets, n);
    return fmt::format("the broker dropped {} (retention): {} cannot be judged",
                       Count(kafka->dropped_offsets, "offset", "offsets"),
                       Count(n, "published event", "published events"));
  }
  if (db.outbox.total == 0 && kafka->records == 0)
    return zh ? "库里还没有借阅，也没有事件" : "nothing written yet: no loans, no events";
  const std::int64_t extra = kafka->records - kafka->distinct_event_ids;
  if (extra > 0) {
    if (zh)
      return fmt::format("{} 条记录 = 重复发送的 {} 条（标记前崩溃、第二个 relay 或生产者重试{}）+ 发送并标记的 {} 条；"
                         "{} 条重复在预期之内（至少一次）",
                         kafka->records, extra,
                         aborted_visible ? "，或 read_uncommitted 读到的已中止事务的记录" : "",
                         kafka->distinct_event_ids, extra);
    return fmt::format("{} = {} sent again (a crash before the mark, a second relay{} producer "
                       "retry{}) + {} sent and marked; the {} "
                       "{} expected (at-least-once)",
                       Count(kafka->records, "record", "records"), extra,
                       aborted_visible ? ", a" : " or a",
                       aborted_visible ? ", or an aborted transaction's records, which "
                                         "read_uncommitted shows"
                                       : "",
                       kafka->distinct_event_ids, Count(extra, "duplicate", "duplicates"),
                       extra == 1 ? "is" : "are");
  }
  if (zh)
    return fmt::format("{} 条记录 = {} 个事件，各一次：没有丢失，没有重复", kafka->records,
                       kafka->distinct_event_ids);
  return fmt::format("{} = {}, each once: nothing lost, nothing duplicated",
                     Count(kafka->records, "record", "records"),
                     Count(kafka->distinct_event_ids, "event", "events"));
}

std::string ReconciliationTable(const DbSnapshot& db, const KafkaReconciliation& kafka, Lang lang,
                                bool all_ids) {
  struct Row {
    std::string name;
    std::string value;
  };
  const bool zh = lang == Lang::kZh;
  const std::vector<Row> rows = {
      {zh ? "账目" : "reconciliation", zh ? "数值" : "value"},
      {zh ? "业务表行数" : "business rows", std::to_string(db.business_loans)},
      {zh ? "outbox 行数" : "outbox rows", std::to_string(db.outbox.total)},
      {"published=TRUE", std::to_string(db.outbox.published)},
      {zh ? "Kafka 记录数" : "Kafka records", std::to_string(kafka.records)},
      {zh ? "Kafka 不同事件 ID 数" : "Kafka distinct event ids",
       std::to_string(kafka.distinct_event_ids)},
      {zh ? "重复的 ID" : "duplicated ids", zh ? DuplicatesZh(kafka, all_ids) : DuplicatesEn(kafka, all_ids)},
  };
  constexpr std::size_t kNameColumn = 27;  // "Kafka distinct event ids" + 3
  std::string text;
  for (const Row& row : rows) text += Pad(row.name, kNameColumn) + row.value + "\n";
  return text;
}

std::string CheckVerdictLine(const CheckResult& r, Lang lang) {
  const bool zh = lang == Lang::kZh;
  switch (r.verdict()) {
    case Verdict::kValid: return zh ? "有效：每个已提交的事件都在 Kafka，没有丢失" : "valid";
    case Verdict::kInvalid: return zh ? "无效（INVALID）" : "INVALID";
    case Verdict::kNotDrained: {
      std::string text = zh ? fmt::format("尚未发完：{} 条 outbox 行还没发布；先运行 relay，再 check",
                                          r.stuck.size() + r.published_during_read.size())
                            : "not drained yet: run the relay, then check";
      if (!r.parked.empty())
        text += zh ? fmt::format("（其中 {} 条已停放，先 outbox-lab unpark --all）", r.parked.size())
                   : fmt::format(" ({} parked: `outbox-lab unpark --all` first)",
                                 Count(Size(r.parked), "row is", "rows are"));
      return text;
    }
    case Verdict::kCannotJudge:
      if (!r.restart_unknown.empty()) {
        if (zh && r.broker_restart.embedded)
          return fmt::format("无法判定 {} 个已发布事件：发布之后内嵌 broker 重启过（记录只在内存里）；"
                             "请从 reset 重新开始",
                             r.restart_unknown.size());
        return fmt::format("cannot judge {}: {}",
                           Count(Size(r.restart_unknown), "published event", "published events"),
                           BrokerRestartReason(r.broker_restart));
      }
      if (zh)
        return fmt::format("无法判定（broker 保留策略）：broker 删除了 {} 个 offset，{} 个已发布事件"
                           "可能就在其中",
                           r.dropped_offsets, r.retention_unknown.size());
      return fmt::format("cannot judge {} (broker retention): the broker dropped {}; they may "
                         "have been among them, so they are not counted as lost",
                         Count(Size(r.retention_unknown), "published event", "published events"),
                         Count(r.dropped_offsets, "offset", "offsets"));
  }
  return "INVALID";
}

std::size_t DisplayWidth(const std::string& text) {
  std::size_t width = 0;
  for (std::size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    std::uint32_t cp = byte;
    std::size_t length = 1;
    if (byte >= 0xF0) length = 4, cp = byte & 0x07;
    else if (byte >= 0xE0) length = 3, cp = byte & 0x0F;
    else if (byte >= 0xC0) length = 2, cp = byte & 0x1F;
    for (std::size_t k = 1; k < length && i + k < text.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    i += length;
    const bool wide = (cp >= 0x1100 && cp <= 0x115F) || (cp >= 0x2E80 && cp <= 0xA4CF) ||
                      (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xF900 && cp <= 0xFAFF) ||
                      (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF60) ||
                      (cp >= 0xFFE0 && cp <= 0xFFE6) || (cp >= 0x20000 && cp <= 0x3FFFD);
    width += wide ? 2 : 1;
  }
  return width;
}

}  // namespace outbox::lab
