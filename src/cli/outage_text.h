// A broker outage (outbox/broker_outage.h) in the words relay, status and metrics print.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "outbox/broker_outage.h"

namespace outbox::cli {

// "2026-12-02T08:31:02Z": epoch ms as UTC, to the second (ISO 8601).
std::string UtcTime(std::int64_t epoch_ms);

// "broker outage since 2026-12-02T08:31:02Z: all brokers down (_ALL_BROKERS_DOWN), 900 rows
// waiting"; without the rows when rows_waiting < 0 (not known).
std::string OutageText(const BrokerOutage& outage, std::int64_t rows_waiting);

// {"since_ms", "since", "cause", "owner", "noted_at_ms", "retry_at_ms", "rows_waiting"}: the
// outage as status --json and relay --json print it (rows_waiting null when < 0).
nlohmann::ordered_json OutageJson(const BrokerOutage& outage, std::int64_t rows_waiting);

}  // namespace outbox::cli
