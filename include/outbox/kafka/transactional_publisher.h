// TransactionalPublisher: the Publisher of relay --exactly-once, a librdkafka
// transactional producer (KIP-98; librdkafka INTRODUCTION.md "Transactional
// Producer").
//
// Each batch is one Kafka transaction: its records, plus one record on the
// relay-state topic (RelayStateTopic) that names the outbox ids the
// transaction carries. AwaitOldest() returns a batch's results only after
// commit_transaction returned, so a relay marks rows only for a committed
// transaction. A read_committed consumer sees a batch whole or not at all.
//
// Crash semantics. Killed before the commit: the transaction stays open on
// the brokers until a producer with the same transactional.id calls
// init_transactions (Recover does, first) or transaction.timeout.ms passes;
// either aborts it, read_committed readers never see its records, and the rows
// are still unpublished: sent again. Killed after the commit, before the rows
// are marked: the relay-state record is committed with the records, so
// Recover returns those ids and the relay marks them without sending them
// again. That is why one transaction at a time: with one batch in flight and
// its rows marked before the next transaction begins, only the last committed
// transaction can hold unmarked ids, and a compacted state topic that keeps one
// record per key (the transactional.id: one per outbox, also where several outboxes
// share a topic) loses nothing the recovery needs.
//
// Owns one KafkaPublisher (and through it the rd_kafka_t) and the consumer of
// Recover, made and destroyed inside the call. Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "outbox/kafka/tail_check.h"

#include "outbox/kafka/kafka_publisher.h"

namespace outbox::kafka {

// The relay-state topic of outbox topic `topic`: "<topic>.outbox-relay-state",
// one per outbox topic, created compacted (cleanup.policy=compact) by Recover.
std::string RelayStateTopic(const std::string& topic);

// The default transactional.id of a relay: "outbox-relay:<topic>:<db_identity>",
// stable across restarts of the relay (not its PID), so that a restarted relay
// fences its own zombie through the producer epoch (KIP-98). db_identity names
// the outbox the relay drains, e.g. the database file's absolute path or the
// PostgreSQL URL without password; two relays of one outbox share it, which is
// why exactly-once runs one sending relay at a time (leader coordination).
std::string DefaultTransactionalId(const std::string& topic, const std::string& db_identity);

struct RelayState {
  std::string run_id;
  std::vector<std::int64_t> outbox_ids;
  // Each outbox id's event id, in the same order (the value's "event_ids_hex": the bytes as
  // lowercase hex, so that any bytes survive JSON). Empty for a record written before the field
  // existed, or with a field of the wrong shape: then the ids alone are known.
  std::vector<std::string> event_ids;
};

// The value Send writes: {"transactional_id", "run_id", "outbox_ids", "event_ids_hex"};
// event_ids as many as outbox_ids (any bytes).
std::string RelayStateValue(const std::string& transactional_id, const std::string& run_id,
                            const std::vector<std::int64_t>& outbox_ids,
                            const std::vector<std::string>& event_ids);

// A relay-state record's value. Throws KafkaError for a value that is not such a JSON object
// (a record some other client wrote on the state topic).
RelayState ParseRelayState(const std::string& value);

struct TransactionalPublisherOptions {
  KafkaPublisherOptions publisher;  // brokers, topic, delivery timeout, -X, run id
  // librdkafka transactional.id; must not be empty (DefaultTransactionalId).
  std::string transactional_id;
  // librdkafka transaction.timeout.ms: how long the brokers keep a transaction
  // open with no commit or abort before they abort it themselves, in ms; a
  // relay killed mid-transaction and not restarted holds back read_committed
  // consumers of the partitions it wrote for this long (Kafka's default 60 s).
  // Must exceed the delivery timeout (librdkafka requires
  // message.timeout.ms <= transaction.timeout.ms).
  int transaction_timeout_ms = 60000;
};

class TransactionalPublisher : public Publisher {
 public:
  // Creates the producer with enable.idempotence and transactional.id set
  // (and acks=all, which librdkafka requires then). Nothing is sent and
  // init_transactions is not called yet: a standby relay must not fence the
  // leader. Throws ConfigError for an empty transactional id or a bad property.
  explicit TransactionalPublisher(const TransactionalPublisherOptions& options);
  ~TransactionalPublisher() override;
  TransactionalPublisher(const TransactionalPublisher&) = delete;
  TransactionalPublisher& operator=(const TransactionalPublisher&) = delete;

  // Before the first send of a term. Calls init_transactions once per
  // producer (timeout_ms, ms): the coordinator bumps the producer epoch of
  // transactional.id, which fences an older producer with that id (a zombie
  // relay: its next produce or commit fails with PRODUCER_FENCED) and aborts
  // its open transaction. Then makes sure the relay-state topic exists
  // (CreateTopics, one partition, cleanup.policy=compact; an existing one is
  // kept as it is) and reads it whole with isolation.level=read_committed,
  // up to its last stable offset (partition 0: Send writes only there). Returns every outbox id a committed
  // transaction of run run_id carried (Store::RunId: a `reset` starts a new
  // run whose ids start again at 1, so another run's ids must not count;
  // empty: every run), ascending, without repeats (the union of the
  // records still there: after compaction, the last one per key). Throws
  // KafkaError when the brokers cannot be reached or refuse transactions
  // (e.g. the cluster has fewer brokers than
  // transaction.state.log.min.isr), or the read does not end in timeout_ms
  // (a partition with no leader yet, or not yet in this client's metadata,
  // is waited for within timeout_ms, then raised). With is_pending (tail_check.h), only the
  // ids it accepts with the event id the record names (a record without event ids: every id),
  // so that a foreign writer's new event under a reused explicit id is sent, not marked.
  std::vector<std::int64_t> Recover(int timeout_ms, const std::string& run_id,
                                    const PendingTest& is_pending = nullptr);

  // Publisher::Publish: Send, then AwaitOldest.
  std::vector<DeliveryResult> Publish(const std::vector<OutboundMessage>& messages) override;

  // Begins a transaction, produces the relay-state record naming every
  // message's outbox id and the run (the first message's run_id, else the
  // options' run_id), then the messages (KafkaPublisher::Send: passes
  // relay.after_produce). An empty batch begins no transaction. Throws
  // std::logic_error when a batch is still in flight (one transaction at a
  // time) or Recover was never called; KafkaError when begin_transaction
  // fails (a fenced or fatal producer).
  void Send(const std::vector<OutboundMessage>& messages) override;

  // Waits for the batch's delivery reports (KafkaPublisher::AwaitOldest),
  // passes relay.txn_before_commit, then commits (commit_transaction, bounded
  // by the delivery timeout; retried while librdkafka says the error is
  // retriable). Returns every result ok only when the commit returned
  // success. A failed delivery aborts the transaction (abort_transaction) and
  // every result of the batch fails with the reason; a producer that is
  // fenced or hit a fatal error fails every result with producer_fatal set (a
  // relay then stops: restart it for a new producer).
  std::vector<DeliveryResult> AwaitOldest() override;

  std::size_t InFlight() const override { return publisher_.InFlight(); }

  // The transactional.id in use.
  const std::string& transactional_id() const noexcept { return transactional_id_; }
  // Transactions committed and aborted by this publisher.
  std::int64_t committed() const noexcept { return committed_; }
  std::int64_t aborted() const noexcept { return aborted_; }

  std::string LastClientError() const { return publisher_.LastClientError(); }
  rd_kafka_t* handle() const noexcept { return publisher_.handle(); }

 private:
  // Fails every result with reason; producer_fatal when the producer can send no more.
  static void FailAll(std::vector<DeliveryResult>& results, const std::string& reason,
                      bool producer_fatal);
  // Aborts the open transaction; false when even that failed (the producer is then unusable).
  // An abort librdkafka times out as retriable (the brokers away: "retry call to resume") is
  // called again, up to transaction_timeout_ms_ in all, after which the coordinator aborts the
  // transaction itself: a short broker outage does not end the producer. Once only with
  // retry false (teardown: the next init_transactions aborts it anyway).
  bool Abort(std::string* reason, bool retry = true);

  KafkaPublisherOptions options_;
  std::string transactional_id_;
  std::string state_topic_;
  int transaction_timeout_ms_ = 60000;  // TransactionalPublisherOptions::transaction_timeout_ms
  bool initialized_ = false;    // init_transactions succeeded
  bool transaction_open_ = false;
  std::int64_t committed_ = 0;
  std::int64_t aborted_ = 0;
  KafkaPublisher publisher_;
};

}  // namespace outbox::kafka
