// PgStore: the business transaction's side of the outbox: enqueue and the next id.
#include "outbox/pg_store.h"

#include <fmt/format.h>

#include <string>

#include "outbox/error.h"

#include "internal.h"

namespace outbox {

using namespace pg_store;  // this folder's shared helpers (internal.h)

std::int64_t PgStore::Enqueue(pg::Transaction& txn, const OutboxEvent& event) {
  if (event.aggregate_id.empty()) throw ConfigError(EmptyAggregateMessage(event.event_id));
  if (const std::string delay_error = DelayErrorMessage(event); !delay_error.empty())
    throw ConfigError(delay_error);
  const pg::Param created_at =
      event.created_at_ms == 0 ? pg::Param::Null() : pg::Param::Int(event.created_at_ms);
  const pg::Param not_before =
      event.not_before_ms ? pg::Param::Int(*event.not_before_ms) : pg::Param::Null();
  // Stored as given: the relay checks it when it sends the row (record_headers.h).
  const pg::Param headers =
      event.headers.empty() ? pg::Param::Null() : pg::Param::Text(event.headers);
  // A delay is added to the server's clock, the one the relay compares not_before with.
  return txn.connection().QueryInt(
      // The notify rides in the insert's statement (one round trip): the FROM runs it once.
      "INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at, not_before, "
      "headers) "
      "SELECT $1::text, $2::text, $3::text, $4::bytea, COALESCE($5::bigint, "
      "(extract(epoch FROM clock_timestamp()) * 1000)::bigint), COALESCE($6::bigint, "
      "CASE WHEN $7::bigint > 0 THEN (extract(epoch FROM clock_timestamp()) * 1000)::bigint "
      "+ $7::bigint END), $8::text "
      "FROM (SELECT pg_notify($9, '')) wake RETURNING id",
      {pg::Param::Text(event.event_id), pg::Param::Text(event.aggregate_id),
       pg::Param::Text(event.event_type), pg::Param::Bytes(event.payload), created_at,
       not_before, pg::Param::Int(event.delay_ms), headers, pg::Param::Text(wake_channel_)},
      fmt::format("enqueue event '{}'", event.event_id));
}

std::int64_t PgStore::NextId() {
  // last_value is the last id handed out once is_called; before the first nextval it is the first.
  return connection_.QueryInt(
      "SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM outbox_id_seq", {},
      "read the next outbox id");
}

}  // namespace outbox
