// The Prometheus text exposition format (version 0.0.4) of the outbox's figures: the status
// families (what `outbox-lab metrics` prints, read from the database) and the relay loop's own
// (what relay --http adds from its RelayObserver). Pure functions: no I/O, any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "outbox/broker_outage.h"
#include "outbox/relay_observer.h"
#include "outbox/store.h"
#include "outbox/wal_progress.h"

namespace outbox::ops {

// The status families: the backlog, parked, claimed rows and the leader lease as read at now_ms
// (epoch ms of the store's clock); stalls: OutboxStore::Stalls (its first rows held count).
// outage: OutboxStore::ReadOutage, the broker outage a relay recorded (outbox_broker_outage,
// labelled with its cause and UTC start, and outbox_broker_outage_seconds; 0 without one).
// Every family is a gauge with HELP and TYPE; promtool check metrics accepts the text.
std::string StatusMetricsText(const OutboxStatus& status, const LeaderLease& lease,
                              const std::vector<Stall>& stalls, std::int64_t now_ms,
                              const std::optional<BrokerOutage>& outage = std::nullopt);

// The WAL relay's slot families (relay --source wal), each labelled slot="NAME":
// outbox_wal_slot_lag_bytes (pg_current_wal_lsn() - confirmed_flush_lsn), outbox_wal_slot_active
// (1 while a walsender streams it), outbox_wal_slot_status (1, labelled with wal_status),
// outbox_wal_slot_safe_wal_size_bytes and outbox_wal_slot_keep_size_bytes (max_slot_wal_keep_size;
// each only when the server sets a limit and the slot is not lost). Gauges with HELP and TYPE.
std::string WalSlotMetricsText(const WalProgress& wal);

// What RelayMetricsText needs besides the snapshot, worked out by the caller at the same instant.
struct RelayVerdicts {
  std::int64_t now_steady_ms = 0;  // RelayObserver::SteadyNowMs() when read
  bool healthy = false;            // /healthz would answer 200
  bool ready = false;              // /readyz would answer 200
  bool status_read_failed = false; // the status families could not be read (database error)
  // The lease row as the status read found it (nullopt when that read failed): the leader gauge
  // is 1 only while it is still this relay's term and live, so a stalled loop whose lease
  // lapsed does not go on reporting itself leader. lease_now_ms: the store's clock at the read.
  std::optional<LeaderLease> lease;
  std::int64_t lease_now_ms = 0;
};

// The relay families (outbox_relay_*): loop turns, batches, rows acked, failed, marked, parked,
// fenced (counters since the relay started), batches in flight, the last loop's age in seconds,
// leadership (the snapshot's term, confirmed by verdicts.lease when given), database retries
// and losses, and 1/0 gauges for healthy, ready and a failed status read. Counters end in _total.
std::string RelayMetricsText(const RelaySnapshot& snapshot, const RelayVerdicts& verdicts);

}  // namespace outbox::ops
