#!/usr/bin/env bash
# Issue 12, the relay's reconnect path on PostgreSQL: SIGTERM while the relay waits for a crashed
# server, on a cluster of this scenario's own (port 55435), never the shared one.
# Part 1, stopped after a reconnect.
# Injects: relay-a (forever mode, batches of 200) publishes 600 loans; the server is crashed
#          (pg_ctl stop -m immediate) and restarted; relay-a publishes a loan written after the
#          restart (its evidence of the reconnect), then gets SIGTERM.
# Expects: exit 0 and a final line that counts every batch of the run, those before the
#          reconnect too: batches=4 acked=601 ... pending=0 (not only the last connection's).
# Part 2, stopped while the server is down.
# Injects: relay-b as relay-a (100 loans, a crash, a restart, one loan), then a second crash, and
#          SIGTERM while relay-b waits to reconnect.
# Expects: exit 0 (a stop asked for, not a crash), one line "final counts unavailable: database
#          server unreachable (...)", the final line batches=2 acked=101 ... pending=unknown.
# Part 3, stopped once the server is back, before the relay reconnected.
# Injects: relay-c publishes 100 loans; the server is crashed; relay-c is frozen (SIGSTOP) in its
#          reconnect wait, the server restarts, relay-c gets SIGTERM and goes on (SIGCONT): the
#          stop meets a wait for a server that is back (no sleep decides the order).
# Expects: relay-c reconnects, exits 0 with its final counts read from the server
#          (batches=1 acked=100 ... pending=0). Then check: valid, lost=0, 802 rows, duplicated=0.
# Skipped (exit 77) only when OUTBOX_PG_URL is unset (the scenario runs where PostgreSQL runs);
# scripts/test.sh sets it.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

require_postgres
start_own_postgres "${OUTBOX_PG_STOP_PORT:-55435}"
use_postgres
start_broker

# _lost_lines N LOG: LOG holds N lines announcing a lost connection (one per loss: attempt 1).
_lost_lines() { _has_lines "$1" '^\[relay\] waiting: database connection lost .* reconnect attempt 1 in ' "$2"; }

# publish_and_ride_out NAME N: write N loans, start relay NAME (forever, batches of 200), wait for
# its batches, crash and restart the server, write one loan and wait for the relay's batch of it.
# Sets RELAY_PID and RELAY_LOG.
publish_and_ride_out() {
  local name=$1 n=$2
  run write "$n" --quiet
  expect_rc 0 "write $n"
  start_bg "$name" relay --batch-size 200 --idle-max 500ms
  RELAY_PID=$BG_PID RELAY_LOG=$BG_LOG
  wait_for 30 "$RELAY_PID" "$name's batches of $n rows" _has_lines $(((n + 199) / 200)) '^\[relay\] batch ' "$RELAY_LOG" ||
    die "$name did not publish the $n loans"
  pg_own crash
  wait_for 30 "$RELAY_PID" "$name's waiting line" _lost_lines 1 "$RELAY_LOG" ||
    die "$name printed no waiting line while the server was down"
  pg_own start >/dev/null || die "the crashed cluster did not start again"
  run write 1 --quiet
  expect_rc 0 "write 1 after the restart"
  wait_for 60 "$RELAY_PID" "$name's batch of the loan written after the restart" \
    _has_line '^\[relay\] batch .* claimed=1 acked=1 ' "$RELAY_LOG" ||
    die "$name did not publish the loan written after the restart"
}

# stop_relay NAME: SIGTERM relay NAME, wait for its exit (BG_RC), show its log.
stop_relay() {
  echo "\$ kill -TERM $RELAY_PID"
  kill -TERM "$RELAY_PID" || die "kill -TERM $RELAY_PID: no such process"
  wait_exit "$RELAY_PID" 30 "$1 after SIGTERM"
  sed 's/^/  | /' "$RELAY_LOG"
  expect_no_line '^outbox-lab: error: ' "$RELAY_LOG"
}

step "part 1: relay-a publishes 600 loans, rides out a server crash, publishes one more"
run reset
expect_rc 0 "reset"
publish_and_ride_out relay-a 600

step "SIGTERM relay-a: its final counts cover the batches before the reconnect"
stop_relay relay-a
expect_eq 0 "$BG_RC" "exit code of relay-a"
expect_line '^\[relay\] reconnected 1 times after a lost database connection$' "$RELAY_LOG"
expect_line '^\[relay\] stopped on signal: batches=4 acked=601 marked=601 failed=0 parked=0 fenced=0 pending=0$' "$RELAY_LOG"

step "part 2: relay-b publishes 100 loans, rides out a server crash, publishes one more"
publish_and_ride_out relay-b 100

step "crash the server again; SIGTERM relay-b while it waits to reconnect"
pg_own crash
wait_for 30 "$RELAY_PID" "relay-b's second waiting line" _lost_lines 2 "$RELAY_LOG" ||
  die "relay-b printed no waiting line after the second crash"
stop_relay relay-b
expect_eq 0 "$BG_RC" "exit code of relay-b stopped while the server is down"
expect_count 1 '^\[relay\] final counts unavailable: database server unreachable \(.+\)$' "$RELAY_LOG"
expect_line '^\[relay\] reconnected 1 times after a lost database connection$' "$RELAY_LOG"
expect_line '^\[relay\] stopped on signal: batches=2 acked=101 marked=101 failed=0 parked=0 fenced=0 pending=unknown$' "$RELAY_LOG"

step "part 3: restart the server; relay-c publishes 100 loans"
pg_own start >/dev/null || die "the crashed cluster did not start again"
run write 100 --quiet
expect_rc 0 "write 100"
start_bg relay-c relay --batch-size 200 --idle-max 500ms
RELAY_PID=$BG_PID RELAY_LOG=$BG_LOG
wait_for 30 "$RELAY_PID" "relay-c's batch" _has_line '^\[relay\] batch .* claimed=100 acked=100 ' "$RELAY_LOG" ||
  die "relay-c did not publish the 100 loans"

step "crash the server; freeze relay-c in its wait, restart the server, SIGTERM relay-c, let it go on"
pg_own crash
wait_for 30 "$RELAY_PID" "relay-c's waiting line" _lost_lines 1 "$RELAY_LOG" ||
  die "relay-c printed no waiting line while the server was down"
echo "\$ kill -STOP $RELAY_PID"
kill -STOP "$RELAY_PID" || die "kill -STOP $RELAY_PID: no such process"
pg_own start >/dev/null || die "the crashed cluster did not start again"
echo "\$ kill -TERM $RELAY_PID; kill -CONT $RELAY_PID"
kill -TERM "$RELAY_PID" || die "kill -TERM $RELAY_PID: no such process"
kill -CONT "$RELAY_PID" || die "kill -CONT $RELAY_PID: no such process"
wait_exit "$RELAY_PID" 30 "relay-c after SIGTERM"
sed 's/^/  | /' "$RELAY_LOG"
expect_eq 0 "$BG_RC" "exit code of relay-c stopped once the server is back"
expect_no_line '^outbox-lab: error: ' "$RELAY_LOG"
expect_no_line '^\[relay\] final counts unavailable' "$RELAY_LOG"
expect_line '^\[relay\] reconnected 1 times after a lost database connection$' "$RELAY_LOG"
expect_line '^\[relay\] stopped on signal: batches=1 acked=100 marked=100 failed=0 parked=0 fenced=0 pending=0$' "$RELAY_LOG"

step "nothing lost, nothing sent twice: every loan's event on the topic once"
expect_check "valid=1,lost=0,stuck=0,phantom=0,atomicity=0,ok=802,outbox_rows=802,business_rows=802,duplicated=0"

finish
