// The relay's final drain, shared by `relay` and `check --drain`.
#pragma once

#include <cstdint>
#include <string>

#include "cli/command.h"
#include "outbox/relay.h"
#include "outbox/store.h"

namespace outbox::cli {

// At start, before a relay claims anything: lab::ReleaseDeadOwners, and one
// "[relay] released ..." line per lease or owner released. Returns the token of the dead
// leader's lease it released, 0 when none. Throws DbError.
std::int64_t ReleaseDeadOwners(OutboxStore& store);

// check --drain: the production relay with its defaults (batches of 1000,
// acks=all, delivery timeout delivery_timeout_ms, lease 30 s, this run's id
// as header "run_id", --history when given), run until nothing is claimable
// and nothing waits on a backoff or a lease (LoopMode::kUntilEmpty), as
// Jepsen's final drain before its checker. Parked rows stay parked. Returns
// the loop's report. Throws SchemaMissingError, DbError, KafkaError,
// ConfigError (no broker).
LoopReport DrainOutbox(const GlobalOptions& global, std::int64_t delivery_timeout_ms);

}  // namespace outbox::cli
