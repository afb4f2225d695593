// The chapter's relay against a scripted fake publisher: send in id order,
// mark only after an ack, stop at the first failure.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "outbox/per_row_relay.h"
#include "outbox/error.h"
#include "outbox/sqlite/connection.h"
#include "outbox/store.h"
#include "test_support.h"

namespace {

using outbox::PerRowRelayOptions;
using outbox::PerRowRelayStep;
using outbox::OpenMode;
using outbox::Store;
using outbox::StoreOptions;
using outbox::testing::CaptureThrow;
using outbox::testing::FakePublisher;
using outbox::testing::MakeEvent;
using outbox::testing::TempDir;
using Ids = std::vector<std::int64_t>;

// A store in dir with MakeEvent(1..n) enqueued as rows 1..n.
class RelayFixture {
 public:
  explicit RelayFixture(int n, StoreOptions options = {})
      : store(dir.File("lab.db"), options, OpenMode::kCreate) {
    store.ResetSchema();
    for (int i = 1; i <= n; ++i) {
      auto txn = store.BeginWrite();
      store.Enqueue(txn, MakeEvent(i));
      txn.Commit();
    }
  }

  outbox::PerRowRelayReport Run(outbox::Publisher& publisher, std::int64_t limit, bool mark = true) {
    PerRowRelayOptions options;
    options.limit = limit;
    options.mark = mark;
    return outbox::RunPerRowRelay(store, publisher, options,
                                   [this](const PerRowRelayStep& step) { steps.push_back(step); });
  }

  Ids UnpublishedIds() {
    Ids ids;
    for (const auto& row : store.FetchUnpublished(std::nullopt, 1000)) ids.push_back(row.id);
    return ids;
  }

  TempDir dir;
  Store store;
  std::vector<PerRowRelayStep> steps;
};

std::vector<std::string> EventIds(int from, int to) {
  std::vector<std::string> ids;
  for (int i = from; i <= to; ++i) ids.push_back(MakeEvent(i).event_id);
  return ids;
}

}  // namespace

TEST_CASE("MessageForRow keys the record by event id and copies payload and type", "[relay]") {
  outbox::OutboxRow row;
  row.id = 42;
  row.event = MakeEvent(7);

  const auto message = outbox::MessageForRow(row);

  CHECK(message.outbox_id == 42);
  CHECK(message.key == row.event.event_id);
  CHECK(message.event_id == row.event.event_id);
  CHECK(message.payload == row.event.payload);
  CHECK(message.event_type == row.event.event_type);
}

TEST_CASE("Relay sends unpublished rows in id order keyed by event id and marks each after its ack",
          "[relay]") {
  RelayFixture fx(3);
  FakePublisher publisher;

  const auto report = fx.Run(publisher, 10);

  REQUIRE(report.sent == 3);
  REQUIRE(report.marked == 3);
  REQUIRE(report.failed == 0);
  // One row per send, as the chapter's send().get() loop does.
  REQUIRE(publisher.calls.size() == 3);
  for (std::size_t i = 0; i < publisher.calls.size(); ++i) {
    REQUIRE(publisher.calls[i].size() == 1);
    CHECK(publisher.calls[i][0].outbox_id == static_cast<std::int64_t>(i) + 1);
    CHECK(publisher.calls[i][0].payload == MakeEvent(static_cast<int>(i) + 1).payload);
  }
  REQUIRE(publisher.SentKeys() == EventIds(1, 3));

  REQUIRE(fx.steps.size() == 3);
  for (std::size_t i = 0; i < fx.steps.size(); ++i) {
    CHECK(fx.steps[i].row.id == static_cast<std::int64_t>(i) + 1);
    CHECK(fx.steps[i].delivery.ok);
    CHECK(fx.steps[i].delivery.offset == static_cast<std::int64_t>(i));
    CHECK(fx.steps[i].marked);
  }
  REQUIRE(fx.UnpublishedIds().empty());
  REQUIRE(fx.store.Count().published == 3);
}

TEST_CASE("Relay sends rows a foreign writer gave id 0 and negative ids first in id order",
          "[relay]") {
  RelayFixture f(2);
  constexpr std::int64_t kLowest = std::numeric_limits<std::int64_t>::min();
  {
    auto txn = f.store.BeginWrite();
    auto insert = txn.connection().Prepare(
        "INSERT INTO outbox(id, event_id, aggregate_id, event_type, payload) "
        "VALUES (?1, 'evt-foreign-' || ?1, 'L-foreign', 'LoanRenewed', '{}')");
    for (std::int64_t id : {std::int64_t{0}, std::int64_t{-2}, kLowest}) {
      insert.Reset();
      insert.Bind(1, id).Run();
    }
    txn.Commit();
  }
  FakePublisher publisher;

  const auto report = f.Run(publisher, 10);

  CHECK(report.sent == 5);
  CHECK(report.marked == 5);
  Ids sent;
  for (const auto& call : publisher.calls) sent.push_back(call.at(0).outbox_id);
  CHECK(sent == Ids{kLowest, -2, 0, 1, 2});
  CHECK(f.UnpublishedIds().empty());
  // Nothing lies past the highest id: an empty page, not an overflow.
  CHECK(f.store.FetchUnpublished(std::numeric_limits<std::int64_t>::max(), 10).empty());
}

TEST_CASE("Relay marks the row only after the publisher returned its ack", "[relay]") {
  RelayFixture fx(2);
  FakePublisher publisher;
  std::vector<Ids> unpublished_during_send;
  publisher.on_publish = [&](const std::vector<outbox::OutboundMessage>&) {
    unpublished_during_send.push_back(fx.UnpublishedIds());
  };

  fx.Run(publisher, 10);

  // While row 1 is in flight it is still unpublished; while row 2 is, row 1 is marked.
  REQUIRE(unpublished_during_send == std::vector<Ids>{{1, 2}, {2}});
  REQUIRE(fx.UnpublishedIds().empty());
}

TEST_CASE("Relay marks only acknowledged rows when one delivery fails", "[relay]") {
  const int rows = 5;
  const int failing_call = GENERATE(range(1, 6));  // every position of the failure
  INFO("delivery " << failing_call << " of " << rows << " fails");
  std::vector<bool> script(static_cast<std::size_t>(rows), true);
  script[static_cast<std::size_t>(failing_call - 1)] = false;
  RelayFixture fx(rows);
  FakePublisher publisher(script);

  const auto report = fx.Run(publisher, rows);

  const std::int64_t acked = failing_call - 1;
  REQUIRE(report.sent == acked);
  REQUIRE(report.marked == acked);
  REQUIRE(report.failed == 1);
  // Stops at the failed row: nothing after it is sent.
  REQUIRE(publisher.SentKeys() == EventIds(1, failing_call));

  Ids expected_unpublished;
  for (std::int64_t id = failing_call; id <= rows; ++id) expected_unpublished.push_back(id);
  REQUIRE(fx.UnpublishedIds() == expected_unpublished);
  REQUIRE(fx.store.Count().published == acked);

  REQUIRE(fx.steps.size() == static_cast<std::size_t>(failing_call));
  const auto& last = fx.steps.back();
  CHECK(last.row.id == failing_call);
  CHECK_FALSE(last.delivery.ok);
  CHECK(last.delivery.error == "fake: scripted delivery failure");
  CHECK_FALSE(last.marked);

  // The next run re-sends from the failed row on.
  FakePublisher retry;
  const auto second = fx.Run(retry, rows);
  REQUIRE(second.sent == rows - acked);
  REQUIRE(second.marked == rows - acked);
  REQUIRE(second.failed == 0);
  REQUIRE(retry.SentKeys() == EventIds(failing_call, rows));
  REQUIRE(fx.UnpublishedIds().empty());
}

TEST_CASE("Relay with marking disabled sends every row and marks none", "[relay]") {
  RelayFixture fx(3);
  FakePublisher publisher;

  const auto report = fx.Run(publisher, 10, /*mark=*/false);

  REQUIRE(report.sent == 3);
  REQUIRE(report.marked == 0);
  REQUIRE(report.failed == 0);
  REQUIRE(publisher.SentKeys() == EventIds(1, 3));
  REQUIRE(fx.steps.size() == 3);
  for (const auto& step : fx.steps) CHECK_FALSE(step.marked);
  REQUIRE(fx.UnpublishedIds() == Ids{1, 2, 3});
  REQUIRE(fx.store.Count().published == 0);

  // At-least-once: the next run sends the same rows again.
  const auto again = fx.Run(publisher, 10);
  REQUIRE(again.sent == 3);
  REQUIRE(again.marked == 3);
  REQUIRE(publisher.calls.size() == 6);
  REQUIRE(fx.UnpublishedIds().empty());
}

TEST_CASE("Relay sends at most limit rows and the next run continues after them", "[relay]") {
  RelayFixture fx(5);
  FakePublisher publisher;

  const auto first = fx.Run(publisher, 2);

  REQUIRE(first.sent == 2);
  REQUIRE(first.marked == 2);
  REQUIRE(publisher.SentKeys() == EventIds(1, 2));
  REQUIRE(fx.UnpublishedIds() == Ids{3, 4, 5});

  const auto second = fx.Run(publisher, 10);
  REQUIRE(second.sent == 3);
  REQUIRE(second.marked == 3);
  REQUIRE(publisher.SentKeys() == EventIds(1, 5));
  REQUIRE(fx.UnpublishedIds().empty());
}

TEST_CASE("Relay asked to stop after a row marks that row and sends no further one", "[relay]") {
  RelayFixture fx(5);
  FakePublisher publisher;
  PerRowRelayOptions options;
  options.limit = 10;

  // A stop request (SIGINT in publish) arrives while row 2 is in flight.
  const auto report = outbox::RunPerRowRelay(
      fx.store, publisher, options, [&fx](const PerRowRelayStep& step) { fx.steps.push_back(step); },
      [&publisher] { return publisher.calls.size() >= 2; });

  CHECK(report.stopped);
  CHECK(report.sent == 2);
  CHECK(report.marked == 2);
  CHECK(publisher.calls.size() == 2);
  REQUIRE(fx.steps.size() == 2);
  CHECK(fx.steps[1].marked);
  CHECK(fx.UnpublishedIds() == Ids{3, 4, 5});
}

TEST_CASE("Relay without a stop request runs to its limit and reports not stopped", "[relay]") {
  RelayFixture fx(2);
  FakePublisher publisher;
  const auto report = fx.Run(publisher, 10);
  CHECK_FALSE(report.stopped);
  CHECK(report.marked == 2);
}

TEST_CASE("Relay with no unpublished rows sends nothing", "[relay]") {
  RelayFixture fx(0);
  FakePublisher publisher;

  const auto report = fx.Run(publisher, 10);

  REQUIRE(report.sent == 0);
  REQUIRE(report.marked == 0);
  REQUIRE(report.failed == 0);
  REQUIRE(publisher.calls.empty());
  REQUIRE(fx.steps.empty());
}

TEST_CASE("Relay does not count a row that another relay marked while it was in flight",
          "[relay]") {
  RelayFixture fx(2);
  Store other(fx.dir.File("lab.db"), StoreOptions{}, OpenMode::kExisting);
  FakePublisher publisher;
  publisher.on_publish = [&](const std::vector<outbox::OutboundMessage>& messages) {
    if (messages.front().outbox_id == 1) REQUIRE(other.MarkPublished(1));
  };

  const auto report = fx.Run(publisher, 10);

  REQUIRE(report.sent == 2);
  REQUIRE(report.marked == 1);
  REQUIRE(fx.steps.size() == 2);
  CHECK_FALSE(fx.steps[0].marked);
  CHECK(fx.steps[1].marked);
  REQUIRE(fx.store.Count().published == 2);
}

TEST_CASE("Relay throws DbError and leaves the row unpublished when the mark cannot take the lock",
          "[relay]") {
  StoreOptions options;
  options.busy_timeout_ms = 50;
  RelayFixture fx(2, options);
  outbox::sqlite::Connection holder(fx.dir.File("lab.db"), SQLITE_OPEN_READWRITE);
  FakePublisher publisher;
  publisher.on_publish = [&](const std::vector<outbox::OutboundMessage>&) {
    holder.Exec("BEGIN IMMEDIATE");  // another writer grabs the lock between ack and mark
  };

  const auto error = CaptureThrow<outbox::DbError>([&] { fx.Run(publisher, 10); });
  holder.Exec("ROLLBACK");

  REQUIRE(error.has_value());
  REQUIRE(error->primary_code() == SQLITE_BUSY);
  REQUIRE(publisher.calls.size() == 1);
  REQUIRE(fx.steps.empty());  // the row never settled
  // Acked but unmarked: the next run sends it again (a duplicate, never a loss).
  REQUIRE(fx.UnpublishedIds() == Ids{1, 2});
  FakePublisher retry;
  const auto report = fx.Run(retry, 10);
  REQUIRE(report.marked == 2);
  REQUIRE(retry.SentKeys() == EventIds(1, 2));
}
