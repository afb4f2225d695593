// WalRelay: the log-based relay on PostgreSQL. It never queries or updates the outbox table: it
// reads the outbox's inserts from the server's write-ahead log through a logical replication slot
// with the built-in pgoutput plugin and a publication on the outbox table, and publishes each
// insert with the same key, headers and topic as the polling relay (Relay).
//
// The mark is the LSN. One batch is
//   receive whole committed transactions (at least batch_size records, or what has arrived)
//   -> produce every record, wait for every delivery report
//   -> confirm: a standby status update whose flush position is the end LSN of the batch's
//      last commit.
// The server moves the slot's confirmed_flush_lsn there; after a restart it streams only
// transactions that commit past it. So a commit is confirmed only after Kafka acknowledged every
// record of it and of every commit before it. Crash semantics: a kill -9 anywhere re-sends at most
// the transactions received since the last confirm (duplicates, never losses); the failpoints
// relay.wal.after_receive, relay.wal.after_produce and relay.wal.after_ack_before_confirm mark the
// three windows. A commit the server acknowledged is in the WAL, and the slot keeps that WAL until
// it is confirmed (up to max_slot_wal_keep_size: past it the server invalidates the slot).
//
// Protocol: PostgreSQL 15 docs 55.4 "Streaming Replication Protocol" and 55.9 "Logical Streaming
// Replication Protocol Message Formats" (outbox/pg/replication_stream.h, outbox/pg/pgoutput.h).
//
// Owns two connections to the server: one for SQL (publication, slot, positions) and the
// replication stream. Not thread-safe: one WalRelay per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "outbox/error.h"
#include "outbox/outbox_store.h"
#include "outbox/pg/connection.h"
#include "outbox/pg/pgoutput.h"
#include "outbox/pg/replication_stream.h"
#include "outbox/publisher.h"
#include "outbox/relay.h"

namespace outbox {

// The WAL relay cannot run here, or its slot cannot be used. kind() says why; the message is one
// line: what was tried, on what, why, and what to do.
class WalRelayError : public Error {
 public:
  enum class Kind {
    kWalLevel,      // the server's wal_level is not logical
    kSlotActive,    // another process streams the slot (a second WAL relay)
    kSlotLost,      // the slot was dropped or invalidated: changes past its LSN may be gone
    kSlotMismatch,  // a slot of that name exists with another plugin or database
    kUndeliverable, // a row failed delivery for its own sake max_attempts times
    kOlderRows,     // unpublished rows the slot never streams (older than it): polling relay first
  };
  WalRelayError(Kind kind, const std::string& message) : Error(message), kind_(kind) {}
  Kind kind() const noexcept { return kind_; }

 private:
  Kind kind_;
};

// "outbox_wal_<database>_<schema>": the default slot and publication name, lower case, every
// character outside [a-z0-9_] replaced by '_', at most 63 bytes (NAMEDATALEN - 1). A slot is the
// cluster's, a publication the database's: the database and schema keep two outboxes apart.
std::string DefaultWalSlotName(const std::string& database, const std::string& schema);

struct WalRelayOptions {
  // The replication slot's name (also the publication's). Empty: DefaultWalSlotName of the
  // connection's database and current schema.
  std::string slot;
  KeyChoice key = KeyChoice::kEventId;
  // Records per batch, at least 1: the batch closes at the first commit that reaches it (a
  // transaction is never split: only a whole commit can be confirmed).
  std::int64_t batch_size = 1000;
  // How long RunBatch waits for a change before it returns an idle report, ms.
  std::int64_t wait_ms = 500;
  // How long a batch below batch_size waits for more commits, from its first commit, ms. 0: it
  // closes as soon as nothing more has arrived (the lowest commit-to-ack latency).
  std::int64_t linger_ms = 0;
  // A record that fails for its own sake (kafka::ClassifyDeliveryError) is sent again up to this
  // many attempts in all; then RunBatch throws WalRelayError kUndeliverable (nothing is
  // confirmed). A broker outage is retried without a limit (DeliveryResult::outage).
  int max_attempts = 5;
  std::int64_t backoff_base_ms = 200;   // the first retry's delay, doubling per try
  std::int64_t backoff_max_ms = 60000;  // its cap
  // Called for a row that cannot be sent (a NULL or undecodable column): the row is skipped,
  // not sent, and reported here with one line. May be empty. Must not throw.
  std::function<void(std::int64_t outbox_id, const std::string& why)> on_skipped;
  // Called before each retry of failed deliveries. May be empty. Must not throw.
  std::function<void(std::int64_t failed, const std::string& first_error, std::int64_t retry_in_ms)>
      on_retry;
  // Stop waiting: checked between retries and while idle. May be empty.
  std::function<bool()> stop_requested;
  // Called when the stream shows a `reset` (PgStore::ResetSchema): the insert of the new run id
  // into outbox_run, in commit order. Every record carries the run its row was written in: the
  // rows before it go out under previous, the rows after it under run. previous is "" when it is
  // not known: the relay started after this reset (Open reads the current run only). dropped:
  // rows before it that were not sent because their run is not known (rows of an outbox that a
  // reset dropped before Open, streamed again from the slot's confirmed position). May be empty.
  // Must not throw.
  std::function<void(const std::string& previous, const std::string& run, std::int64_t dropped)>
      on_new_run;
};

// What Open found and did.
struct WalOpenReport {
  std::string slot;
  std::string publication;
  bool created_slot = false;
  bool created_publication = false;
  pg::Lsn confirmed = 0;      // the slot's confirmed_flush_lsn when streaming began
  pg::Lsn wal_at_open = 0;    // pg_current_wal_lsn() when streaming began (RunUntilCaughtUp's goal)
  // created_slot only: rows whose published flag was false right after the slot was created
  // (Open returns only when that is 0: kOlderRows).
  std::int64_t unpublished_at_creation = 0;
  // The outbox was not in the existing publication and was added: the outbox's rows then, which
  // are not in the stream (Open returns only when all are published: kOlderRows). -1: it was in
  // it.
  std::int64_t unstreamed = -1;
  int walsender_pid = 0;
};

struct WalBatchReport {
  std::int64_t transactions = 0;  // commits confirmed by this batch
  std::int64_t records = 0;       // records produced and acknowledged (retries not counted)
  std::int64_t skipped = 0;       // rows not sent (on_skipped)
  std::int64_t retries = 0;       // failed deliveries sent again
  pg::Lsn confirmed = 0;          // the slot's confirmed position after the batch
  bool idle = false;              // no commit arrived within wait_ms
};

class WalRelay {
 public:
  // url: a postgresql:// URL (its search_path names the outbox's schema). store: the outbox
  // store on the same database (read for RunId only, when a reset's run id in the stream is not
  // text). Not owned; store and
  // publisher must outlive the relay. Throws ConfigError for batch_size, wait_ms or
  // max_attempts below 1, or a slot name that is not [a-z0-9_]{1,63}.
  WalRelay(std::string url, OutboxStore& store, Publisher& publisher, WalRelayOptions options);
  ~WalRelay();

  // Makes sure the publication (FOR TABLE outbox, outbox_run, of the current schema: the run
  // table's inserts are the resets, streamed in commit order with the rows) and the slot
  // (pgoutput) exist, creating what is missing, then starts streaming from the slot's confirmed
  // position. A publication without the outbox (a reset by an older outbox-lab took it out) gets
  // it back; the rows committed meanwhile are not in the stream (WalOpenReport::unstreamed).
  // Records the slot's name (table outbox_wal_slot) and, when it creates the slot or adds the
  // outbox back, the unpublished rows the stream will not hold (table outbox_wal_unstreamed):
  // verify, check and status read both (WalProgress).
  // Call again after a connection loss: the server re-sends every unconfirmed transaction, and
  // their rows go out under the run they were written in (the last reset this relay saw at or
  // before the confirmed position, else the run the first Open read), not the run now.
  // A slot held by an ordinary backend (verify, check or status peeking at its pending changes,
  // for one statement) is waited for, up to 5 s in steps of 20 ms.
  // Throws WalRelayError kWalLevel (wal_level is not logical), kSlotActive (a walsender, another
  // WAL relay, streams the slot, or a peek held it past those 5 s: SQLSTATE 55006), kSlotLost (the publication exists but the slot does not,
  // or the slot's wal_status is lost), kSlotMismatch, kOlderRows (recorded rows the stream will
  // not hold are still unpublished: the polling relay must send them first, or a later row of
  // their aggregate streamed now would overtake them); pg::PgError for anything else the server
  // says (connection_lost() when it is down).
  WalOpenReport Open();

  // One batch (see the class comment). Returns the report; idle when nothing committed within
  // wait_ms. Throws pg::PgError when the stream breaks (connection_lost(): call Open again),
  // pg::DecodeError for a malformed message, KafkaError as the publisher, WalRelayError
  // kUndeliverable, FailpointError from the failpoints. After a throw between the receive and the
  // confirm, the batch stays unconfirmed and RunBatch throws std::logic_error until Open is called
  // again (streaming on would confirm past the failed batch).
  WalBatchReport RunBatch();

  // True when every change up to the WAL position at Open is confirmed and nothing is received
  // and unconfirmed: a keepalive said the walsender read up to wal_at_open (its wal_end), and the
  // confirmed position reached it. For relay --until-empty. Repeated keepalives with one wal_end
  // are no proof: a stalled walsender answers every waiting question at once, from where it is.
  bool CaughtUp() const;

  pg::Lsn confirmed() const noexcept { return confirmed_; }
  const std::string& slot() const noexcept { return slot_; }

 private:
  struct Transaction {
    pg::Lsn end_lsn = 0;
    std::vector<OutboundMessage> messages;
    std::vector<std::string> aggregates;  // messages[i]'s aggregate id (Publish's waves)
    std::optional<std::string> new_run;  // a reset's transaction: the run it began
  };
  // A reset seen in the stream: the run in effect from its commit on.
  struct RunAt {
    pg::Lsn end_lsn = 0;
    std::string run;
  };
  // The outbox's columns in a Relation message, by position (-1: absent); or outbox_run's.
  struct OutboxColumns {
    bool is_outbox = false;
    bool is_run = false;  // outbox_run: its insert is a reset's new run id
    int id = -1, event_id = -1, aggregate_id = -1, event_type = -1, payload = -1, headers = -1;
    int run_id = -1;
  };

  void Handle(const pg::PgoutputMessage& message, std::int64_t& records);
  void OnInsert(const pg::PgoutputInsert& insert);
  void OnNewRun(const pg::PgoutputInsert& insert, const OutboxColumns& columns);
  // Sends a batch in waves: the n-th wave holds the n-th record of each aggregate in the batch,
  // in commit order, and goes out only once every record of the waves before it is acknowledged.
  // So a later record of an aggregate is never acked before an earlier one that failed and waits
  // for its retry: an ack cannot be recalled (the polling relay's rule: docs/relay.md, "Order in
  // leader mode"). A batch of distinct aggregates is one wave. Between waves it sends the
  // server a status update, at most one a second, so a long batch keeps its stream.
  void Publish(std::vector<OutboundMessage> messages, const std::vector<std::string>& aggregates,
               WalBatchReport& report);
  // Produces one wave and retries its failed records until every one is acknowledged. first: the
  // batch's first produce (failpoint relay.wal.after_produce).
  void DeliverWave(std::vector<OutboundMessage> messages, bool first, WalBatchReport& report);
  void Wait(std::int64_t ms);

  std::string url_;
  OutboxStore& store_;
  Publisher& publisher_;
  WalRelayOptions options_;
  std::string slot_;
  std::unique_ptr<pg::Connection> sql_;
  std::unique_ptr<pg::ReplicationStream> stream_;
  std::unordered_map<std::uint32_t, OutboxColumns> relations_;
  // The run the relay sends under, and the outbox table it belongs to. Open reads both in one
  // statement; a reset in the stream replaces the run id, and every outbox insert after it in
  // commit order is of that run (outbox_oid_ 0). Before that, an insert into another table named
  // outbox is of an outbox a reset dropped while the relay was away, of a run not known: it is
  // not sent (a record under a guessed run id could pass for a row of that run in `check`).
  std::string run_id_;
  std::uint32_t outbox_oid_ = 0;
  // What the first Open read, and each reset the stream showed since. Open again (a lost
  // connection) streams from the slot's confirmed position, which may lie before resets already
  // seen: the run in effect there is the last reset at or before it, else what the first Open
  // read. Read from the database again, it would be the newest run, and the old run's rows
  // streamed again would be dropped, never sent, although this relay knew their run.
  std::string open_run_id_;
  std::uint32_t open_outbox_oid_ = 0;
  bool opened_ = false;
  std::vector<RunAt> runs_seen_;
  std::int64_t dropped_ = 0;  // rows of a dropped outbox not sent since the last on_new_run
  bool streamed_open_outbox_ = false;  // a row of outbox_oid_'s table came since Open
  std::optional<Transaction> open_;   // between Begin and Commit
  std::vector<Transaction> ready_;    // committed, not yet confirmed
  pg::Lsn confirmed_ = 0;
  pg::Lsn wal_at_open_ = 0;
  pg::Lsn keepalive_end_ = 0;          // the last keepalive's wal_end
  std::int64_t skipped_in_batch_ = 0;  // rows on_skipped reported during this batch
  bool batch_failed_ = false;          // a batch threw between receive and confirm: Open again
};

}  // namespace outbox
