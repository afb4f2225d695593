// The idempotent consumer's dedupe table and its pruning (issue 9 §7):
// `consume --dedupe --retain D` deletes processed_event rows older than D in
// bounded transactions, and a redelivery inside D is still skipped.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "lab/broker/embedded_broker.h"  // rdkafka.h, then rdkafka_mock.h
#include "lab/chapter/idempotent_consumer.h"
#include "lab/faults/lab_failpoints.h"
#include "outbox/clock.h"
#include "outbox/error.h"
#include "outbox/failpoint.h"
#include "outbox/kafka/handles.h"
#include "relay_test_support.h"
#include "test_support.h"

using outbox::lab::ApplyOnce;
using outbox::lab::OpenEffectsDatabase;
using outbox::lab::PruneProcessedEvents;

namespace {

constexpr std::int64_t kStartMs = 1'764'460'800'000;  // 2025-11-30, epoch ms
constexpr std::int64_t kRetainMs = 60'000;

std::int64_t Processed(outbox::sqlite::Connection& effects) {
  return effects.QueryInt64("SELECT COUNT(*) FROM processed_event");
}

}  // namespace

TEST_CASE("A redelivery inside the retention window is skipped and one after it is applied again",
          "[consumer]") {
  outbox::testing::TempDir dir;
  outbox::ManualClock clock(kStartMs);
  auto effects = OpenEffectsDatabase(dir.File("effects.db"));

  REQUIRE(ApplyOnce(effects, "evt-1001", "L-1001", clock.EpochMs()));
  clock.AdvanceMs(kRetainMs - 1);
  // The prune a consumer runs with --retain 60s, one ms before the row is due.
  const auto inside = PruneProcessedEvents(effects, clock.EpochMs() - kRetainMs, 1000);
  CHECK(inside.pruned == 0);
  CHECK_FALSE(ApplyOnce(effects, "evt-1001", "L-1001", clock.EpochMs()));  // skipped
  CHECK(effects.QueryInt64("SELECT COUNT(*) FROM loan_effect") == 1);

  // The rule's reason: past the window the row is gone and the same event is applied twice.
  clock.AdvanceMs(2);
  const auto after = PruneProcessedEvents(effects, clock.EpochMs() - kRetainMs, 1000);
  CHECK(after.pruned == 1);
  CHECK(ApplyOnce(effects, "evt-1001", "L-1001", clock.EpochMs()));
  CHECK(effects.QueryInt64("SELECT COUNT(*) FROM loan_effect") == 2);
}

TEST_CASE("Pruning deletes at most the batch size per transaction and keeps rows inside the window",
          "[consumer]") {
  outbox::testing::TempDir dir;
  outbox::testing::FailpointReset reset;
  outbox::lab::RegisterLabFailpoints();
  outbox::ManualClock clock(kStartMs);
  auto effects = OpenEffectsDatabase(dir.File("effects.db"));
  for (int i = 1; i <= 5; ++i) {
    REQUIRE(ApplyOnce(effects, "old-" + std::to_string(i), "L-1", clock.EpochMs()));
    clock.AdvanceMs(1);
  }
  clock.AdvanceMs(kRetainMs);
  REQUIRE(ApplyOnce(effects, "fresh", "L-2", clock.EpochMs()));
  const std::int64_t cutoff = clock.EpochMs() - kRetainMs;

  // The second batch fails before its commit: only the first batch's 2 rows are gone, so no
  // transaction deleted more than 2.
  outbox::ConfigureFailpoints("consume.mid_prune=1*off->error");
  CHECK(outbox::testing::CaptureThrow<outbox::FailpointError>(
            [&] { PruneProcessedEvents(effects, cutoff, 2); })
            .has_value());
  CHECK(Processed(effects) == 4);
  CHECK(effects.QueryInt64("SELECT COUNT(*) FROM processed_event WHERE event_id IN "
                           "('old-1', 'old-2')") == 0);

  outbox::ConfigureFailpoints("");
  const auto report = PruneProcessedEvents(effects, cutoff, 2);
  CHECK(report.pruned == 3);
  CHECK(report.batches == 2);  // 2 + 1 rows
  CHECK(Processed(effects) == 1);
  CHECK_FALSE(ApplyOnce(effects, "fresh", "L-2", clock.EpochMs()));
  CHECK(outbox::testing::CaptureThrow<outbox::ConfigError>(
            [&] { PruneProcessedEvents(effects, cutoff, 0); })
            .has_value());
}

TEST_CASE("A record without an event id is applied every time and never taken for a duplicate",
          "[consumer]") {
  outbox::testing::TempDir dir;
  auto effects = OpenEffectsDatabase(dir.File("effects.db"));
  CHECK(ApplyOnce(effects, "", "L-1", kStartMs));
  CHECK(ApplyOnce(effects, "", "L-2", kStartMs));
  CHECK(effects.QueryInt64("SELECT COUNT(*) FROM loan_effect") == 2);
  CHECK(Processed(effects) == 0);  // no dedupe row for a missing id
  CHECK(ApplyOnce(effects, "evt-1", "L-1", kStartMs));
  CHECK_FALSE(ApplyOnce(effects, "evt-1", "L-1", kStartMs));
}

TEST_CASE("consume dedupe applies foreign records without an event id and counts them apart",
          "[consumer][kafka]") {
  outbox::lab::EmbeddedBroker broker;
  broker.CreateTopic("loan-events", 1);
  {
    auto producer = outbox::kafka::MakeClient(
        RD_KAFKA_PRODUCER,
        outbox::kafka::MakeConf({{"bootstrap.servers", broker.BootstrapServers()}}));
    // Two foreign records: no headers, no key, no eventId; then one of ours, twice.
    const std::string foreign = R"({"loanId":"L-9"})";
    const std::string ours = R"({"eventId":"evt-7","loanId":"L-7"})";
    for (const std::string* value : {&foreign, &foreign, &ours, &ours})
      REQUIRE(rd_kafka_producev(producer.get(), RD_KAFKA_V_TOPIC("loan-events"),
                                RD_KAFKA_V_VALUE(const_cast<char*>(value->data()), value->size()),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR_NO_ERROR);
    REQUIRE(rd_kafka_flush(producer.get(), 10000) == RD_KAFKA_RESP_ERR_NO_ERROR);
  }
  outbox::testing::TempDir dir;
  outbox::lab::IdempotentConsumerOptions options;
  options.brokers = broker.BootstrapServers();
  options.topic = "loan-events";
  options.group = "g";
  options.effects_db = dir.File("effects.db");
  std::vector<std::string> ids;
  const outbox::lab::ConsumeReport report = outbox::lab::ConsumeIdempotently(
      options, [&](const outbox::lab::ConsumedRecord& r) {
        ids.push_back(r.event_id + (r.applied ? " applied" : " skipped"));
      });
  CHECK(ids == std::vector<std::string>{" applied", " applied", "evt-7 applied", "evt-7 skipped"});
  CHECK(report.read == 4);
  CHECK(report.applied == 3);
  CHECK(report.skipped == 1);
  CHECK(report.without_event_id == 2);
  CHECK(report.effects_total == 3);
}
