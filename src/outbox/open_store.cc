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
  {
    // As SQLite's kExisting: look before PgStore's constructor would create the tables, so a
    // relay or status pointed at the wrong schema (search_path) says so instead of reporting an
    // empty, healthy outbox there.
    pg::Connection probe(db);
    if (probe.QueryInt("SELECT (to_regclass('outbox') IS NOT NULL)::int", {},
                       "look for the outbox table") != 1)
      throw SchemaMissingError(fmt::format(
          "open database '{}': no outbox table in schema {} (another schema is named with "
          "options=-csearch_path%3DNAME in the URL)",
          probe.display_url(),
          probe.Query("SELECT COALESCE(current_schema(), '(none)')", {}, "read the schema")
              .Text(0, 0)));
  }
  return std::make_unique<PgStore>(db, options.clock, pg_mode);
}

}  // namespace outbox
