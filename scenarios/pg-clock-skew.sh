#!/usr/bin/env bash
# Issue 12, clock skew on PostgreSQL: a relay whose clock runs an hour ahead steals nothing.
# Injects: a relay process whose own clock is one hour ahead (Debian's faketime: libfaketimeMT
#          preloaded with FAKETIME=+1h, so the lab's own PID is the one started and killed), next
#          to relays on the true clock, on one PostgreSQL outbox (a schema of its own):
#          (1) leader mode: relay-a leads with --lease 10s and stands between its first batch's
#              acks and mark (relay.after_ack_before_mark=1*pause->off); relay-b (+1h) starts as a
#              candidate; then kill -9 of relay-a.
#          (2) claims mode, after a reset: relay-c claims 500 rows with --lease 30s and stands
#              after the claim (relay.after_claim=1*pause->off); relay-d (+1h) claims what it may;
#              then relay-c is released.
# Expects: (1) status and metrics show relay-a leading (token 1, lease left within the 10 s);
#          relay-b, whose clock says the lease ran out an hour ago, stands by for relay-a's token
#          1 instead of taking it, and sees the lease's true time left (its wait line's until_ms
#          is relay-a's lease end in its own clock, an hour ahead of ours); after the kill it takes
#          over with token 2 only once the lease ran out on the server's clock (its term starts
#          after the lease end it was shown), finishes the backlog, and check gives 0 lost with
#          relay-a's acked batch as the only duplicates. (2) relay-d claims only the 500 rows
#          nobody holds and waits on relay-c's live claims (500 rows, relay-c); relay-c's settle
#          is not fenced; check gives 0 lost and 0 duplicated. A skewed relay must print its final
#          report; one then stuck in librdkafka's teardown (libfaketime, see end_ahead) is stopped
#          with kill -9 after 10 s instead of failing the run.
# Skipped (exit 77) only when OUTBOX_PG_URL is unset; scripts/test.sh sets it.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

EVENTS=1000
BATCH=500
LEASE_MS=10000
COMMON=(--until-empty --batch-size "$BATCH" --pipeline 1 --delivery-timeout 2s --idle-max 200ms --json)

use_postgres
# libfaketimeMT: the variant for multi-threaded programs (librdkafka's threads read the clock too).
FAKETIME_LIB=$(dpkg -L libfaketime 2>/dev/null | grep '/libfaketimeMT\.so\.1$' | head -n 1)
if [ -z "$FAKETIME_LIB" ] || [ ! -f "$FAKETIME_LIB" ]; then
  die "libfaketimeMT.so.1 not found: install Debian's faketime (scripts/install-deps.sh does)"
fi
# ahead NAME ARGS...: start_bg with the process's clock one hour ahead of everyone else's.
ahead() { LD_PRELOAD=$FAKETIME_LIB FAKETIME=+1h start_bg "$@"; }
# end_ahead PID LOG NAME: a skewed relay's end. Its final report (flushed before the Kafka
# teardown) must come; then it should exit 0. libfaketime 0.9.10 does not wrap glibc's C11
# cnd_timedwait, which librdkafka's threads wait in, so their deadlines fall an hour in the real
# future and rd_kafka_destroy at exit can wait that hour for a broker thread: a skewed relay still
# there 10 s after its final report is stopped with kill -9 (everything it did is committed and
# checked below; its exit code is then not known).
end_ahead() {
  local pid=$1 log=$2 name=$3
  wait_for 60 "$pid" "$name's final report" _has_line '"report":"final"' "$log" || return 0
  if wait_until 10 "" process_gone "$pid"; then
    wait_exit "$pid" 5 "$name"
    expect_eq 0 "$BG_RC" "exit code of $name"
  else
    echo "($name still in rd_kafka_destroy 10 s after its final report: libfaketime, see end_ahead)"
    kill9 "$pid"
  fi
}
start_broker

step "(1) leader mode: reset, write $EVENTS loans with their outbox events"
run reset
expect_rc 0 "reset"
run write "$EVENTS" --quiet
expect_rc 0 "write $EVENTS"

step "relay-a leads on the true clock and stands between its first batch's acks and mark"
echo "(relay-a: OUTBOX_FAILPOINTS='relay.after_ack_before_mark=1*pause->off')"
OUTBOX_FAILPOINTS='relay.after_ack_before_mark=1*pause->off' start_bg relay-a relay \
  --coordination leader --lease 10s "${COMMON[@]}" --owner relay-a
pid_a=$BG_PID log_a=$BG_LOG
wait_paused "$pid_a" "$log_a" relay.after_ack_before_mark
expect_line '^\{"report":"lease","event":"acquired","owner":"relay-a","token":1,' "$log_a"

step "status and metrics show the leader on PostgreSQL"
run status
expect_rc 0 "status"
expect_line '^\[status\] leader owner=relay-a token=1 lease-left-ms=[0-9]+ owner-process=[a-z]+$' "$OUT"
run status --json
expect_rc 0 "status --json"
expect_json "$OUT" ".leader.owner == \"relay-a\" and .leader.token == 1 and .leader.lease_left_ms > 0 and .leader.lease_left_ms <= $LEASE_MS and .lease_token == 1" \
  "status --json: relay-a leads with token 1"
run metrics
expect_rc 0 "metrics"
expect_line '^outbox_leader_token 1$' "$OUT"
expect_line '^outbox_leader_lease_left_seconds [0-9.]+$' "$OUT"
left_s=$(awk '$1 == "outbox_leader_lease_left_seconds" {print $2}' "$OUT")
awk -v s="${left_s:-0}" -v max=$((LEASE_MS / 1000)) 'BEGIN { exit !(s > 0 && s <= max) }' ||
  fail "metrics: outbox_leader_lease_left_seconds ${left_s:-none}, expected in (0, $((LEASE_MS / 1000))]"

step "relay-b, its clock an hour ahead, must stand by instead of taking relay-a's live lease"
ahead relay-b relay --coordination leader --lease 10s "${COMMON[@]}" --owner relay-b
pid_b=$BG_PID log_b=$BG_LOG
wait_for 30 "$pid_b" "relay-b's standby line" \
  _has_line '"report":"wait","on":"leader","owner":"relay-a","token":1,' "$log_b" ||
  die "relay-b never said it stands by for relay-a"
expect_no_line '"report":"lease"' "$log_b"
# The skew is real: relay-b's own clock puts relay-a's lease end about an hour after ours does.
lease_end_b=$(json_lines "$log_b" | jq -r 'select(.report == "wait" and .on == "leader") | .until_ms' | head -n 1)
skew_ms=$((lease_end_b - $(_now_us) / 1000))
echo "relay-b's clock shows relay-a's lease ending $((skew_ms / 1000)) s from our now (an hour ahead: ~3600 s + the lease left)"
if [ "$skew_ms" -le 3500000 ] || [ "$skew_ms" -gt $((3600000 + LEASE_MS + 60000)) ]; then
  fail "relay-b's clock is not an hour ahead (lease end ${skew_ms} ms from our now): faketime did not take"
fi
run status --json
expect_rc 0 "status --json with relay-b standing by"
expect_json "$OUT" ".leader.owner == \"relay-a\" and .leader.token == 1" "status: relay-a still leads"

step "kill -9 relay-a; relay-b takes over only once the lease ran out on the server's clock"
kill9 "$pid_a"
wait_for $((LEASE_MS / 1000 + 15)) "$pid_b" "relay-b's takeover line" \
  _has_line '"report":"lease","event":"acquired","owner":"relay-b","token":2,' "$log_b" ||
  die "relay-b never took the lease over"
term_start_b=$(json_lines "$log_b" | jq -r 'select(.report == "lease" and .event == "acquired") | .until_ms' | head -n 1)
term_start_b=$((term_start_b - LEASE_MS))
echo "relay-b's term began $((term_start_b - lease_end_b)) ms after relay-a's lease end (both in relay-b's clock)"
# 100 ms: the round trips between the server's readings of now() and relay-b's own.
[ $((term_start_b - lease_end_b)) -ge -100 ] ||
  fail "relay-b's term began $((lease_end_b - term_start_b)) ms before relay-a's lease ran out"
expect_eq 1 "$(json_lines "$log_b" | jq -c 'select(.report == "lease" and .event == "acquired" and .previous_owner == "relay-a" and .previous_token == 1)' | grep -c .)" \
  "relay-b's takeover line naming relay-a's term 1"
end_ahead "$pid_b" "$log_b" relay-b
grep -v '"report":"batch"' "$log_b" | sed 's/^/  | /'
expect_json "$log_b" ".report == \"final\" and .marked == $EVENTS and .failed == 0 and .fenced == 0 and .pending == 0" \
  "relay-b: final report, every row (relay-a marked none)"
expect_check "valid=1,lost=0,stuck=0,phantom=0,atomicity=0,ok=$EVENTS,outbox_rows=$EVENTS,duplicated=$BATCH"

step "(2) claims mode: reset, write $EVENTS loans"
run reset
expect_rc 0 "reset"
run write "$EVENTS" --quiet
expect_rc 0 "write $EVENTS"

step "relay-c claims a batch on the true clock and stands after the claim"
echo "(relay-c: OUTBOX_FAILPOINTS='relay.after_claim=1*pause->off')"
OUTBOX_FAILPOINTS='relay.after_claim=1*pause->off' start_bg relay-c relay \
  --coordination claims --lease 30s "${COMMON[@]}" --owner relay-c
pid_c=$BG_PID log_c=$BG_LOG
wait_paused "$pid_c" "$log_c" relay.after_claim

step "relay-d, its clock an hour ahead, claims only what nobody holds"
ahead relay-d relay --coordination claims --lease 30s "${COMMON[@]}" --owner relay-d
pid_d=$BG_PID log_d=$BG_LOG
wait_for 30 "$pid_d" "relay-d's wait on relay-c's claims" \
  _has_line "\"report\":\"wait\",\"on\":\"lease\",\"owner\":\"relay-c\",\"rows\":$BATCH," "$log_d" ||
  die "relay-d never said it waits on relay-c's claims"
run status --json
expect_rc 0 "status --json with relay-c holding its claims"
expect_json "$OUT" ".claimed == $BATCH and .published == $EVENTS - $BATCH and ([.claims[] | select(.owner == \"relay-c\" and .rows == $BATCH)] | length) == 1" \
  "status: relay-c still holds its $BATCH rows, relay-d published the rest"
release "$pid_c"
wait_exit "$pid_c" 60 relay-c
expect_eq 0 "$BG_RC" "exit code of relay-c"
end_ahead "$pid_d" "$log_d" relay-d
for name in relay-c relay-d; do
  log_var=log_${name#relay-}
  expect_json "${!log_var}" ".report == \"final\" and .marked == $BATCH and .failed == 0 and .fenced == 0" \
    "$name: final report, $BATCH rows marked, nothing fenced"
done
expect_check "valid=1,lost=0,stuck=0,phantom=0,atomicity=0,ok=$EVENTS,outbox_rows=$EVENTS,duplicated=0"

finish
