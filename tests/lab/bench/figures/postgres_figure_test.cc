// bench on PostgreSQL (issue 12 item 7): the relay pair and the write path measured on a real
// server, in schemas of the bench's own that are gone afterwards. Needs a server in OUTBOX_PG_URL
// (scripts/postgres.sh start; scripts/test.sh exports it): without it these tests FAIL and say
// how to start one. The broker is an in-process mock cluster.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <string>

#include "lab/bench/bench_support.h"
#include "lab/broker/embedded_broker.h"
#include "outbox/pg/connection.h"
#include "pg_test_support.h"

namespace {

using namespace outbox;

std::int64_t BenchSchemasOfThisProcess(pg::Connection& admin) {
  return admin.QueryInt("SELECT COUNT(*) FROM pg_namespace WHERE nspname LIKE $1",
                        {pg::Param::Text("outbox_bench_" + std::to_string(getpid()) + "_%")},
                        "count the bench schemas");
}

}  // namespace

TEST_CASE("Bench on PostgreSQL measures the relay pair and the write path and drops its schemas", "[postgres][bench]") {
  lab::EmbeddedBroker broker;
  broker.CreateTopic("bench-pg", 1);
  SystemClock clock;
  lab::BenchmarkOptions options;
  options.postgres_url = testing::PgServerUrl();
  options.store.clock = &clock;
  options.chapter_events = 5;
  options.events = 50;
  options.batch_size = 20;
  options.write_txns = 20;
  options.write_rounds = 2;
  lab::ThroughputFigure raw;
  raw.events = 1000;
  raw.seconds = 0.1;
  raw.events_per_s = 10000;

  const lab::PostgresFigures figures =
      lab::bench::MeasurePostgres(options, broker.BootstrapServers(), "bench-pg", raw);
  CHECK(figures.chapter.events == 5);
  CHECK(figures.relay.events == 50);
  CHECK(figures.chapter.events_per_s > 0);
  CHECK(figures.relay.events_per_s > 0);
  CHECK(figures.relay_over_chapter == Approx(figures.relay.events_per_s / figures.chapter.events_per_s));
  CHECK(figures.relay_over_raw == Approx(figures.relay.events_per_s / 10000));
  CHECK(figures.write.txns == 20);
  CHECK(figures.write.business_only_tps.size() == 2);
  CHECK(figures.write.with_outbox_tps.size() == 2);
  // The ratio is the median of the per-slice ratios of both rounds (10 slices of 2 txns each).
  CHECK(figures.write.ratio_spread.rounds == 2 * lab::bench::kSlices);
  CHECK(figures.write.ratio == figures.write.ratio_spread.median);
  CHECK(figures.write.ratio_spread.min > 0);
  CHECK(figures.write.ratio_spread.min <= figures.write.ratio);
  CHECK(figures.write.ratio <= figures.write.ratio_spread.max);
  REQUIRE_FALSE(figures.server_version.empty());
  CHECK(std::isdigit(static_cast<unsigned char>(figures.server_version[0])));  // "15.18 (Debian ...)"
  CHECK_FALSE(figures.synchronous_commit.empty());
  CHECK(figures.server.find("postgresql://") == 0);

  pg::Connection admin(testing::PgServerUrl());
  CHECK(BenchSchemasOfThisProcess(admin) == 0);
}

TEST_CASE("Bench refuses a PostgreSQL URL with options of its own before any work", "[postgres][bench]") {
  const std::string url = testing::PgServerUrl();
  const std::string with_options =
      url + (url.find('?') == std::string::npos ? "?" : "&") + "options=-csynchronous_commit%3Doff";
  CHECK_THROWS_WITH(lab::bench::RequirePostgresBenchUrl(with_options),
                    Catch::Contains("the URL has options= of its own"));
  CHECK_NOTHROW(lab::bench::RequirePostgresBenchUrl(url));
  CHECK_THROWS_AS(lab::bench::RequirePostgresBenchUrl("postgresql://outbox@127.0.0.1:1/outbox_lab"),
                  pg::PgError);
}
