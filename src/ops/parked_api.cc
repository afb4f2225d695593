#include "ops/parked_api.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <set>

#include "outbox/duration.h"
#include "outbox/parse_integer.h"

namespace outbox::ops {
namespace {

std::int64_t ParseAge(const std::string& name, const std::string& text) {
  const std::optional<std::int64_t> ms = ParseDurationMs(text);
  if (!ms)
    throw BadRequest(fmt::format("{} '{}': not a duration (a whole number and one of ms, s, m, "
                                 "h, d: 30s, 5m)",
                                 name, text));
  return *ms;
}

std::int64_t ParseCount(const std::string& name, const std::string& text, std::int64_t min,
                        std::int64_t max) {
  const std::optional<std::int64_t> n = ParseInteger(text);
  if (!n || *n < min || *n > max)
    throw BadRequest(fmt::format("{} '{}': not a whole number from {} to {}", name, text, min, max));
  return *n;
}

void CheckAges(const ParkedFilter& f) {
  if (f.min_age_ms && f.max_age_ms && *f.min_age_ms > *f.max_age_ms)
    throw BadRequest("min_age must not exceed max_age");
}

nlohmann::ordered_json RowJson(const TroubledRow& r) {
  return {{"id", r.id},           {"event_id", r.event_id}, {"aggregate_id", r.aggregate_id},
          {"event_type", r.event_type}, {"attempts", r.attempts}, {"last_error", r.last_error},
          {"age_ms", r.age_ms}};
}

// A filter object of the unpark body.
ParkedFilter FilterFromJson(const nlohmann::json& j) {
  if (!j.is_object()) throw BadRequest("filter: must be a JSON object");
  ParkedFilter f;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string())
      throw BadRequest(fmt::format("filter.{}: must be a string", key));
    const std::string text = value.get<std::string>();
    if (key == "aggregate") f.aggregate = text;
    else if (key == "event_type") f.event_type = text;
    else if (key == "error") f.error_contains = text;
    else if (key == "min_age") f.min_age_ms = ParseAge("filter.min_age", text);
    else if (key == "max_age") f.max_age_ms = ParseAge("filter.max_age", text);
    else
      throw BadRequest(fmt::format("filter.{}: unknown field (known: aggregate, event_type, "
                                   "error, min_age, max_age)",
                                   key));
  }
  CheckAges(f);
  return f;
}

}  // namespace

bool ParkedFilter::empty() const {
  return aggregate.empty() && event_type.empty() && error_contains.empty() && !min_age_ms &&
         !max_age_ms;
}

bool Matches(const TroubledRow& row, const ParkedFilter& f) {
  if (!row.parked) return false;
  if (!f.aggregate.empty() && row.aggregate_id != f.aggregate) return false;
  if (!f.event_type.empty() && row.event_type != f.event_type) return false;
  if (!f.error_contains.empty() && row.last_error.find(f.error_contains) == std::string::npos)
    return false;
  if (f.min_age_ms && row.age_ms < *f.min_age_ms) return false;
  if (f.max_age_ms && row.age_ms > *f.max_age_ms) return false;
  return true;
}

ParkedPageRequest ParseParkedQuery(const std::multimap<std::string, std::string>& params) {
  ParkedPageRequest r;
  for (const auto& [key, value] : params) {
    if (params.count(key) > 1) throw BadRequest(fmt::format("{}: given more than once", key));
    if (key == "aggregate") r.filter.aggregate = value;
    else if (key == "event_type") r.filter.event_type = value;
    else if (key == "error") r.filter.error_contains = value;
    else if (key == "min_age") r.filter.min_age_ms = ParseAge(key, value);
    else if (key == "max_age") r.filter.max_age_ms = ParseAge(key, value);
    else if (key == "limit") r.limit = ParseCount(key, value, 1, kMaxParkedPage);
    else if (key == "after_id")
      r.after_id = ParseCount(key, value, std::numeric_limits<std::int64_t>::min(),
                              std::numeric_limits<std::int64_t>::max());
    else
      throw BadRequest(fmt::format("{}: unknown parameter (known: aggregate, event_type, error, "
                                   "min_age, max_age, limit, after_id)",
                                   key));
  }
  CheckAges(r.filter);
  return r;
}

nlohmann::ordered_json ParkedPageJson(const std::vector<TroubledRow>& parked,
                                      std::int64_t parked_total, const ParkedPageRequest& request) {
  std::vector<const TroubledRow*> matched;
  for (const TroubledRow& row : parked)
    if (Matches(row, request.filter)) matched.push_back(&row);
  std::sort(matched.begin(), matched.end(),
            [](const TroubledRow* a, const TroubledRow* b) { return a->id < b->id; });
  nlohmann::ordered_json out;
  out["parked_total"] = parked_total;
  out["listed_total"] = static_cast<std::int64_t>(parked.size());
  out["matched"] = static_cast<std::int64_t>(matched.size());
  out["rows"] = nlohmann::ordered_json::array();
  std::int64_t last_id = 0;
  bool more = false;
  for (const TroubledRow* row : matched) {
    if (request.after_id && row->id <= *request.after_id) continue;
    if (static_cast<std::int64_t>(out["rows"].size()) == request.limit) {
      more = true;
      break;
    }
    out["rows"].push_back(RowJson(*row));
    last_id = row->id;
  }
  out["next_after_id"] = more ? nlohmann::ordered_json(last_id) : nlohmann::ordered_json(nullptr);
  out["truncated"] = parked_total > static_cast<std::int64_t>(parked.size());
  return out;
}

UnparkRequest ParseUnparkRequest(const std::string& body) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(body);
  } catch (const nlohmann::json::parse_error& e) {
    throw BadRequest(fmt::format("body is not JSON: {}", e.what()));
  }
  if (!j.is_object())
    throw BadRequest("body must be a JSON object: {\"ids\":[...]} or {\"filter\":{...},\"max\":N}");
  UnparkRequest r;
  bool has_ids = false;
  bool has_max = false;
  for (const auto& [key, value] : j.items()) {
    if (key == "ids") {
      has_ids = true;
      if (!value.is_array() || value.empty())
        throw BadRequest("ids: must be a non-empty array of row ids");
      if (value.size() > static_cast<std::size_t>(kMaxUnparkRows))
        throw BadRequest(fmt::format("ids: at most {} per request", kMaxUnparkRows));
      std::set<std::int64_t> seen;
      for (const auto& id : value) {
        // Any 64-bit id: another program may insert a row with id 0 or a negative id.
        if (!id.is_number_integer() ||
            (id.is_number_unsigned() &&
             id.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)))
          throw BadRequest(fmt::format("ids: {} is not a 64-bit whole number", id.dump()));
        if (seen.insert(id.get<std::int64_t>()).second) r.ids.push_back(id.get<std::int64_t>());
      }
    } else if (key == "filter") {
      r.filter = FilterFromJson(value);
    } else if (key == "max") {
      has_max = true;
      if (!value.is_number_integer() || value.get<std::int64_t>() < 1 ||
          value.get<std::int64_t>() > kMaxUnparkRows)
        throw BadRequest(fmt::format("max: must be a whole number from 1 to {}", kMaxUnparkRows));
      r.max = value.get<std::int64_t>();
    } else {
      throw BadRequest(fmt::format("{}: unknown field (known: ids, filter, max)", key));
    }
  }
  if (has_ids == r.filter.has_value())
    throw BadRequest("give either ids or a filter (with max), not both or neither");
  if (has_ids && has_max) throw BadRequest("max goes with a filter, not with ids");
  if (r.filter && !has_max)
    throw BadRequest("a filter needs max: the most rows to unpark (so none unparks everything "
                     "by accident)");
  return r;
}

std::vector<std::int64_t> SelectForUnpark(std::vector<TroubledRow> parked,
                                          const ParkedFilter& filter, std::int64_t max) {
  std::sort(parked.begin(), parked.end(),
            [](const TroubledRow& a, const TroubledRow& b) { return a.id < b.id; });
  std::vector<std::int64_t> ids;
  for (const TroubledRow& row : parked) {
    if (static_cast<std::int64_t>(ids.size()) >= max) break;
    if (Matches(row, filter)) ids.push_back(row.id);
  }
  return ids;
}

}  // namespace outbox::ops
