#!/usr/bin/env bash
# A leader-mode and a claims-mode relay on one outbox: the modes do not fence each other, so
# each relay says so once at its start.
# Injects: no crash — 20 loans; relay-a (leader) pauses after its first page (failpoint
#          relay.after_claim=1*pause->off) holding the lease, and a claims relay runs --once
#          beside it; then relay-c (claims) pauses after its first claim holding 20 rows, and a
#          leader runs --once beside it.
# Expects: the claims relay's first line warns that relay-a works with --coordination leader;
#          the leader's warns that relay-c works with --coordination claims; both exit 0, the
#          relays released end 0, and check is valid (duplicates allowed: at-least-once).
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

start_broker
run reset
expect_rc 0 "reset"
run write 20 --quiet
expect_rc 0 "write 20"

step "relay-a leads and pauses; a claims relay beside it warns"
export OUTBOX_FAILPOINTS='relay.after_claim=1*pause->off'
start_bg relay-a relay --coordination leader --until-empty --owner relay-a
pid_a=$BG_PID log_a=$BG_LOG
unset OUTBOX_FAILPOINTS
wait_paused "$pid_a" "$log_a" relay.after_claim
run relay --coordination claims --once --owner relay-b
expect_rc 0 "the claims relay beside a leader"
expect_line '^\[relay\] warning: relay-a also works on this outbox with --coordination leader; the two modes do not fence each other' "$OUT"
release "$pid_a"
wait_exit "$pid_a" 30 "relay-a" || fail "relay-a did not exit"
expect_eq 0 "$BG_RC" "relay-a's exit code"

step "relay-c claims and pauses; a leader beside it warns"
run write 20 --quiet
expect_rc 0 "write 20 more"
export OUTBOX_FAILPOINTS='relay.after_claim=1*pause->off'
start_bg relay-c relay --coordination claims --until-empty --owner relay-c
pid_c=$BG_PID log_c=$BG_LOG
unset OUTBOX_FAILPOINTS
wait_paused "$pid_c" "$log_c" relay.after_claim
run relay --coordination leader --once --owner relay-d
expect_rc 0 "the leader beside a claims relay"
expect_line '^\[relay\] warning: relay-c also works on this outbox with --coordination claims; the two modes do not fence each other' "$OUT"
release "$pid_c"
wait_exit "$pid_c" 30 "relay-c" || fail "relay-c did not exit"
expect_eq 0 "$BG_RC" "relay-c's exit code"

step "nothing is lost"
run relay --until-empty --quiet
expect_rc 0 "the final drain"
expect_check valid=1,lost=0,outbox_rows=40
finish
