#!/usr/bin/env bash
# Nothing silent (issue 15, section 3): every wait, stop and removal says so.
# Injects: a relay against a broker nobody listens on (127.0.0.1:1), stopped by SIGTERM;
#          `write` of 5 and of 21 loans (either side of the per-row limit, 20); `reset` of a
#          database with rows; SIGINT to the chapter's `publish` while it stands between the
#          broker's ack of its 2nd row and that row's mark (failpoint
#          relay.after_ack_before_mark=1*off->pause, released by SIGUSR1 after the SIGINT); a
#          relay holding a claim (claims mode; failpoint relay.after_claim=hold, lease 3s) while a second relay
#          polls every 50 ms.
# Expects: the relay names the broker outage, since when and the 5 rows waiting, at each try,
#          parks none of them past --max-attempts 2, and says it ended during the outage; write 5
#          prints 5 per-loan lines, write 21 none unless --verbose (then 21), both end with
#          `[write] committed=N`; reset says how many rows it removed (and nothing on an empty
#          database); publish interrupted by SIGINT marks the row in flight, prints one `marked`
#          line per marked row and its summary `[publish] stopped on signal: sent=2 marked=2
#          unpublished-left=3`, exits 0, and the database agrees (published=2); the second relay
#          says once, over dozens of polls, who holds how many rows and until when, then sends
#          them when the lease runs out.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

step "a relay whose broker nobody answers says it waits out the outage, and since when"
run reset
expect_rc 0 "reset"
run write 5 --quiet
expect_rc 0 "write 5 --quiet"
start_bg relay-dead relay --brokers 127.0.0.1:1 --delivery-timeout 500ms --lease 2s \
  --backoff-base 1s --max-attempts 2 --idle-max 50ms
dead_pid=$BG_PID dead_log=$BG_LOG
# Two failed tries: past --max-attempts 2 had they counted, yet nothing is parked.
wait_for 30 "$dead_pid" "two outage lines" _has_lines 2 '^\[relay\] broker outage since ' "$dead_log"
echo "\$ kill -TERM $dead_pid"
kill -TERM "$dead_pid"
wait_exit "$dead_pid" 20 "relay after SIGTERM"
sed 's/^/  | /' "$dead_log"
expect_eq 0 "$BG_RC" "the relay's exit code"
expect_line '^\[relay\] broker outage since 20[0-9-]+T[0-9:]+Z: (all brokers down \(_ALL_BROKERS_DOWN\)|transport failure: .* \(_TRANSPORT\)), 5 rows waiting; no attempt counted, none parked; next try in 1s$' "$dead_log"
expect_line '^\[relay\] stopped on signal: .* parked=0 fenced=0 pending=5$' "$dead_log"
expect_line '^\[relay\] ended during a broker outage since .*, 5 rows waiting: none parked; a relay sends them once the brokers answer$' "$dead_log"

start_broker

step "write prints a line per loan up to 20 loans, beyond that only when asked"
run reset
expect_rc 0 "reset of the 5 pending rows"
expect_line '^\[reset\] removed business_loan=5 outbox=5 \(published=0 unpublished=5\) archived=0$' "$OUT"
run reset
expect_rc 0 "reset of an empty database"
expect_no_line '^\[reset\] removed ' "$OUT"
run write 5
expect_rc 0 "write 5"
expect_count 5 '^\[write\] txn i=[0-9]+ loan=L-[0-9]+ event=evt-[0-9]+ committed$' "$OUT"
expect_line '^\[write\] committed=5$' "$OUT"
run write 21
expect_rc 0 "write 21"
expect_count 0 '^\[write\] txn ' "$OUT"
expect_line '^\[write\] committed=21$' "$OUT"
run write 21 --verbose
expect_rc 0 "write 21 --verbose"
expect_count 21 '^\[write\] txn ' "$OUT"
run write 3 --quiet
expect_count 0 '^\[write\] txn ' "$OUT"

step "reset of a database with rows says what it removed"
run reset
expect_rc 0 "reset of 50 loans"
expect_line '^\[reset\] removed business_loan=50 outbox=50 \(published=0 unpublished=50\) archived=0$' "$OUT"
expect_line '^\[reset\] schema ready db=' "$OUT"

step "Ctrl-C during publish: the row in flight is marked, then the summary line"
run write 5
expect_rc 0 "write 5"
echo "(OUTBOX_FAILPOINTS='relay.after_ack_before_mark=1*off->pause')"
export OUTBOX_FAILPOINTS='relay.after_ack_before_mark=1*off->pause'
start_bg publish publish 10
unset OUTBOX_FAILPOINTS
publish_pid=$BG_PID publish_log=$BG_LOG
wait_paused "$publish_pid" "$publish_log" relay.after_ack_before_mark
echo "\$ kill -INT $publish_pid"
kill -INT "$publish_pid" || fail "kill -INT $publish_pid: no such process"
release "$publish_pid"
wait_exit "$publish_pid" 30 "publish after SIGINT"
sed 's/^/  | /' "$publish_log"
expect_eq 0 "$BG_RC" "exit code of publish after SIGINT"
expect_count 2 '^\[publish\] outboxId=[12] key=evt-100[12] offset=[0-9]+ marked=[12]$' "$publish_log"
expect_line '^\[publish\] stopped on signal: sent=2 marked=2 unpublished-left=3$' "$publish_log"
expect_eq '[publish] stopped on signal: sent=2 marked=2 unpublished-left=3' "$(tail -n 1 "$publish_log")" "publish's last line"
# One `marked` line per row the database has as published.
expect_verify business=5,outbox=5,published=2,unpublished=3

step "a relay waiting on another relay's lease says once who holds how many rows until when"
run reset
expect_line '^\[reset\] removed business_loan=5 outbox=5 \(published=2 unpublished=3\) archived=0$' "$OUT"
run write 5 --quiet
echo "(OUTBOX_FAILPOINTS='relay.after_claim=hold')"
export OUTBOX_FAILPOINTS='relay.after_claim=hold'
start_hold relay-a relay --coordination claims --owner relay-a --lease 3s --delivery-timeout 1s
unset OUTBOX_FAILPOINTS
holder_pid=$HOLD_PID
start_bg relay-b relay --coordination claims --owner relay-b --idle-max 50ms --delivery-timeout 1s --lease 3s
waiter_pid=$BG_PID waiter_log=$BG_LOG
wait_for 30 "$waiter_pid" "relay-b's batch after relay-a's lease ran out" \
  _has_line '^\[relay\] batch .* marked=5 ' "$waiter_log"
echo "\$ kill -TERM $waiter_pid"
kill -TERM "$waiter_pid" || fail "kill -TERM $waiter_pid: no such process"
wait_exit "$waiter_pid" 30 "relay-b after SIGTERM"
sed 's/^/  | /' "$waiter_log"
expect_eq 0 "$BG_RC" "exit code of relay-b"
expect_count 1 '^\[relay\] waiting: ' "$waiter_log"
expect_line '^\[relay\] waiting: 5 rows claimed by relay-a until [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z \(in [^)]+\), when its lease runs out$' "$waiter_log"
kill9 "$holder_pid"
expect_verify business=5,outbox=5,published=5,unpublished=0

finish
