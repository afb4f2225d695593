// The application's record headers on a real PostgreSQL server: the headers column from enqueue to
// the claim (its heads walk and its scan), the leader's page and the naive fetch; the relay
// forwarding a traceparent unchanged and parking a foreign writer's bad value, in both
// coordination modes; purge --archive keeping the column; a database created before the column.
// Each test works in its own schema (pg_test_support.h); without OUTBOX_PG_URL they FAIL and say
// how to start one.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "outbox/pg/connection.h"
#include "outbox/pg_store.h"
#include "outbox/record_headers.h"
#include "outbox/relay.h"
#include "pg_test_support.h"
#include "test_support.h"

using namespace outbox;

namespace {

constexpr const char* kTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

std::string TraceHeaders() {
  return std::string(R"({"traceparent":")") + kTraceparent + R"(","tenant":"acme"})";
}

OutboxEvent Event(const std::string& id, const std::string& aggregate, std::string headers = "") {
  OutboxEvent event{id, aggregate, "LoanCreated", "{\"id\":\"" + id + "\"}", 0};
  event.headers = std::move(headers);
  return event;
}

std::int64_t EnqueueOne(PgStore& store, const OutboxEvent& event) {
  auto txn = store.BeginWrite();
  const std::int64_t id = store.Enqueue(txn, event);
  txn.Commit();
  return id;
}

ClaimRequest Request(bool block_key) {
  ClaimRequest request;
  request.owner = "relay-headers";
  request.limit = 100;
  request.lease_ms = 30000;
  request.block_key = block_key;
  return request;
}

// The headers each row carries, by id order.
std::vector<std::string> HeadersOf(const std::vector<OutboxRow>& rows) {
  std::vector<std::string> headers;
  for (const OutboxRow& row : rows) headers.push_back(row.event.headers);
  return headers;
}

// A message's headers as name=value, in their order.
std::vector<std::string> Pairs(const std::vector<RecordHeader>& headers) {
  std::vector<std::string> pairs;
  for (const RecordHeader& header : headers) pairs.push_back(header.name + "=" + header.value);
  return pairs;
}

// Text of column of table's row id, "NULL" for SQL NULL.
std::string Column(const testing::PgSchema& schema, const std::string& table,
                   const std::string& column, std::int64_t id) {
  pg::Connection raw(schema.url());
  const pg::Result rows = raw.Query("SELECT " + column + " FROM " + table + " WHERE id = $1",
                                    {pg::Param::Int(id)}, "read a column");
  REQUIRE(rows.rows() == 1);
  return rows.IsNull(0, 0) ? "NULL" : rows.Text(0, 0);
}

bool HasHeadersColumn(pg::Connection& raw, const std::string& table) {
  return raw.QueryInt("SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = "
                      "current_schema() AND table_name = $1 AND column_name = 'headers'",
                      {pg::Param::Text(table)}, "look for the column") == 1;
}

}  // namespace

TEST_CASE("PostgreSQL keeps a row's headers from enqueue to the claim the leader page and the "
          "naive fetch and stores none as NULL",
          "[postgres][headers]") {
  // Block key claims by the heads walk, skip by the id-order scan.
  const bool block_key = GENERATE(true, false);
  testing::PgSchema schema("hdr");
  PgStore store(schema.url());
  const std::int64_t traced = EnqueueOne(store, Event("evt-1", "L-1", TraceHeaders()));
  const std::int64_t plain = EnqueueOne(store, Event("evt-2", "L-2"));
  CHECK(Column(schema, "outbox", "headers", traced) == TraceHeaders());
  CHECK(Column(schema, "outbox", "headers", plain) == "NULL");

  PageRequest page;
  page.block_key = block_key;
  CHECK(HeadersOf(store.ReadPage(page)) == std::vector<std::string>{TraceHeaders(), ""});
  CHECK(HeadersOf(store.FetchUnpublished(0, 10)) == std::vector<std::string>{TraceHeaders(), ""});
  const Claim claim = store.ClaimBatch(Request(block_key));
  REQUIRE(claim.rows.size() == 2);
  CHECK(claim.rows[0].id == traced);
  CHECK(HeadersOf(claim.rows) == std::vector<std::string>{TraceHeaders(), ""});
}

TEST_CASE("PostgreSQL relays forward an application traceparent unchanged and park a foreign "
          "row's bad headers with the reason in both coordination modes",
          "[postgres][headers][relay]") {
  const auto coordination = GENERATE(Coordination::kClaims, Coordination::kLeader);
  testing::PgSchema schema("hdr");
  PgStore store(schema.url());
  const std::int64_t traced = EnqueueOne(store, Event("evt-1", "L-1", TraceHeaders()));
  const std::int64_t plain = EnqueueOne(store, Event("evt-2", "L-2"));
  // Foreign writers: invalid JSON, and a forged relay header.
  pg::Connection raw(schema.url());
  raw.Exec("INSERT INTO outbox(event_id, aggregate_id, event_type, payload, headers) VALUES "
           "('foreign-1', 'F-1', 'LoanCreated', '\\x7b7d', '{\"traceparent\":'), "
           "('foreign-2', 'F-2', 'LoanCreated', '\\x7b7d', '{\"event_id\":\"evt-forged\"}')",
           "insert foreign rows");
  testing::FakePublisher publisher;
  RelayOptions options;
  options.coordination = coordination;
  options.owner = "relay-headers";
  Relay relay(store, publisher, options);
  for (int i = 0; i < 5 && relay.RunBatch().claimed > 0; ++i) {
  }

  std::vector<std::int64_t> sent;
  for (const auto& call : publisher.calls)
    for (const OutboundMessage& m : call) {
      sent.push_back(m.outbox_id);
      if (m.outbox_id == traced)
        CHECK(Pairs(m.headers) == std::vector<std::string>{std::string("traceparent=") +
                                                                 kTraceparent,
                                                             "tenant=acme"});
      else
        CHECK(m.headers.empty());
    }
  CHECK(sent == std::vector<std::int64_t>{traced, plain});
  CHECK(store.Count().published == 2);
  CHECK(raw.QueryInt("SELECT COUNT(*) FROM outbox WHERE parked_at IS NOT NULL AND attempts = 1",
                     {}, "count parked rows") == 2);
  CHECK(raw.Query("SELECT last_error FROM outbox WHERE event_id = 'foreign-1'", {}, "read")
            .Text(0, 0) == "headers column: invalid JSON: it ends after 15 bytes");
  CHECK(raw.Query("SELECT last_error FROM outbox WHERE event_id = 'foreign-2'", {}, "read")
            .Text(0, 0) == "headers column: \"event_id\" is a header the relay sets itself");
  // The column is kept as the writer gave it, for the operator to fix and unpark.
  CHECK(raw.Query("SELECT headers FROM outbox WHERE event_id = 'foreign-1'", {}, "read")
            .Text(0, 0) == "{\"traceparent\":");
}

TEST_CASE("PostgreSQL purge with archive keeps a row's headers in outbox_archive",
          "[postgres][headers]") {
  testing::PgSchema schema("hdr");
  PgStore store(schema.url());
  const std::int64_t traced = EnqueueOne(store, Event("evt-1", "L-1", TraceHeaders()));
  const std::int64_t plain = EnqueueOne(store, Event("evt-2", "L-2"));
  const Claim claim = store.ClaimBatch(Request(true));
  store.SettleBatch(claim.token, {traced, plain}, {}, SettlePolicy{});
  {
    // Published a second ago: past the purge's cutoff whatever millisecond it reads.
    pg::Connection raw(schema.url());
    raw.Exec("UPDATE outbox SET published_at = published_at - 1000", "age the rows");
  }

  const PurgeReport report = store.PurgeOlderThan(0, 10, /*archive=*/true);

  CHECK(report.archived == 2);
  CHECK(Column(schema, "outbox_archive", "headers", traced) == TraceHeaders());
  CHECK(Column(schema, "outbox_archive", "headers", plain) == "NULL");
}

TEST_CASE("PostgreSQL outbox created before the headers column gains it on open in outbox and "
          "outbox_archive and its rows are sent with none",
          "[postgres][headers]") {
  testing::PgSchema schema("hdr");
  std::int64_t old_row = 0;
  {
    PgStore store(schema.url());
    old_row = EnqueueOne(store, Event("evt-1", "L-1"));
  }
  {
    pg::Connection raw(schema.url());
    raw.Exec("ALTER TABLE outbox DROP COLUMN headers; ALTER TABLE outbox_archive DROP COLUMN "
             "headers",
             "drop the columns");
    REQUIRE_FALSE(HasHeadersColumn(raw, "outbox"));
  }
  PgStore store(schema.url());
  pg::Connection raw(schema.url());
  CHECK(HasHeadersColumn(raw, "outbox"));
  CHECK(HasHeadersColumn(raw, "outbox_archive"));
  const std::int64_t new_row = EnqueueOne(store, Event("evt-2", "L-2", TraceHeaders()));
  const Claim claim = store.ClaimBatch(Request(true));
  REQUIRE(claim.rows.size() == 2);
  CHECK(claim.rows[0].id == old_row);
  CHECK(claim.rows[1].id == new_row);
  CHECK(HeadersOf(claim.rows) == std::vector<std::string>{"", TraceHeaders()});
}
