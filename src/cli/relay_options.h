// relay's command line: the options of `outbox-lab relay` (besides --http's, cli/relay_http.h)
// and the values they fill. Validation that spans options lives with the command (cli/relay.cc).
#pragma once

#include <cstdint>
#include <string>

#include "cli/command.h"

namespace outbox::cli {

struct RelayCliOptions {
  bool once = false;
  bool until_empty = false;
  std::int64_t batch_size = 1000;
  int pipeline = 2;
  std::int64_t delivery_timeout_ms = 10000;
  std::string key = "event-id";
  std::string on_failure = "block-key";
  // Empty: by backend. leader on SQLite: every write is serialized there anyway, so one sender
  // loses nothing; claims on PostgreSQL, where relays on many hosts share the work through SKIP
  // LOCKED and a late commit behind a cursor is never delayed (README "PostgreSQL").
  std::string coordination;
  int max_attempts = 5;
  std::int64_t lease_ms = 30000;
  std::int64_t backoff_base_ms = 200;
  std::int64_t backoff_max_ms = 60000;
  std::int64_t idle_max_ms = 1000;
  std::string owner;
  bool quiet = false;
  // On unless --no-overlap-mark: mark on a second connection (leader mode; claims mode on
  // PostgreSQL)
  bool overlap_mark = true;
  bool no_listen = false;  // --no-listen: PostgreSQL polls only (TimedWaiter, no NotifyWatcher)
  bool allow_partitioner_change = false;  // --allow-partitioner-change
  bool fail_on_parked = false;
  bool json = false;
  std::string pg_claim = "scan";  // PostgreSQL: scan | naive-cursor (PgClaimMode)
  bool exactly_once = false;       // --exactly-once: a transactional producer
  std::string transactional_id;    // --transactional-id (empty: DefaultTransactionalId)
  std::int64_t transaction_timeout_ms = 60000;  // --transaction-timeout
  std::string source = "polling";  // --source: polling (the outbox table) | wal (WalRelay)
  std::int64_t linger_ms = 0;      // --linger: the WAL relay's wait for a batch to fill
  std::string slot;                // --slot: the WAL relay's slot (empty: DefaultWalSlotName)
  bool tail_check = false;         // --tail-check: read the topic's tail at term start
  std::string headers = "lab";                   // --headers: lab | cloudevents
  std::string ce_source = "/outbox-lab/relay";   // --ce-source (kDefaultCloudEventsSource)
};

// Adds relay's options (--once ... --transaction-timeout) to sub, writing into o, which must
// outlive sub's parse. Defaults are o's initial values.
void AddRelayCliOptions(CLI::App& sub, RelayCliOptions& o);

}  // namespace outbox::cli
