// OpenStore: the one place that turns a --db value into an outbox store, SQLite or PostgreSQL,
// so that a service embedding the library chooses the backend as the lab and the CLI do. A file
// path is an SQLite file (Store, outbox/store.h); a postgresql:// or postgres:// URL is a
// PostgreSQL server (PgStore, outbox/pg_store.h). The caller owns the store returned; a store
// owns one connection and is used by one thread at a time (outbox/outbox_store.h).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "outbox/outbox_store.h"
#include "outbox/pg_store.h"
#include "outbox/store.h"

namespace outbox {

namespace pg {
class Connection;
}  // namespace pg

// The backend db names, read from its text alone (nothing is opened): kPostgres for a URL
// starting "postgresql://" or "postgres://" (libpq's connection URI,
// https://www.postgresql.org/docs/15/libpq-connect.html#LIBPQ-CONNSTRING), kSqlite for anything
// else without a scheme: a file path, relative or absolute.
// Throws ConfigError "open database 'D': unknown scheme 'S://' ..." (password redacted) when db
// starts with another URL scheme (letters, digits, '+', '-' or '.' before "://", such as
// "mysql://h/db" or "sqlite://x.db"): read as a path it would name a folder "S:" to create.
Backend StoreBackend(std::string_view db);

// Opens the outbox db names (StoreBackend):
// - a file path: Store(db, options, mode); every OpenMode applies (outbox/store.h).
// - a PostgreSQL URL: first a look for the outbox table (to_regclass, the URL's search_path),
//   then PgStore(db, options.clock, pg_mode), which connects and, when another table of the
//   outbox schema is missing, creates it. kExisting and kReadOnly open alike (the commands
//   that pass kReadOnly only read); the rest of options is SQLite's and is not used.
// pg_mode: how PgStore::ClaimBatch finds rows (outbox/pg_store.h); not used for a file.
// Returns the store, owned by the caller; backend() says which it is.
// Throws:
// - ConfigError when StoreBackend does, and for mode kCreate with a PostgreSQL URL (create the
//   tables with PgStore::ResetSchema; the lab's `reset` does);
// - for a file, what Store's constructor throws: SchemaMissingError when the file or its outbox
//   table does not exist (kExisting, kReadOnly), DbError with the SQLite code otherwise
//   (SQLITE_CANTOPEN, SQLITE_NOTADB, SQLITE_READONLY, SQLITE_BUSY, ...);
// - for a URL, SchemaMissingError when no outbox table is on the search_path (nothing created);
//   pg::PgError as PgStore's constructor throws it: a malformed URL (libpq's parse
//   error, before any connection), an unreachable server or a refused login, a missing
//   database (sqlstate "3D000"), the schema lock not granted in time ("55P03").
// For a PostgreSQL URL, before anything is created there: the first schema of connection's
// search_path must hold a table (or partitioned table) named outbox. Throws SchemaMissingError
// naming the schema when no schema of the search_path exists, when it holds no outbox, when
// outbox is a view or another kind of relation, or when the outbox found is further down the
// search_path (the lab's tables would be created beside a new, empty outbox in the first
// schema); pg::PgError when the server cannot answer.
void RequirePostgresOutbox(pg::Connection& connection);

std::unique_ptr<OutboxStore> OpenStore(const std::string& db, OpenMode mode = OpenMode::kExisting,
                                       const StoreOptions& options = {},
                                       PgClaimMode pg_mode = PgClaimMode::kScan);

}  // namespace outbox
