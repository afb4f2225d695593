#include "cli/relay_options.h"

#include "cli/duration.h"
#include "cli/publishing.h"
#include "outbox/cloud_events.h"

namespace outbox::cli {

void AddRelayCliOptions(CLI::App& sub, RelayCliOptions& o) {
  auto* once = sub.add_flag("--once", o.once, "Run one batch, then exit");
  sub.add_flag("--until-empty", o.until_empty,
                "Run until no row waits (all published or parked), then exit; exit 20, naming "
                "the parked rows, when rows are left stalled behind them (block-key)")
      ->excludes(once);
  sub.add_option("--batch-size", o.batch_size, "Rows per batch")
      ->transform(PositiveInteger())
      ->capture_default_str();
  sub.add_option("--pipeline", o.pipeline,
                 "Batches at the broker at once: the next batch is claimed and produced while "
                 "the last one's acks arrive (1: one batch at a time). A batch being marked on "
                 "the second connection (--overlap-mark, the default) is one more, so kill -9 "
                 "re-sends at most this many batches plus one (this many with "
                 "--no-overlap-mark or --pipeline 1)")
      ->transform(PositiveInteger())
      ->capture_default_str();
  // --send-timeout: the name this option had before --delivery-timeout was shared with publish.
  AddDurationOption(sub, "--delivery-timeout,--send-timeout", o.delivery_timeout_ms,
                    "Delivery timeout per batch (librdkafka message.timeout.ms)", 1,
                    kMaxDeliveryTimeoutMs);
  sub.add_option("--key", o.key,
                 "Record key: event-id (the chapter's) or aggregate-id (per-aggregate order)")
      ->check(CLI::IsMember({"event-id", "aggregate-id"}))
      ->capture_default_str();
  sub.add_option("--on-failure", o.on_failure,
                 "block-key: later events of a failing aggregate wait (order kept); skip: they "
                 "flow on (order lost)")
      ->check(CLI::IsMember({"block-key", "skip"}))
      ->capture_default_str();
  sub.add_option("--coordination", o.coordination,
                 "leader: one relay holds a lease row with a growing fencing token and sends "
                 "everything, the others stand by and take over when it lapses; claims: every "
                 "batch is claimed (per-row lease and token), several relays share the work. "
                 "Default: leader on an SQLite file, claims on a postgresql:// --db (leader "
                 "runs there too, its lease on the server's clock)")
      ->check(CLI::IsMember({"leader", "claims"}));
  sub.add_option("--max-attempts", o.max_attempts, "Failed attempts before a row is parked")
      ->transform(PositiveInteger())
      ->capture_default_str();
  // At most 2h: room above the longest --delivery-timeout (1h), far from overflowing the
  // claim's expiry (now + lease, epoch ms).
  AddDurationOption(sub, "--lease", o.lease_ms,
                    "How long a claim (claims) or the leader lease (leader) holds: above "
                    "--delivery-timeout, at most 2h", 1, 2 * 3'600'000);
  AddDurationOption(sub, "--backoff-base", o.backoff_base_ms,
                    "First retry delay: at most --backoff-max", 0, 3'600'000);
  AddDurationOption(sub, "--backoff-max", o.backoff_max_ms,
                    "Cap of the exponential retry delay, at most 1h", 0, 3'600'000);
  AddDurationOption(sub, "--idle-max", o.idle_max_ms, "Longest idle wait between polls", 1,
                    60'000);
  sub.add_option("--owner", o.owner, "Name recorded with claims and the leader lease (default "
                 "relay-PID@HOST/PIDNS/INCARNATION: the PID namespace's inode and a random id "
                 "per process, so a relay in another PID namespace is never taken for dead)")
      ->check(CLI::Validator(
          [](const std::string& owner) -> std::string {
            if (owner.empty())
              return "an owner cannot be empty: give a name, or leave --owner out for "
                    "relay-PID@HOST";
            return {};
          },
          "NAME", "Owner"));
  sub.add_flag("--overlap-mark,!--no-overlap-mark", o.overlap_mark,
               "On by default; --no-overlap-mark turns it off. Leader mode, or claims mode on "
               "PostgreSQL, with --pipeline 2 or more (not --exactly-once, --tail-check, --once; "
               "ignored otherwise, and in claims mode on SQLite, where each claim is a write "
               "that would wait for the mark): open a second database connection and mark each "
               "batch on it, in a thread of its own, while the next batches are read (or "
               "claimed) and produced. The batch being marked takes no --pipeline slot, so a "
               "kill -9 re-sends at most --pipeline + 1 batches (--pipeline without it)");
  sub.add_flag("--no-listen", o.no_listen,
               "PostgreSQL: do not LISTEN for the writers' notifications, only poll (every "
               "--idle-max at the longest); for a connection pooler in transaction mode, where "
               "LISTEN does not work");
  sub.add_flag("--quiet", o.quiet, "Print only the final line");
  sub.add_flag("--allow-partitioner-change", o.allow_partitioner_change,
                "--key aggregate-id: start even when -X partitioner or the topic's partition "
                "count differs from the one recorded for --topic (exit 21 otherwise), and record "
                "the new one");
  sub.add_flag("--fail-on-parked", o.fail_on_parked,
                "Exit 14 instead of 0 when parked rows are left in the outbox at the end (for CI "
                "that asserts every event was delivered; list them with `parked`); exit 4 when "
                "stopped while the PostgreSQL server is down (the count is unknown). With "
                "--source wal: exit 14 when this run skipped a row it could not send");
  sub.add_option("--pg-claim", o.pg_claim,
                 "PostgreSQL, claims mode only: scan (every unpublished row, whatever its id) "
                 "or naive-cursor (the classic bug: claim only ids above the highest claimed; a "
                 "transaction that took a smaller id and committed later is skipped, and check "
                 "reports it lost)")
      ->check(CLI::IsMember({"scan", "naive-cursor"}))
      ->capture_default_str();
  sub.add_flag("--json", o.json,
                "Print JSON lines instead: {\"report\":\"batch\",...} per batch (unless --quiet), "
                "then {\"report\":\"final\",\"stopped\":...,\"batches\":...,...}");
  sub.add_flag("--exactly-once", o.exactly_once,
                "Kafka transactions: each batch is one transaction with a record on "
                "<topic>.outbox-relay-state naming its outbox ids; rows are marked only after "
                "the commit, and at the start of its term the relay reads that topic "
                "read_committed and marks the ids a committed transaction carried instead of "
                "sending them again. Consumers must read with isolation.level=read_committed. "
                "Refused (exit 22): --coordination claims (several relays would send at once; "
                "leader is the default with this flag, on PostgreSQL too) and --pipeline above 1 "
                "(one transaction at a time, so only the last one can be unmarked). On the "
                "embedded broker it runs but proves nothing: librdkafka 2.0.2's mock cluster "
                "writes no commit/abort markers (docs/exactly-once.md)");
  sub.add_option("--transactional-id", o.transactional_id,
                 "--exactly-once: the producer's transactional.id (default "
                 "outbox-relay:<topic>:<database path or URL without password>: stable across "
                 "restarts, so a restarted relay fences its zombie)");
  sub.add_option("--source", o.source,
                 "polling: read the outbox table and mark each sent row (the chapter's relay); "
                 "wal: PostgreSQL only, read the outbox's inserts from a logical replication "
                 "slot (pgoutput) and confirm the slot's LSN once Kafka acknowledged them: no "
                 "query or UPDATE on the outbox (docs/wal-relay.md); exit 23 on SQLite or "
                 "wal_level below logical, 24 when another WAL relay streams the slot")
      ->check(CLI::IsMember({"polling", "wal"}))
      ->capture_default_str();
  sub.add_option("--slot", o.slot,
                 "--source wal: the replication slot and publication name, created when missing "
                 "(default outbox_wal_<database>_<schema>)");
  AddDurationOption(sub, "--linger", o.linger_ms,
                    "--source wal: how long a batch below --batch-size waits for more commits "
                    "(0: it closes once nothing more has arrived)", 0, 60'000);
  AddDurationOption(sub, "--transaction-timeout", o.transaction_timeout_ms,
                    "--exactly-once: librdkafka transaction.timeout.ms; the brokers abort a "
                    "transaction left open this long (a relay killed mid-transaction and not "
                    "restarted holds back read_committed readers until then); at least "
                    "--delivery-timeout", 1, 900'000);
  sub.add_flag("--tail-check", o.tail_check,
               "At-least-once minus a dead relay's duplicates, without transactions: at the "
               "start of its term, before sending, the relay reads every partition of the topic "
               "from the first record at or after the oldest unpublished row's created_at (less "
               "60 s of clock slack; from the low watermark on the embedded broker) up to the "
               "high watermark, and marks the ids of this run already there instead of sending "
               "them again. Leader coordination (the default with this flag). A relay that "
               "writes after the check (a paused zombie) can still duplicate: only fencing "
               "(--exactly-once) closes that (docs/exactly-once.md). Refused (exit 22) with "
               "--exactly-once and --coordination claims");
  // Header conventions (docs/routing-and-headers.md); routing is the global --topic-template.
  sub.add_option("--headers", o.headers,
                 "Record headers besides the lab's own (event_id, event_type, outbox_id, "
                 "run_id): lab (none) or cloudevents (the CloudEvents Kafka binding's binary "
                 "mode: ce_specversion, ce_id, ce_source, ce_type, ce_subject, ce_time); the "
                 "application's headers column (a traceparent) is sent unchanged either way")
      ->check(CLI::IsMember({"lab", "cloudevents"}))
      ->capture_default_str();
  sub.add_option("--ce-source", o.ce_source,
                 "--headers cloudevents: the ce_source of every event, a URI reference "
                 "(printable ASCII, no spaces)")
      ->check(CLI::Validator(
          [](const std::string& source) { return CloudEventsSourceProblem(source); }, "URI",
          "CloudEventsSource"))
      ->capture_default_str();
}

}  // namespace outbox::cli
