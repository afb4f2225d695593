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

void RequirePostgresOutbox(pg::Connection& connection) {
  // As SQLite's kExisting: looked at before PgStore's constructor would create the tables, so a
  // command pointed at the wrong schema says so instead of reporting an empty, healthy outbox.
  const pg::Result found = connection.Query(
      "SELECT current_schema(), c.relkind::text, n.nspname, current_setting('search_path') "
      "FROM (SELECT to_regclass('outbox') AS oid) r LEFT JOIN pg_class c ON c.oid = r.oid "
      "LEFT JOIN pg_namespace n ON n.oid = c.relnamespace",
      {}, "look for the outbox table");
  const std::string where = fmt::format("open database '{}'", connection.display_url());
  const std::string path = found.Text(0, 3);
  if (found.IsNull(0, 0))
    throw SchemaMissingError(fmt::format(
        "{}: no schema of the search_path ({}) exists; create one, or name an existing one "
        "(options=-csearch_path%3DNAME in the URL)",
        where, path));
  const std::string schema = found.Text(0, 0);
  if (found.IsNull(0, 1))
    throw SchemaMissingError(fmt::format(
        "{}: no outbox table in schema {} (another schema is named with "
        "options=-csearch_path%3DNAME in the URL)",
        where, schema));
  const std::string kind = found.Text(0, 1);
  if (kind != "r" && kind != "p")
    throw SchemaMissingError(fmt::format(
        "{}: outbox in schema {} is not a table (pg_class.relkind '{}': a view, a sequence, ...); "
        "the relay needs the table the writers insert into",
        where, found.Text(0, 2), kind));
  // The lab's other tables go to the first schema of the search_path, beside the outbox: an
  // outbox further down the path would be shadowed by a new, empty one there.
  if (found.Text(0, 2) != schema)
    throw SchemaMissingError(fmt::format(
        "{}: the outbox table on the search_path ({}) is in schema {}, but the lab's tables go "
        "to {}, its first schema; put {} first (options=-csearch_path%3D{} in the URL)",
        where, path, found.Text(0, 2), schema, found.Text(0, 2), found.Text(0, 2)));
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
    pg::Connection probe(db);
    RequirePostgresOutbox(probe);
  }
  return std::make_unique<PgStore>(db, options.clock, pg_mode);
}

}  // namespace outbox
