// Store: the business transaction's side of the outbox: begin, enqueue, bulk load, next id.
#include "outbox/store.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <string>

#include "outbox/error.h"

#include "internal.h"

namespace outbox {

using namespace sqlite_store;  // this folder's shared helpers (internal.h)

sqlite::Transaction Store::BeginWrite() { return sqlite::Transaction(connection_); }

sqlite::ReadTransaction Store::BeginRead() { return sqlite::ReadTransaction(connection_); }

std::int64_t Store::Enqueue(sqlite::Transaction& txn, const OutboxEvent& event) {
  if (&txn.connection() != &connection_)
    throw ConfigError(fmt::format("enqueue event '{}' into '{}': the transaction is not on this "
                                  "store's connection; begin it with Store::BeginWrite()",
                                  event.event_id, connection_.path()));
  if (event.aggregate_id.empty()) throw ConfigError(EmptyAggregateMessage(event.event_id));
  if (const std::string delay_error = DelayErrorMessage(event); !delay_error.empty())
    throw ConfigError(delay_error);
  // Kept on the connection (Connection::Reuse): preparing it compiles the outbox's three
  // triggers and four indexes into the statement, which cost more than the insert itself when
  // the commit's fsync is fast (issue 25: the write ratio).
  static const std::string sql =
      "INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at, headers, "
      "not_before) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)";
  auto kept = connection_.Reuse(sql);
  sqlite::Statement& insert = *kept;
  // Not copied: event outlives the lease, whose end resets the statement and clears them.
  insert.BindView(1, event.event_id)
      .BindView(2, event.aggregate_id)
      .BindView(3, event.event_type)
      .BindView(4, event.payload)
      .Bind(5, event.created_at_ms);
  if (event.headers.empty()) insert.BindNull(6); else insert.BindView(6, event.headers);
  // The store's clock is the one the relay compares not_before with (ClaimRequest::now_ms).
  if (event.not_before_ms) insert.Bind(7, *event.not_before_ms);
  else if (event.delay_ms > 0) insert.Bind(7, clock_->EpochMs() + event.delay_ms);
  else insert.BindNull(7);
  try {
    insert.Run();
  } catch (const DbError& e) {
    // AUTOINCREMENT never gives an id below one ever used (https://www.sqlite.org/autoinc.html):
    // once another program inserted id 2^63-1, every new row fails with SQLITE_FULL, which
    // would read as a full disk.
    if (e.primary_code() != SQLITE_FULL ||
        connection_.QueryInt64("SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = "
                               "'outbox'), 0)") != std::numeric_limits<std::int64_t>::max())
      throw;
    throw PhrasedDbError(
        fmt::format("enqueue event '{}' into '{}': the outbox's ids are used up: a row took id "
                    "9223372036854775807, and AUTOINCREMENT never gives a smaller one; delete "
                    "that row and lower sqlite_sequence's seq for 'outbox', or start a new file "
                    "with `reset` (SQLITE_FULL)",
                    event.event_id, connection_.path()),
        e.code(), e.reason());
  }
  return connection_.LastInsertRowid();
}

std::int64_t Store::BulkLoad(std::int64_t count,
                             const std::function<OutboxEvent(std::int64_t)>& make_event,
                             bool published) {
  sqlite::Transaction txn(connection_);
  auto insert = connection_.Prepare(
      "INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at, published, "
      "published_at, headers) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
  for (std::int64_t i = 0; i < count; ++i) {
    const OutboxEvent event = make_event(i);
    insert.Reset();
    insert.Bind(1, event.event_id)
        .Bind(2, event.aggregate_id)
        .Bind(3, event.event_type)
        .Bind(4, event.payload)
        .Bind(5, event.created_at_ms)
        .Bind(6, std::int64_t{published ? 1 : 0});
    if (published) insert.Bind(7, event.created_at_ms); else insert.BindNull(7);
    if (event.headers.empty()) insert.BindNull(8); else insert.Bind(8, event.headers);
    insert.Run();
  }
  txn.Commit();
  connection_.Exec("PRAGMA wal_checkpoint(TRUNCATE)");
  return std::max<std::int64_t>(count, 0);
}

std::int64_t Store::NextId() {
  return 1 + connection_.QueryInt64(
                 "SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'outbox'), 0)");
}
}  // namespace outbox
