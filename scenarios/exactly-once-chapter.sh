#!/usr/bin/env bash
# The chapter's two kills a fourth time, with relay --exactly-once (Kafka transactions), on real
# Kafka: librdkafka 2.0.2's embedded mock broker writes no commit or abort markers, so it cannot
# show the difference (docs/exactly-once.md).
# Injects: (A) kill -9 of relay --exactly-once --batch-size 3 after the commit of its first
#          transaction (ids 1..3) and before the mark (relay.after_ack_before_mark=hold: under
#          --exactly-once the batch's results come back only once commit_transaction returned);
#          (B) on a second outbox and topic, kill -9 after the 3 records were produced and acked
#          inside the open transaction, before the commit (relay.txn_before_commit=hold).
# Expects: (A) the restarted relay reads <topic>.outbox-relay-state read_committed, finds ids 1,2,3
#          committed, marks them without sending and sends only 4 and 5: both isolation levels
#          see 5 records and 0 duplicates; check --exactly-once --isolation read_committed valid.
#          (B) while the transaction is open, read_uncommitted sees its 3 records and
#          read_committed none; the restarted relay's init_transactions aborts it, recovery finds
#          no id, and it sends all 5: read_uncommitted sees 3 + 5 = 8 records (3 duplicates, the
#          aborted copies), read_committed 5 and 0 duplicates.
# Kafka: $KAFKA_BOOTSTRAP_SERVERS when set (a topic of this run's own), else a one-node Kafka 4.3.0
# of this scenario's own on port 40392 (OUTBOX_KAFKA_EOS_PORT), apart from the suite's 39392.
# ctest: scenario.exactly-once-chapter (labels scenario and real-kafka), its own Kafka.
# Needs Java 17 and Maven (scripts/install-deps.sh --with-kafka).
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

if [ -n "$EXTERNAL_BROKERS" ]; then
  start_broker
else
  KAFKA=$REPO_DIR/scripts/kafka.sh
  export OUTBOX_KAFKA_DIR=$TMP/kafka OUTBOX_KAFKA_PORT=${OUTBOX_KAFKA_EOS_PORT:-40392}
  command -v java >/dev/null 2>&1 || die "Java is not installed: run scripts/install-deps.sh --with-kafka"
  step "start a one-node Kafka 4.3.0 of this scenario's own"
  echo "\$ scripts/kafka.sh start"
  BROKER=$("$KAFKA" start) || die "Kafka did not start"
  PIDS+=("$(cat "$OUTBOX_KAFKA_DIR/node-1/pid")")
  TOPIC=eos-chapter-$$-$RANDOM
  echo "broker: $BROKER, topic $TOPIC"
fi
TOPIC_A=$TOPIC DB_A=$DB
TOPIC_B=$TOPIC-b DB_B=${DB%.db}-b.db
# 10 s: a fresh topic's first produce (auto-creation, leader election) stays under it.
EOS=(relay --exactly-once --batch-size 3 --delivery-timeout 10s --transaction-timeout 60s)

# records ISOLATION: the number of this topic's records a reader at that isolation level sees.
records() {
  run consume --isolation "$1"
  expect_rc 0 "consume --isolation $1"
  RECORDS=$(grep -c . "$OUT")
}

# ---------------------------------------------------------------------------------------------
step "A: write 5 loans; relay --exactly-once commits ids 1..3, kill -9 before the mark"
TOPIC=$TOPIC_A DB=$DB_A
run reset
expect_rc 0 "reset"
run write 5 --quiet
expect_rc 0 "write 5"
export OUTBOX_FAILPOINTS='relay.after_ack_before_mark=hold'
start_hold relay-a1 "${EOS[@]}" --until-empty
unset OUTBOX_FAILPOINTS
expect_line '^\[relay\] exactly-once: transactional.id outbox-relay:'"$TOPIC"':.*, relay-state topic '"$TOPIC"'.outbox-relay-state$' "$HOLD_LOG"
kill9 "$HOLD_PID"
expect_verify business=5,outbox=5,published=0,unpublished=5,kafka_records=3,kafka_distinct=3

step "A: restart: recovery marks the 3 committed ids, the relay sends only 2"
run "${EOS[@]}" --until-empty
expect_rc 0 "relay --exactly-once --until-empty after the kill"
expect_line '^\[relay\] exactly-once recovery: 3 ids carried by committed transactions, 3 of them not yet marked: marked now, not sent again \(ids 1,2,3\)$' "$OUT"
expect_line '^\[relay\] batch token=[0-9]+ claimed=2 acked=2 failed=0 marked=2 ' "$OUT"
expect_line '^\[relay\] done: batches=1 acked=2 marked=2 failed=0 parked=0 fenced=0 pending=0$' "$OUT"
for isolation in read_committed read_uncommitted; do
  records "$isolation"
  expect_eq 5 "$RECORDS" "A: records seen $isolation"
  run check --exactly-once --isolation "$isolation" --expect valid=1,kafka_records=5,duplicated=0,lost=0
  expect_rc 0 "A: check --exactly-once --isolation $isolation"
done
A_CHECK=$(grep '^\[check\] ok=' "$OUT")

# ---------------------------------------------------------------------------------------------
step "B: a second outbox and topic; kill -9 after produce, before the commit"
TOPIC=$TOPIC_B DB=$DB_B
run reset
expect_rc 0 "reset"
run write 5 --quiet
expect_rc 0 "write 5"
export OUTBOX_FAILPOINTS='relay.txn_before_commit=hold'
start_hold relay-b1 "${EOS[@]}" --until-empty
unset OUTBOX_FAILPOINTS
kill9 "$HOLD_PID"
records read_uncommitted
expect_eq 3 "$RECORDS" "B: the open transaction's records seen read_uncommitted"
records read_committed
expect_eq 0 "$RECORDS" "B: the open transaction's records seen read_committed"

step "B: restart: init_transactions aborts the open transaction; nothing was committed, all 5 go"
run "${EOS[@]}" --until-empty
expect_rc 0 "relay --exactly-once --until-empty after the kill"
expect_line '^\[relay\] exactly-once recovery: 0 ids carried by committed transactions; nothing to mark$' "$OUT"
expect_line '^\[relay\] done: batches=2 acked=5 marked=5 failed=0 parked=0 fenced=0 pending=0$' "$OUT"
records read_uncommitted
expect_eq 8 "$RECORDS" "B: records seen read_uncommitted (3 aborted + 5 committed)"
records read_committed
expect_eq 5 "$RECORDS" "B: records seen read_committed"
run check --exactly-once --isolation read_uncommitted --expect valid=1,kafka_records=8,duplicated=3,lost=0
expect_rc 0 "B: check --exactly-once --isolation read_uncommitted"
B_UNCOMMITTED=$(grep '^\[check\] ok=' "$OUT")
run check --exactly-once --isolation read_committed --expect valid=1,kafka_records=5,duplicated=0,lost=0
expect_rc 0 "B: check --exactly-once --isolation read_committed"
B_COMMITTED=$(grep '^\[check\] ok=' "$OUT")

step "summary: what each isolation level saw after each kill"
echo "A (after commit, before mark), read_committed:   $A_CHECK"
echo "B (after produce, before commit), read_uncommitted: $B_UNCOMMITTED"
echo "B (after produce, before commit), read_committed:   $B_COMMITTED"
finish
