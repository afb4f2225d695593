#!/usr/bin/env bash
# Graceful stop of the production relay: SIGTERM in the middle of a backlog.
# Injects: `kill -TERM` to `relay --batch-size 1000` (forever mode) over 20,000 unpublished events,
#          while its third batch is paused between the broker's acks and its mark (failpoint
#          relay.after_ack_before_mark=2*off->1*pause->off; released by SIGUSR1 after the
#          SIGTERM), so the signal lands in exactly that acked-but-unmarked window, the one
#          kill -9 turns into duplicates.
# Expects: the relay finishes the batches in flight (batch 3, and batch 4, which its pipeline of
#          depth 2 had claimed and produced while batch 2 was marked on the second connection),
#          marks what was acked and exits 0 with a last line
#          `[relay] stopped on signal: batches=4 ...`, leaving part of the backlog pending; nothing
#          stays claimed (status claimed=0); every marked row is in Kafka (lost-after-mark 0) and
#          every record in Kafka belongs to a marked row, exactly once: records = distinct ids =
#          published = the relay's marked count. A second `relay --until-empty` drains the rest:
#          check valid, 20,000 records, 0 duplicated — a graceful stop costs no duplicate.
# The writes use --synchronous normal only to keep the setup short.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

EVENTS=20000
BATCH=1000

start_broker

step "reset, then write $EVENTS loans with their outbox events"
run reset
expect_rc 0 "reset"
run --synchronous normal write "$EVENTS" --quiet
expect_rc 0 "write $EVENTS"

step "a relay in forever mode; SIGTERM while batch 3 is acked and not yet marked"
echo "(OUTBOX_FAILPOINTS='relay.after_ack_before_mark=2*off->1*pause->off')"
export OUTBOX_FAILPOINTS='relay.after_ack_before_mark=2*off->1*pause->off'
start_bg relay relay --batch-size "$BATCH" --json
unset OUTBOX_FAILPOINTS
relay_pid=$BG_PID relay_log=$BG_LOG
wait_paused "$relay_pid" "$relay_log" relay.after_ack_before_mark
echo "\$ kill -TERM $relay_pid"
kill -TERM "$relay_pid" || fail "kill -TERM $relay_pid: no such process"
release "$relay_pid"
wait_exit "$relay_pid" 30 "relay after SIGTERM"
sed 's/^/  | /' "$relay_log"
expect_eq 0 "$BG_RC" "exit code of the relay after SIGTERM"
expect_no_line '^outbox-lab: error:' "$relay_log"
expect_json "$relay_log" '.report == "final" and .stopped' "the relay's last line is its final report, stopped on the signal"
marked=$(relay_final "$relay_log" marked)
acked=$(relay_final "$relay_log" acked)
pending=$(relay_final "$relay_log" pending)
batches=$(relay_final "$relay_log" batches)
echo "stopped relay: batches=${batches:-?} acked=${acked:-?} marked=${marked:-?} pending=${pending:-?}"
# The signal came while batch 3 stood acked and unmarked, with batch 4 already in flight (the
# pipeline claims and produces the next batches while the one before is marked): both are
# finished and counted, and no batch 5 starts. (The pause is at the third batch: the relay hands
# a batch to its mark's thread right after the acks, so batch 2's pause would come before batch 3
# was read.)
expect_eq 4 "${batches:-?}" "batches of the relay stopped during batch 3 (depth-2 pipeline: batch 4 in flight)"
expect_eq "${batches:-0}" "$(json_lines "$relay_log" | jq -c 'select(.report == "batch" and .claimed == 1000 and .acked == 1000 and .failed == 0 and .marked == 1000)' | grep -c .)" "full batches acked and marked"
expect_eq "${acked:-?}" "${marked:-?}" "rows marked vs rows acked by the stopped relay"
[ "${pending:-0}" -gt 0 ] ||
  fail "the relay drained everything before the signal (pending=${pending:-?}): the stop interrupted nothing"
expect_eq "$((EVENTS - ${marked:-0}))" "${pending:-?}" "pending after the stop"

step "after the stop: nothing claimed; Kafka holds exactly the marked rows"
run status --json
expect_rc 0 "status --json"
expect_json "$OUT" ".claimed == 0 and .published == ${marked:-0} and .unpublished == $((EVENTS - ${marked:-0})) and .parked == 0 and .in_backoff == 0" \
  "status after the stop: no claim left, published = the relay's marked count"
# ok counts outbox events present in Kafka: with every marked row present (lost_after_mark 0) and
# ok = marked = records, no unmarked row has a record and no record is there twice.
# The rows left are pending, not lost: the relay will send them (check says not drained yet).
expect_check "valid=0,kafka_records=${marked:-0},ok=${marked:-0},stuck=$((EVENTS - ${marked:-0})),pending=$((EVENTS - ${marked:-0})),lost=0,lost_after_mark=0,phantom=0,atomicity=0,duplicated=0"

step "a second relay drains the rest"
run relay --until-empty --batch-size "$BATCH" --json --quiet
expect_rc 0 "relay --until-empty"
expect_json "$OUT" ".report == \"final\" and .acked == $((EVENTS - ${marked:-0})) and .marked == .acked and .failed == 0 and .parked == 0 and .fenced == 0 and .pending == 0" \
  "the second relay's final report"
expect_check "valid=1,outbox_rows=$EVENTS,ok=$EVENTS,kafka_records=$EVENTS,duplicated=0,lost=0,phantom=0,atomicity=0,lost_after_mark=0,stuck=0"

finish
