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

# beside HOLDER HOLDER_MODE OTHER OTHER_MODE: HOLDER (HOLDER_MODE) pauses after its first page or
# claim, holding the lease or the claims; OTHER runs --once in OTHER_MODE beside it and must warn
# that HOLDER works in HOLDER_MODE; then HOLDER is released and must exit 0.
beside() {
  local holder=$1 holder_mode=$2 other=$3 other_mode=$4 pid log
  export OUTBOX_FAILPOINTS='relay.after_claim=1*pause->off'
  start_bg "$holder" relay --coordination "$holder_mode" --until-empty --owner "$holder"
  pid=$BG_PID log=$BG_LOG
  unset OUTBOX_FAILPOINTS
  wait_paused "$pid" "$log" relay.after_claim
  run relay --coordination "$other_mode" --once --owner "$other"
  expect_rc 0 "the $other_mode relay beside a $holder_mode relay"
  expect_line "^\[relay\] warning: $holder also works on this outbox with --coordination $holder_mode; the two modes do not fence each other" "$OUT"
  release "$pid"
  wait_exit "$pid" 30 "$holder" || fail "$holder did not exit"
  expect_eq 0 "$BG_RC" "$holder's exit code"
}

step "relay-a leads and pauses; a claims relay beside it warns"
beside relay-a leader relay-b claims

step "relay-c claims and pauses; a leader beside it warns"
run write 20 --quiet
expect_rc 0 "write 20 more"
beside relay-c claims relay-d leader

step "nothing is lost"
run relay --until-empty --quiet
expect_rc 0 "the final drain"
expect_check valid=1,lost=0,outbox_rows=40
finish
