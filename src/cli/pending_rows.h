// What a relay's recovery may mark without sending (relay --tail-check, --exactly-once): an
// unpublished row that carries the event id the record on Kafka names.
#pragma once

#include <cstdint>
#include <vector>

#include "outbox/kafka/tail_check.h"
#include "outbox/outbox_store.h"

namespace outbox::cli {

struct PendingRows {
  std::vector<std::int64_t> created_at_ms;  // of the rows read (kafka::TailCheckSince)
  // (id, event id) -> whether row id is unpublished and carries that event id (an id alone is
  // not enough: a foreign writer may delete a published row and insert a new event under the
  // same explicit id). Keeps a reference to the store given to ReadPendingRows.
  kafka::PendingTest test;
};

// Reads the limit (> 0) lowest unpublished rows (OutboxStore::FetchUnpublished). The test
// answers from them; an id above the last of them, when limit rows were read, is looked up
// alone. Throws what FetchUnpublished throws (DbError, pg::PgError), from the test too.
PendingRows ReadPendingRows(OutboxStore& store, std::int64_t limit);

}  // namespace outbox::cli
