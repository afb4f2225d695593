#!/usr/bin/env bash
# A zombie leader under relay --exactly-once, on real Kafka: the producer epoch fences it where
# the database's lease token alone could not stop its records (docs/exactly-once.md).
# Injects: relay A (--exactly-once, lease 12s) produces ids 1..3 in a transaction, the broker acks
#          them, and A pauses before the commit (relay.txn_before_commit=pause: a GC-like stall);
#          relay B takes over once A's lease has run out, its init_transactions bumps the epoch of
#          the shared transactional.id, and it sends every row; then A is released.
# Expects: B marks all 5 (recovery finds no committed id); A's commit fails fenced and A exits
#          19 (producer fatal) without marking anything; read_committed sees 5 records and
#          0 duplicates (check --exactly-once valid); read_uncommitted sees A's aborted 3 too (8).
# Kafka: $KAFKA_BOOTSTRAP_SERVERS when set, else a one-node Kafka 4.3.0 of this scenario's own on
# port 40592 (OUTBOX_KAFKA_ZOMBIE_PORT; not 40492, the controller port of exactly-once-chapter's
# cluster on 40392, which ctest may run at the same time). ctest: scenario.exactly-once-zombie (label real-kafka).
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

if [ -n "$EXTERNAL_BROKERS" ]; then
  start_broker
else
  KAFKA=$REPO_DIR/scripts/kafka.sh
  export OUTBOX_KAFKA_DIR=$TMP/kafka OUTBOX_KAFKA_PORT=${OUTBOX_KAFKA_ZOMBIE_PORT:-40592}
  command -v java >/dev/null 2>&1 || die "Java is not installed: run scripts/install-deps.sh --with-kafka"
  step "start a one-node Kafka 4.3.0 of this scenario's own"
  echo "\$ scripts/kafka.sh start"
  BROKER=$("$KAFKA" start) || die "Kafka did not start"
  PIDS+=("$(cat "$OUTBOX_KAFKA_DIR/node-1/pid")")
  TOPIC=eos-zombie-$$-$RANDOM
  echo "broker: $BROKER, topic $TOPIC"
fi
# A delivery timeout that a fresh topic's first produce (auto-creation, leader election) stays
# under: with 2 s, A's first transaction once timed out and was aborted before the stall.
EOS=(relay --exactly-once --batch-size 3 --lease 12s --delivery-timeout 10s --transaction-timeout 60s)

step "write 5 loans; relay A acks ids 1..3 inside its transaction and stalls before the commit"
run reset
expect_rc 0 "reset"
run write 5 --quiet
expect_rc 0 "write 5"
export OUTBOX_FAILPOINTS='relay.txn_before_commit=pause'
start_bg relay-a "${EOS[@]}" --until-empty
unset OUTBOX_FAILPOINTS
a_pid=$BG_PID a_log=$BG_LOG
wait_paused "$a_pid" "$a_log" relay.txn_before_commit

step "relay B takes over after A's lease; its init_transactions fences A's producer"
run "${EOS[@]}" --until-empty
expect_rc 0 "relay B"
expect_line '^\[relay\] leader: acquired the lease with token 2, taking over from .* \(token 1\), whose lease ran out$' "$OUT"
expect_line '^\[relay\] exactly-once recovery: 0 ids carried by committed transactions; nothing to mark$' "$OUT"
expect_line '^\[relay\] done: batches=2 acked=5 marked=5 failed=0 parked=0 fenced=0 pending=0$' "$OUT"

step "A wakes up: its commit is fenced, it marks nothing and exits 19"
release "$a_pid"
wait_exit "$a_pid" 60 "relay A"
cat "$a_log"
expect_eq 19 "$BG_RC" "relay A's exit status (producer fenced: fatal)"
expect_no_line '^\[relay\] batch ' "$a_log"
expect_line '^outbox-lab: error: commit transaction: .*fenced by a newer instance \(_FENCED\); 3 rows of the batch left unpublished with no attempt counted' "$a_log"

step "read_committed: 5 records, 0 duplicates; read_uncommitted also shows A's aborted 3"
run check --exactly-once --isolation read_committed --expect valid=1,kafka_records=5,duplicated=0,lost=0
expect_rc 0 "check --exactly-once --isolation read_committed"
run check --exactly-once --isolation read_uncommitted --expect valid=1,kafka_records=8,duplicated=3,lost=0
expect_rc 0 "check --exactly-once --isolation read_uncommitted"
finish
