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
  ReadWakeChannel();
}

std::string PgStore::WakeChannel(const std::string& schema) {
  std::string channel = "outbox_" + schema;
  // A channel name must fit NAMEDATALEN - 1 bytes; cut whole UTF-8 characters only.
  if (channel.size() > 63) {
    std::size_t end = 63;
    while (end > 0 && (static_cast<unsigned char>(channel[end]) & 0xC0) == 0x80) --end;
    channel.resize(end);
  }
  return channel;
}

void PgStore::ReadWakeChannel() {
  // The schema the name outbox resolves to, as every statement of this store resolves it.
  const pg::Result schema = connection_.Query(
      "SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = 'outbox'::regclass", {},
      "read the outbox table's schema");
  std::string name = schema.rows() > 0 ? schema.Text(0, 0) : "public";
  // regnamespace quotes a name that needs it ("My Schema"): the channel takes the bare name.
  if (name.size() >= 2 && name.front() == '"' && name.back() == '"') name = name.substr(1, name.size() - 2);
  wake_channel_ = WakeChannel(name);
}

void PgStore::Reconnect() { connection_ = pg::Connection(url_); }  // same schema: same channel

void PgStore::ReopenIfClosedWhileIdle() {
  if (!connection_.ClosedWhileIdle()) return;
  Reconnect();
  ++sessions_reopened_;
}

bool PgStore::ConnectionLost(const std::exception& e) const noexcept {
  const auto* pg_error = dynamic_cast<const pg::PgError*>(&e);
  return pg_error != nullptr && pg_error->connection_lost();
}

pg::Transaction PgStore::BeginRead() {
  return pg::Transaction(connection_, pg::Isolation::kRepeatableRead);
}

}  // namespace outbox
