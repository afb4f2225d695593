// PgStore: connecting, reconnecting after a lost connection, and the read transaction.
#include "outbox/pg_store.h"

#include <exception>
#include <string>

#include "internal.h"

namespace outbox {

using namespace pg_store;  // this folder's shared helpers (internal.h)

PgStore::PgStore(const std::string& url, Clock* clock, PgClaimMode mode)
    : url_(url), clock_(clock ? clock : &system_clock_), mode_(mode), connection_(url) {
  Migrate();
}

void PgStore::Reconnect() { connection_ = pg::Connection(url_); }

bool PgStore::ConnectionLost(const std::exception& e) const noexcept {
  const auto* pg_error = dynamic_cast<const pg::PgError*>(&e);
  return pg_error != nullptr && pg_error->connection_lost();
}

pg::Transaction PgStore::BeginRead() {
  return pg::Transaction(connection_, pg::Isolation::kRepeatableRead);
}

}  // namespace outbox
