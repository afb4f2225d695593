// Reconciliation: the chapter's final check (最终对账) of the database against
// the topic, and the --expect comparison that turns it into a test.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lab/chapter/loans.h"
#include "lab/check/topic_reader.h"
#include "outbox/store.h"
#include "outbox/wal_progress.h"

namespace outbox::lab {

struct DbSnapshot {
  std::int64_t business_loans = 0;
  // Business rows whose key is no outbox row's aggregate_id (archived and purged rows count):
  // committed without their event. 0 when atomicity_skipped. Counted per loan, not as loans
  // minus outbox rows: an aggregate may have many events (write --workload).
  std::int64_t orphan_loans = 0;
  OutboxCounts outbox;
  std::vector<std::string> outbox_event_ids;  // in outbox id order
  std::vector<std::string> unpublished_event_ids;  // the unpublished part, in outbox id order
  std::vector<std::string> parked_event_ids;  // the parked part of those: sent only after unpark
  // Published events no longer in the outbox table (purge --archive, or purge: outbox_purged),
  // in id order: their records are expected in Kafka, not phantoms.
  std::vector<std::string> archived_event_ids;
  std::string run_id;  // Store::RunId(): which records on the topic are this run's
  // OutboxStore::BrokerIncarnations(): the brokers this run's publishes went to.
  std::vector<std::string> broker_incarnations;
  bool atomicity_skipped = false;  // LabSnapshot::atomicity_skipped
};

// Whether the broker read now is not the one (or not the only one) a run's
// publishes went to: the embedded broker restarted (its records lived in
// memory and died with it), or another cluster altogether.
struct BrokerRestart {
  bool restarted = false;
  bool embedded = false;  // the gone incarnation was the embedded broker's
  std::string gone;       // the first noted incarnation that is not the current one
  std::string current;
};

// noted: OutboxStore::BrokerIncarnations(); current: TopicLog::broker_incarnation.
// restarted when current is known and some noted incarnation differs from it.
BrokerRestart JudgeBrokerRestart(const std::vector<std::string>& noted, const std::string& current);

// "the embedded broker was restarted after these were published (it keeps
// records in memory); rerun from reset", or for a Kafka cluster "they were
// published to another Kafka cluster (cluster:A) than the one read now (cluster:B)".
std::string BrokerRestartReason(const BrokerRestart& restart);

// When restart.restarted but no published event is missing (everything was sent again to the
// broker read now): the one line that says the counts leave out what the gone broker held (the
// chapter's duplicates, say). "" when not restarted.
std::string BrokerRestartNote(const BrokerRestart& restart);

struct KafkaReconciliation {
  std::int64_t records = 0;  // this run's records
  std::int64_t distinct_event_ids = 0;
  std::vector<std::pair<std::string, std::int64_t>> duplicates;  // id, count > 1; first-seen order
  std::vector<std::string> missing;     // in the outbox, not in Kafka (yet): unsent or lost
  std::vector<std::string> unexpected;  // in Kafka, not in the outbox: phantom
  // Filled by the DbSnapshot overload of Reconcile only:
  std::vector<std::string> unsent;         // missing and unpublished: the relay will send them
  std::vector<std::string> sent_unmarked;  // in Kafka and unpublished: will be sent again
  std::vector<std::string> lost;           // missing and published, the log complete: lost
  // Missing and published, but the broker dropped records (a log start above
  // 0): the record may have been among them. Neither ok nor lost.
  std::vector<std::string> retention_unknown;
  // How many of retention_unknown the dropped offsets cannot hold (LostBeyondRetention): lost
  // for certain, though which ones cannot be told.
  std::int64_t lost_beyond_retention = 0;
  // Missing and published, but the broker they went to was restarted since
  // (BrokerRestart): neither ok nor lost.
  std::vector<std::string> restart_unknown;
  BrokerRestart broker_restart;
  std::int64_t dropped_offsets = 0;    // TopicLog::Dropped(): log starts and compacted offsets
  std::int64_t other_run_records = 0;  // records of other runs, left out of every count
  // Archived or purged events found in Kafka (DbSnapshot overload): published, not unexpected.
  std::int64_t archived_in_kafka = 0;
  // In Kafka, not in the outbox read before the topic, but in a read after it
  // (SetAsideCommittedDuringRead): a live writer committed them and a relay sent them while the
  // topic was read. Neither unexpected nor in any other list.
  std::vector<std::string> committed_during_read;
  // In Kafka and unpublished in the read before the topic, but published in a read after it
  // (SetAsideCommittedDuringRead): a live relay marked them while the topic was read, so they
  // will not be sent again. Moved out of sent_unmarked.
  std::vector<std::string> marked_during_read;
};

// Moves each id of result.unexpected that later (a DbSnapshot taken after the topic read) holds,
// in the outbox or archived, to result.committed_during_read: reading the database before the
// topic, verify would otherwise take a live writer's newest events for phantoms. Moves as well
// each id of result.sent_unmarked that later holds as published to result.marked_during_read.
void SetAsideCommittedDuringRead(KafkaReconciliation& result, const DbSnapshot& later);

// Reads the counts, the outbox's event ids and the run id in one read
// transaction (either backend). Archived rows (purge --archive) are not counted. Throws DbError.
// business: the application's business table (null: the lab's business_loan), whose keys
// business_loans counts.
// wal: the WAL relay's progress (outbox/wal_progress.h), when it has a slot on this database: a
// row the flag calls unpublished counts as published when the slot holds no pending insert of it
// (the WAL relay marks no row; its mark is the slot's confirmed LSN). Ignored when its
// pending_ids are unknown (the slot is active or lost): the flag alone counts then.
DbSnapshot TakeDbSnapshot(OutboxStore& store, const BusinessTable* business = nullptr,
                          const WalProgress* wal = nullptr);

KafkaReconciliation Reconcile(const std::vector<std::string>& outbox_event_ids,
                              const std::vector<TopicRecord>& records);

// Of missing published events that retention may explain, how many it cannot: the broker
// dropped dropped_offsets records (other runs' and duplicates among them), so at most that many
// of the missing events were among them and the rest (missing - dropped_offsets, never below 0)
// never reached the broker. 0 when dropped_offsets is 0 (nothing is explained by retention).
std::int64_t LostBeyondRetention(std::int64_t missing, std::int64_t dropped_offsets);

// The records of one run (TopicRecord::run_id == run_id; an empty run_id, a
// database reset before run ids, takes the records without one) and how many
// records of other runs the topic holds besides.
struct RunRecords {
  std::vector<TopicRecord> records;
  std::int64_t other_run_records = 0;
};
RunRecords RecordsOfRun(std::vector<TopicRecord> records, const std::string& run_id);

// Reconciles db with log: only this run's records (db.run_id) count; the
// others are counted in other_run_records. Also splits missing into unsent,
// lost and retention_unknown, and finds the unpublished events already sent. Archived and
// purged events (db.archived_event_ids) are published events: in Kafka they are counted in
// archived_in_kafka (not unexpected); missing, they are judged as any published event.
KafkaReconciliation Reconcile(const DbSnapshot& db, const TopicLog& log);

// Expected values from "business=5,outbox=5,kafka_records=8". Keys: business,
// outbox, published, unpublished, kafka_records, kafka_distinct,
// kafka_duplicates, kafka_missing, kafka_unexpected. Throws ConfigError for
// an unknown key, a key given twice, a missing '=', or a value that is not a non-negative
// integer.
std::map<std::string, std::int64_t> ParseExpectations(const std::string& text);

// The same grammar over another command's keys (check --expect): known_keys
// are the keys allowed, in the order the error message lists them.
std::map<std::string, std::int64_t> ParseExpectations(const std::string& text,
                                                      const std::vector<std::string>& known_keys);

// The actual values under the same keys; kafka_* only when kafka is given.
std::map<std::string, std::int64_t> ActualValues(const DbSnapshot& db,
                                                 const std::optional<KafkaReconciliation>& kafka);

// One line per expectation that does not hold: "kafka_records: expected 8, got 5".
// An expected kafka_* key without a Kafka result yields
// "kafka_records: expected 8, but no broker is configured".
std::vector<std::string> CompareExpectations(const std::map<std::string, std::int64_t>& expected,
                                             const std::map<std::string, std::int64_t>& actual);

}  // namespace outbox::lab
