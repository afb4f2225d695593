#!/usr/bin/env bash
# Issue 8, leader mode — the leader frozen past its lease (SIGSTOP), then thawed (SIGCONT).
# Injects: relay-a, `relay --coordination leader --until-empty --batch-size 500 --pipeline 1
#          --lease 8s --send-timeout 1s`, stands at the failpoint relay.after_ack_before_mark=
#          1*pause->off: its first batch (rows 1..500) is acked and not settled. kill -STOP
#          freezes it there. relay-b, `relay --coordination leader` (runs until SIGTERM), starts
#          as a standby; once relay-a's lease has run out it takes over and sends everything.
#          Then kill -CONT and the pause's release (SIGUSR1) let relay-a settle its batch.
# Expects: relay-b stood by for relay-a's token 1, took the lease over with token 2 and published
#          all 2,000 rows, relay-a's batch among them; relay-a's settle is fenced out: its batch
#          line says token 1, acked 500, marked 0, fenced 500, it prints that it lost the lease of
#          token 1, sends nothing more and exits 0 with marked 0; relay-b stops cleanly on SIGTERM.
#          check: valid, 0 lost, exactly rows 1..500 twice (sent by both leaders), every mark after
#          an ack (check --history), relay-a's 500 marks recorded as fenced.
# No sleep: relay-b's takeover line is the proof that relay-a's lease ran out while it was stopped.
# relay-a's lease is 8 s: relay-b must start and see it live (its standby line) before it runs
# out, and relay-a, frozen, renews it no more: with 2 s, as little as 1 s was left at the SIGSTOP
# (a leader renews once half is left), and relay-b's start on a loaded machine took longer.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

EVENTS=2000
BATCH=500
HISTORY=$TMP/history.jsonl

start_broker

step "reset, then write $EVENTS loans with their outbox events"
run reset
expect_rc 0 "reset"
run --synchronous normal --history "$HISTORY" write "$EVENTS" --quiet
expect_rc 0 "write $EVENTS"

step "relay-a leads and pauses after its first batch's acks; SIGSTOP freezes it there"
echo "(OUTBOX_FAILPOINTS='relay.after_ack_before_mark=1*pause->off')"
export OUTBOX_FAILPOINTS='relay.after_ack_before_mark=1*pause->off'
start_bg relay-a --history "$HISTORY" relay --coordination leader --until-empty --batch-size "$BATCH" \
  --pipeline 1 --lease 8s --send-timeout 1s --owner relay-a --json
pid_a=$BG_PID log_a=$BG_LOG
unset OUTBOX_FAILPOINTS
wait_paused "$pid_a" "$log_a" relay.after_ack_before_mark
expect_line '^\{"report":"lease","event":"acquired","owner":"relay-a","token":1,' "$log_a"
echo "\$ kill -STOP $pid_a"
kill -STOP "$pid_a" || die "kill -STOP $pid_a failed"

step "relay-b stands by, then takes over once relay-a's lease has run out, and sends everything"
start_bg relay-b --history "$HISTORY" relay --coordination leader --batch-size "$BATCH" --lease 2s \
  --send-timeout 1s --owner relay-b --json
pid_b=$BG_PID log_b=$BG_LOG
wait_for 30 "$pid_b" "relay-b's standby line" _has_line '"report":"wait","on":"leader","owner":"relay-a","token":1,' "$log_b" ||
  die "relay-b never said it stands by for relay-a"
wait_for 30 "$pid_b" "relay-b's takeover line" \
  _has_line '"report":"lease","event":"acquired","owner":"relay-b","token":2,' "$log_b" ||
  die "relay-b never took the lease over from the stopped relay-a"
_all_published() {
  "$LAB_BIN" --db "$DB" status --json 2>/dev/null | jq -e ".published == $EVENTS" >/dev/null
}
wait_for 60 "$pid_b" "relay-b publishing all $EVENTS rows" _all_published ||
  die "relay-b did not publish everything"
run status --json
expect_json "$OUT" '.leader.owner == "relay-b" and .leader.token == 2 and .unpublished == 0' \
  "status: relay-b leads with token 2, nothing unpublished"

step "SIGCONT and release relay-a: its settle is fenced out"
echo "\$ kill -CONT $pid_a"
kill -CONT "$pid_a" || fail "kill -CONT $pid_a failed"
release "$pid_a"
wait_exit "$pid_a" 30 "relay-a"
expect_eq 0 "$BG_RC" "exit code of relay-a"
sed 's/^/  | /' "$log_a"
expect_count 1 '"report":"batch"' "$log_a"
expect_line "^\\{\"report\":\"batch\",\"token\":1,\"claimed\":$BATCH,\"acked\":$BATCH,\"failed\":0,\"marked\":0,\"retried\":0,\"parked\":0,\"fenced\":$BATCH,\"outage\":0\\}\$" "$log_a"
expect_line '^\{"report":"lease","event":"lost","owner":"relay-a","token":1,' "$log_a"
expect_json "$log_a" ".report == \"final\" and .batches == 1 and .marked == 0 and .fenced == $BATCH and .pending == 0" \
  "relay-a: final report, nothing marked"

step "stop relay-b (SIGTERM)"
echo "\$ kill -TERM $pid_b"
kill -TERM "$pid_b"
wait_exit "$pid_b" 30 "relay-b"
expect_eq 0 "$BG_RC" "exit code of relay-b"
expect_json "$log_b" ".report == \"final\" and .stopped and .marked == $EVENTS and .fenced == 0" \
  "relay-b: final report, all $EVENTS marked"
expect_line '^\{"report":"lease","event":"released","owner":"relay-b","token":2,' "$log_b"

step "check: nothing lost, relay-a's batch twice, the fenced marks in the history"
run check --json
expect_rc 0 "check --json"
expect_json "$OUT" "
  .valid and .outbox_rows == $EVENTS and .ok == $EVENTS and .kafka_records == $((EVENTS + BATCH))
  and .lost == [] and .phantom == [] and .atomicity == [] and .lost_after_mark == [] and .stuck == []
  and .duplicated == ([range(1; $((BATCH + 1))) | {key: \"evt-\\(1000 + .)\", value: 2}] | from_entries)" \
  "check --json: valid, 0 lost, exactly relay-a's batch (rows 1..$BATCH) twice"
expect_check "valid=1,lost=0,history_marked=$EVENTS,history_marked_without_ack=0,history_fenced=$BATCH" --history "$HISTORY"

finish
