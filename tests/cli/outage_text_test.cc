// The words of a broker outage in relay, status and metrics (cli/outage_text.h).
#include <catch2/catch.hpp>

#include "cli/outage_text.h"

namespace {

using outbox::BrokerOutage;

// 2026-12-02T08:31:02Z and 250 ms.
constexpr std::int64_t kStartMs = 1796200262250;

}  // namespace

TEST_CASE("An outage names its UTC start and cause and the rows waiting", "[cli]") {
  const BrokerOutage outage{kStartMs, "all brokers down (_ALL_BROKERS_DOWN)", "relay-1",
                            kStartMs + 5000, kStartMs + 5400};
  CHECK(outbox::cli::UtcTime(kStartMs) == "2026-12-02T08:31:02Z");
  CHECK(outbox::cli::OutageText(outage, 900) ==
        "broker outage since 2026-12-02T08:31:02Z: all brokers down (_ALL_BROKERS_DOWN), 900 "
        "rows waiting");
  CHECK(outbox::cli::OutageText(outage, -1) ==
        "broker outage since 2026-12-02T08:31:02Z: all brokers down (_ALL_BROKERS_DOWN)");
  const auto json = outbox::cli::OutageJson(outage, 900);
  CHECK(json["since"] == "2026-12-02T08:31:02Z");
  CHECK(json["since_ms"] == kStartMs);
  CHECK(json["cause"] == "all brokers down (_ALL_BROKERS_DOWN)");
  CHECK(json["rows_waiting"] == 900);
  CHECK(outbox::cli::OutageJson(outage, -1)["rows_waiting"].is_null());
}
