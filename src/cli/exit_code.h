// Exit codes of outbox-lab, chosen in main.cc only. Documented in docs/exit-codes.md (in short in
// README.md; scripts/check-help-docs.py checks both tables against this enum).
#pragma once

namespace outbox::cli {

enum class ExitCode : int {
  kOk = 0,
  kExpectationFailed = 1,  // verify --expect differs, rollback left a business row
  kUsage = 2,              // bad command line: unknown option, a number or duration out of range
  kConfig = 3,             // invalid configuration: unknown -X property, bad failpoint spec, no broker
  kDbUnavailable = 4,      // database or its directory cannot be opened or created
  kDbNotSqlite = 5,        // the file is not an SQLite database, or is corrupt
  kSchemaMissing = 6,      // no such database or no lab schema: run reset first
  kDbBusy = 7,             // another process holds the database lock past the busy timeout
  kBrokerUnavailable = 8,  // the broker could not be reached or read in time
  kDeliveryFailed = 9,     // a delivery failed: the row stays unpublished
  kPrecondition = 10,      // the command cannot run on this data (e.g. rollback with no event)
  kDbError = 11,           // any other SQLite error
  kFailpoint = 12,         // a failpoint's `error` action fired (OUTBOX_FAILPOINTS)
  kSystem = 13,            // an OS call failed: inotify, socket, signalfd, history file, fork
  kParkedRows = 14,        // relay --fail-on-parked: finished with parked rows in the outbox
  kNotDrained = 15,        // check: nothing lost so far, but outbox rows are still unpublished
  kCannotJudge = 16,       // check: the broker dropped records (retention): some events unjudgeable
  kDbReadOnly = 17,        // a command that writes met a read-only database file or directory
  kUnsupportedOnPostgres = 18,  // the command does not run on a postgresql:// --db yet
  kProducerFatal = 19,     // the Kafka producer hit a fatal error (idempotence); restart for a new one
  kStalled = 20,           // relay --until-empty: rows left that wait behind a parked row (unpark it)
  // relay: the partitioner or partition count differs from the one recorded for the topic
  kPartitionMappingChanged = 21,
  // relay --exactly-once or --tail-check with a combination it cannot make safe (claims,
  // --exactly-once --pipeline above 1, both flags at once)
  kExactlyOnceRefused = 22,
  // relay --source wal cannot run here: an SQLite --db, wal_level below logical, its slot
  // dropped or invalidated (resync: docs/wal-relay.md), or a row it cannot deliver
  kWalRefused = 23,
  // relay --source wal: another WAL relay streams the slot (one reader per slot)
  kSlotActive = 24,
  kInternal = 70,          // a bug: an unexpected exception
};

}  // namespace outbox::cli
