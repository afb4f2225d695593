// BrokerOutage: what a relay knows of a broker outage it is waiting out, as it records it in the
// outbox's database (OutboxStore::NoteOutage) so that `status` and `metrics`, in other
// processes, can name it. A plain value.
//
// An outage is a run of batches whose deliveries failed for the brokers' sake, not the
// messages' (DeliveryResult::outage; kafka::ClassifyDeliveryError says which errors): the relay
// counts no attempt for those rows, parks none of them, and tries again after a backoff. It ends
// with the first batch delivered again, and the relay then clears the record
// (OutboxStore::ClearOutage). A relay killed during an outage leaves its record behind until a
// relay delivers again or the next reset: noted_at_ms tells how fresh it is.
#pragma once

#include <cstdint>
#include <string>

namespace outbox {

struct BrokerOutage {
  // Epoch ms (the relay's clock) of the first delivery report of the outage; 0: no outage.
  std::int64_t since_ms = 0;
  // In words, e.g. "all brokers down (_ALL_BROKERS_DOWN)" or "Local: Message timed out
  // (_MSG_TIMED_OUT)": the cause seen at the outage's last failed batch.
  std::string cause;
  // The relay that noted it (RelayOptions::owner).
  std::string owner;
  // Epoch ms (the relay's clock) of the outage's last failed batch.
  std::int64_t noted_at_ms = 0;
  // Epoch ms (the relay's clock) the relay tries again; 0: not known.
  std::int64_t retry_at_ms = 0;

  bool active() const noexcept { return since_ms != 0; }
  bool operator==(const BrokerOutage&) const = default;
};

}  // namespace outbox
