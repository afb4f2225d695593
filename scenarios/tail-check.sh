#!/usr/bin/env bash
# The restart tail check (relay --tail-check): at-least-once without Kafka transactions, minus
# the duplicates of a relay killed between the broker's ack and its mark; and the window it
# leaves open (docs/exactly-once.md, "The restart tail check").
# Injects: (A) the chapter's kill: kill -9 of relay --batch-size 3 --pipeline 1 after the acks of
#          its first batch (ids 1..3), before the mark (relay.after_ack_before_mark=hold);
#          (B) on a second outbox and topic, a zombie: relay Z reads ids 1..3 as leader and stops
#          before producing them (relay.after_claim=pause); relay B with --tail-check takes over
#          once Z's 12 s lease has run out, checks the topic and sends all 5; then Z is released.
# Expects: (A) the restart with --tail-check reads the topic's tail, finds ids 1,2,3 there,
#          marks them without sending and sends only 4 and 5: 5 records, 0 duplicates, check
#          valid. (B) B's check finds nothing (Z had produced nothing yet), B sends 5; Z, released
#          after the check, produces its 3 records anyway and its settle is fenced: 8 records,
#          3 duplicates. The check cannot see what is written after it; only fencing closes that
#          (relay --exactly-once, exactly-once-zombie.sh).
# Runs on the embedded broker (the tail read starts at each partition's low watermark there: the
# mock cluster cannot look offsets up by time) and, as real-kafka.tail-check, on Kafka 4.3.0
# (from the first record at or after the oldest unpublished row's created_at less 60 s).
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

start_broker
TOPIC_A=$TOPIC DB_A=$DB
TOPIC_B=$TOPIC-zombie DB_B=${DB%.db}-zombie.db
RELAY=(relay --batch-size 3 --pipeline 1 --lease 12s --delivery-timeout 10s)

# ---------------------------------------------------------------------------------------------
step "A: write 5 loans; the relay's first batch (ids 1..3) is acked, kill -9 before the mark"
TOPIC=$TOPIC_A DB=$DB_A
run reset
expect_rc 0 "reset"
run write 5 --quiet
expect_rc 0 "write 5"
export OUTBOX_FAILPOINTS='relay.after_ack_before_mark=hold'
start_hold relay-a1 "${RELAY[@]}" --until-empty
unset OUTBOX_FAILPOINTS
kill9 "$HOLD_PID"
expect_verify business=5,outbox=5,published=0,unpublished=5,kafka_records=3,kafka_distinct=3

step "A: restart with --tail-check: ids 1,2,3 are found on the topic and marked, only 2 are sent"
run "${RELAY[@]}" --tail-check --until-empty
expect_rc 0 "relay --tail-check --until-empty after the kill"
expect_line '^\[relay\] tail check: at the start of each term, before sending, read the topic ' "$OUT"
expect_line '^\[relay\] tail check: read 3 records \(partition:from-to ' "$OUT"
expect_line '^\[relay\] tail check: 3 unpublished ids of this run already on the topic, 3 of them marked now, not sent again \(ids 1,2,3\)$' "$OUT"
expect_line '^\[relay\] batch token=[0-9]+ claimed=2 acked=2 failed=0 marked=2 ' "$OUT"
expect_line '^\[relay\] done: batches=1 acked=2 marked=2 failed=0 parked=0 fenced=0 pending=0$' "$OUT"
run check --expect valid=1,kafka_records=5,duplicated=0,lost=0
expect_rc 0 "A: check after the tail check"
A_CHECK=$(grep '^\[check\] ok=' "$OUT")

# ---------------------------------------------------------------------------------------------
step "B: a second outbox and topic; relay Z reads ids 1..3 as leader and pauses before producing"
TOPIC=$TOPIC_B DB=$DB_B
run reset
expect_rc 0 "reset"
run write 5 --quiet
expect_rc 0 "write 5"
export OUTBOX_FAILPOINTS='relay.after_claim=pause'
start_bg relay-z "${RELAY[@]}" --until-empty
unset OUTBOX_FAILPOINTS
z_pid=$BG_PID z_log=$BG_LOG
wait_paused "$z_pid" "$z_log" relay.after_claim

step "B: relay B takes over after Z's lease; its tail check finds nothing yet; it sends all 5"
RUN_TIMEOUT_S=60 run "${RELAY[@]}" --tail-check --until-empty
expect_rc 0 "relay B --tail-check"
expect_line '^\[relay\] leader: acquired the lease with token 2, taking over from .* \(token 1\), whose lease ran out$' "$OUT"
expect_line '^\[relay\] tail check: 0 unpublished ids of this run on the topic; nothing to mark$' "$OUT"
expect_line '^\[relay\] done: batches=2 acked=5 marked=5 failed=0 parked=0 fenced=0 pending=0$' "$OUT"

step "B: Z resumes after the check: it produces its 3 records anyway; its settle is fenced"
release "$z_pid"
wait_exit "$z_pid" 60 "relay Z"
cat "$z_log"
expect_eq 0 "$BG_RC" "relay Z's exit status"
expect_line '^\[relay\] batch token=1 claimed=3 acked=3 failed=0 marked=0 retried=0 parked=0 fenced=3$' "$z_log"
run check --expect valid=1,kafka_records=8,duplicated=3,lost=0
expect_rc 0 "B: check after the zombie"
B_CHECK=$(grep '^\[check\] ok=' "$OUT")

step "summary"
echo "A (killed after ack, before mark; restarted with --tail-check): $A_CHECK"
echo "B (a zombie wrote after the new leader's check):                $B_CHECK"
finish
