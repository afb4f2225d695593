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
  const pg::Param created_at =
      event.created_at_ms == 0 ? pg::Param::Null() : pg::Param::Int(event.created_at_ms);
  return txn.connection().QueryInt(
      // The notify rides in the insert's statement (one round trip): the FROM runs it once.
      "INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at) "
      "SELECT $1::text, $2::text, $3::text, $4::bytea, COALESCE($5::bigint, "
      "(extract(epoch FROM clock_timestamp()) * 1000)::bigint) "
      "FROM (SELECT pg_notify($6, '')) wake RETURNING id",
      {pg::Param::Text(event.event_id), pg::Param::Text(event.aggregate_id),
       pg::Param::Text(event.event_type), pg::Param::Bytes(event.payload), created_at,
       pg::Param::Text(wake_channel_)},
      fmt::format("enqueue event '{}'", event.event_id));
}

std::int64_t PgStore::NextId() {
  // last_value is the last id handed out once is_called; before the first nextval it is the first.
  return connection_.QueryInt(
      "SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM outbox_id_seq", {},
      "read the next outbox id");
}

}  // namespace outbox
