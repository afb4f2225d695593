// The parked rows over HTTP (relay --http): the filter and paging of GET /parked, the request of
// POST /parked/unpark, and their JSON. Pure functions over rows the caller read
// (OutboxStore::ListTroubled); no I/O; any thread.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "outbox/store.h"

namespace outbox::ops {

// A request the endpoint refuses with 400; what() says what was wrong, for the client.
class BadRequest : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Which parked rows: every given field must match (none given: every parked row).
struct ParkedFilter {
  std::string aggregate;       // aggregate id, exact
  std::string event_type;      // event type, exact
  std::string error_contains;  // a substring of last_error (bytes, case-sensitive)
  std::optional<std::int64_t> min_age_ms;  // created at least this long ago, ms
  std::optional<std::int64_t> max_age_ms;  // created at most this long ago, ms
  bool empty() const;
};

// True when row is parked and passes filter.
bool Matches(const TroubledRow& row, const ParkedFilter& filter);

// GET /parked's page: rows with id > after_id that match, in id order, at most limit.
struct ParkedPageRequest {
  ParkedFilter filter;
  std::int64_t limit = 100;  // rows per page, 1..kMaxParkedPage
  // Empty: from the first row, 0 and negative ids included (a foreign writer's,
  // outbox/id_range.h).
  std::optional<std::int64_t> after_id;
};
inline constexpr std::int64_t kMaxParkedPage = 1000;
// POST /parked/unpark by filter: rows per request, at most.
inline constexpr std::int64_t kMaxUnparkRows = 10000;

// The query parameters of GET /parked: aggregate, event_type, error, min_age and max_age
// (durations: 30s, 5m, 2h), limit (1..1000, default 100), after_id (any 64-bit id: the
// next_after_id of the previous page). Throws BadRequest for an unknown or repeated parameter or
// a value out of range.
ParkedPageRequest ParseParkedQuery(const std::multimap<std::string, std::string>& params);

// The page's JSON: {"parked_total", "listed_total", "matched", "rows":[{id, event_id,
// aggregate_id, event_type, attempts, last_error, age_ms}], "next_after_id" (null on the last
// page), "truncated"}. parked: every parked row the caller read (any order); parked_total: all
// parked rows in the outbox (more than parked.size() when the read was capped: truncated).
nlohmann::ordered_json ParkedPageJson(const std::vector<TroubledRow>& parked,
                                      std::int64_t parked_total, const ParkedPageRequest& request);

// POST /parked/unpark's body: {"ids":[1,2]} or {"filter":{aggregate, event_type, error,
// min_age, max_age}, "max": N} (1 <= N <= kMaxUnparkRows; required with a filter, so no request
// unparks everything by accident). Throws BadRequest for malformed JSON, both or neither form,
// an id not a positive integer, more than kMaxUnparkRows ids, unknown fields.
struct UnparkRequest {
  std::vector<std::int64_t> ids;
  std::optional<ParkedFilter> filter;
  std::int64_t max = 0;
};
UnparkRequest ParseUnparkRequest(const std::string& body);

// The ids of the first max rows of parked (sorted by id) matching filter.
std::vector<std::int64_t> SelectForUnpark(std::vector<TroubledRow> parked,
                                          const ParkedFilter& filter, std::int64_t max);

}  // namespace outbox::ops
