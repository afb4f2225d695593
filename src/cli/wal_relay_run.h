// relay --source wal: the command that runs the log-based relay (outbox/wal_relay.h) with the
// relay's command line, its lines and its exit codes.
#pragma once

#include "cli/command.h"
#include "cli/relay_options.h"

namespace outbox::cli {

// Runs the WAL relay on global.db (a postgresql:// URL) until a stop signal, or one batch
// (--once), or until it has confirmed everything committed when it started (--until-empty).
// Reconnects with backoff (--backoff-base doubling to --backoff-max) when the server or its
// walsender goes away. http: --http was given (refused: the WAL relay has no endpoint yet).
// Returns kOk. Throws CommandError kWalRefused (SQLite --db, wal_level, slot lost, a row
// undeliverable), kSlotActive (another WAL relay streams the slot), kUsage (an option of the
// polling relay that does not apply), and what the store, publisher and server throw.
ExitCode RunWalRelay(const GlobalOptions& global, const RelayCliOptions& options, bool http);

}  // namespace outbox::cli

#include "outbox/wal_progress.h"

namespace outbox::cli {

// One line on stdout about the WAL relay's slot, for verify and status (tag: "verify"):
//   [verify] wal: slot S inactive, confirmed LSN X, lag N bytes, P inserts pending: ...
//   [verify] wal: slot S is active (walsender PID n): ...; published counts the flag only
//   [verify] wal: slot S is lost (wal_status lost): ...
void PrintWalProgress(const char* tag, const WalProgress& wal);

}  // namespace outbox::cli
