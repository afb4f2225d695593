#include "outbox/open_store.h"

#include <fmt/format.h>

#include <cctype>

#include "outbox/error.h"
#include "outbox/pg/connection.h"

namespace outbox {

Backend StoreBackend(std::string_view db) {
  if (pg::IsPostgresUrl(db)) return Backend::kPostgres;
  // RFC 3986 scheme: a letter, then letters, digits, '+', '-' or '.'.
  const auto end = db.find("://");
  if (end != std::string_view::npos && end > 0 &&
      std::isalpha(static_cast<unsigned char>(db.front()))) {
    bool scheme = true;
    for (const char c : db.substr(0, end))
      scheme = scheme && (std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' ||
                          c == '.');
    if (scheme)
      throw ConfigError(fmt::format(
          "open database '{}': unknown scheme '{}://'; give an SQLite file path or a "
          "postgresql:// URL",
          pg::RedactPassword(db), db.substr(0, end)));
  }
  return Backend::kSqlite;
}

std::unique_ptr<OutboxStore> OpenStore(const std::string& db, OpenMode mode,
                                       const StoreOptions& options, PgClaimMode pg_mode) {
  if (StoreBackend(db) == Backend::kSqlite) return std::make_unique<Store>(db, options, mode);
  if (mode == OpenMode::kCreate)
    throw ConfigError(fmt::format("open database '{}': OpenMode::kCreate is for SQLite files; "
                                  "create the PostgreSQL tables with PgStore::ResetSchema "
                                  "(outbox-lab reset)",
                                  pg::RedactPassword(db)));
  return std::make_unique<PgStore>(db, options.clock, pg_mode);
}

}  // namespace outbox
