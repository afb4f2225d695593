#include "cli/pending_rows.h"

#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace outbox::cli {

PendingRows ReadPendingRows(OutboxStore& store, std::int64_t limit) {
  PendingRows result;
  auto event_ids = std::make_shared<std::map<std::int64_t, std::string>>();  // id -> event id
  for (OutboxRow& row : store.FetchUnpublished(std::nullopt, limit)) {
    result.created_at_ms.push_back(row.event.created_at_ms);
    event_ids->emplace(row.id, std::move(row.event.event_id));
  }
  const bool all_read = static_cast<std::int64_t>(event_ids->size()) < limit;
  result.test = [&store, event_ids, all_read](std::int64_t id, std::string_view event_id) {
    if (const auto row = event_ids->find(id); row != event_ids->end())
      return row->second == event_id;
    // Below the last row read, every unpublished id was read.
    if (all_read || event_ids->empty() || id < event_ids->rbegin()->first) return false;
    const std::vector<OutboxRow> next = store.FetchUnpublished(id - 1, 1);  // id > INT64_MIN here
    return !next.empty() && next.front().id == id && next.front().event.event_id == event_id;
  };
  return result;
}

}  // namespace outbox::cli
