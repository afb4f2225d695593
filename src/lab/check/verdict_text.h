// Verdict text: the lines that say what verify's and check's numbers mean in
// the chapter's terms (intent, sent, marked, re-sent, at-least-once, orphan),
// in English or in the chapter's own Chinese (chapter 7.1: 账目 / 数值 /
// 业务表行数 / 发送意图 / 补发 / 至少一次). Pure functions of the numbers:
// no I/O, no state.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "lab/check/checker.h"
#include "lab/check/reconciliation.h"

namespace outbox::lab {

enum class Lang { kEn, kZh };

// "en" or "zh". Throws ConfigError for anything else.
Lang ParseLang(const std::string& text);

// Id lists in text output: at most this many ids, then a count.
inline constexpr std::size_t kIdsShown = 10;

// ids escaped (EscapeBytes) and joined with ", "; unless all, only the first
// kIdsShown, then ", ... and N more (--ids prints all)". Empty for no ids.
std::string ShortIdList(const std::vector<std::string>& ids, bool all);

// One sentence for the end of verify: what db and kafka (null: verify
// --no-kafka) mean at this stage of the chapter's experiment. Examples (en):
//   after write-hold   "5 intents are durable, not sent yet; the relay will send them"
//   after publish-hold "3 records are in Kafka but not marked; they will be sent
//                       again (at-least-once); 2 more intents are durable, not sent yet"
//   at the end         "8 records = 3 sent but not marked before a crash + 5 sent and
//                       marked; the 3 duplicates are expected (at-least-once)"
//   after naive-hold   "a loan committed without an outbox row: its event is lost for good"
// The worst thing present wins: an orphan loan, then lost, phantom, unsent or
// unmarked rows, unjudgeable (broker retention), then the final counts.
// aborted_visible: the topic was read with isolation.level=read_uncommitted (verify
// --isolation), so the records of aborted transactions count too: duplicates name them as a
// cause (docs/exactly-once.md).
std::string ExplainReconciliation(const DbSnapshot& db, const KafkaReconciliation* kafka,
                                  Lang lang, bool aborted_visible = false);

// The chapter's final table (最终对账): a header line and six rows, each
// ending in '\n', the value column aligned by display width (a CJK character
// takes two columns). The duplicated ids row lists the first kIdsShown and how many more
// (every one with all_ids: verify --ids).
std::string ReconciliationTable(const DbSnapshot& db, const KafkaReconciliation& kafka, Lang lang,
                                bool all_ids = false);

// "(expected: at-least-once)" / "（预期之内：至少一次）": what a duplicate is.
const char* DuplicateNote(Lang lang);

// check's last line, without the "[check] " prefix: "valid", "INVALID",
// "not drained yet: run the relay, then check" (with what to do about parked
// rows), or "cannot judge N events (broker retention): ..."; in Chinese with
// Lang::kZh.
std::string CheckVerdictLine(const CheckResult& result, Lang lang);

// Display width of UTF-8 text in a terminal: 2 per East Asian wide character
// (CJK, Hangul, fullwidth forms), 1 per other code point.
std::size_t DisplayWidth(const std::string& text);

}  // namespace outbox::lab
