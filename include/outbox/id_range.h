// The outbox ids a keyset read covers. Outbox ids are any 64-bit integer: the outbox assigns
// 1, 2, ... itself, but a foreign writer's explicit INSERT may give 0, a negative id or either end
// of the range (SQLite's INTEGER PRIMARY KEY and PostgreSQL's BIGINT take them all), and no row
// may stall a command. So no id can stand for "no cursor": a keyset cursor is a
// std::optional<std::int64_t> (PageRequest::after_id, ClaimRequest::after_id), empty at the start
// of a pass, and the stores turn it and an upper bound into the inclusive range of SQL's
// `id >= first AND id <= last`. Plain values, constexpr.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>

namespace outbox {

inline constexpr std::int64_t kLowestId = std::numeric_limits<std::int64_t>::min();
inline constexpr std::int64_t kHighestId = std::numeric_limits<std::int64_t>::max();

// Ids first..last, both included; no id when first > last.
struct IdRange {
  std::int64_t first = kLowestId;
  std::int64_t last = kHighestId;
};

// The ids above after_id (every id when it is empty: the start of a pass) and at or below
// up_to_id. Nothing lies above kHighestId: after_id kHighestId gives an empty range (first >
// last), never an overflow.
constexpr IdRange IdsAfter(std::optional<std::int64_t> after_id, std::int64_t up_to_id) {
  if (!after_id) return {kLowestId, up_to_id};
  if (*after_id == kHighestId) return {kHighestId, kLowestId};
  return {*after_id + 1, up_to_id};
}

}  // namespace outbox
