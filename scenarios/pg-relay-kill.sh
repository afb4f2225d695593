#!/usr/bin/env bash
# Issue 12, crash kinds on PostgreSQL: kill -9 of one relay of three, mid-batch.
# Injects: three `relay --until-empty --batch-size 500` processes on one PostgreSQL outbox (a schema
#          of its own); relay-a stands after its first batch's acks and before its mark
#          (relay.after_ack_before_mark=1*pause->off) and is killed with kill -9 there, while
#          relay-b and relay-c stand after their first claim (relay.after_claim=1*pause->off)
#          and are then released.
# Expects: the two survivors finish the backlog, relay-a's 500 rows included once its lease (3 s,
#          the server's clock) ran out: each survivor marked a share, they marked 3,000 rows
#          together, nothing is lost (check valid, lost=0, stuck=0), and the killed batch's 500
#          acknowledged sends are the only duplicates (at-least-once).
# Skipped (exit 77) only when OUTBOX_PG_URL is unset; scripts/test.sh sets it.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

EVENTS=3000
RELAY_ARGS=(relay --until-empty --batch-size 500 --pipeline 1 --delivery-timeout 2s --lease 3s --idle-max 200ms --json)

use_postgres
start_broker

step "reset, write $EVENTS loans with their outbox events"
run reset
expect_rc 0 "reset"
run write "$EVENTS" --quiet
expect_rc 0 "write $EVENTS"

step "three relays: relay-a stands between acks and mark, relay-b and relay-c after a claim"
echo "(relay-a: OUTBOX_FAILPOINTS='relay.after_ack_before_mark=1*pause->off')"
OUTBOX_FAILPOINTS='relay.after_ack_before_mark=1*pause->off' start_bg relay-a "${RELAY_ARGS[@]}" --owner relay-a
pid_a=$BG_PID log_a=$BG_LOG
wait_paused "$pid_a" "$log_a" relay.after_ack_before_mark
echo "(relay-b, relay-c: OUTBOX_FAILPOINTS='relay.after_claim=1*pause->off')"
OUTBOX_FAILPOINTS='relay.after_claim=1*pause->off' start_bg relay-b "${RELAY_ARGS[@]}" --owner relay-b
pid_b=$BG_PID log_b=$BG_LOG
OUTBOX_FAILPOINTS='relay.after_claim=1*pause->off' start_bg relay-c "${RELAY_ARGS[@]}" --owner relay-c
pid_c=$BG_PID log_c=$BG_LOG
wait_paused "$pid_b" "$log_b" relay.after_claim
wait_paused "$pid_c" "$log_c" relay.after_claim
run status --json
expect_rc 0 "status --json with three batches claimed"
expect_eq 1500 "$(jq -r .claimed "$OUT")" "rows claimed by the three relays (500 each, no overlap)"

step "kill -9 relay-a mid-batch; the others go on"
kill9 "$pid_a"
release "$pid_b"
release "$pid_c"
total_marked=0
for name in relay-b relay-c; do
  pid_var=pid_${name#relay-} log_var=log_${name#relay-}
  wait_exit "${!pid_var}" 60 "$name"
  expect_eq 0 "$BG_RC" "exit code of $name"
  log=${!log_var}
  # Not .pending == 0: a survivor may end while the other holds the dead relay's rows locked in
  # its claim transaction (SKIP LOCKED hides them, their old lease has run out, so nothing is
  # left for this relay to wait on); the status and check below prove every row published.
  expect_json "$log" '.report == "final" and (.stopped | not) and .failed == 0 and .fenced == 0' "$name: final report"
  marked=$(relay_final "$log" marked)
  echo "$name: marked=${marked:-?} batches=$(relay_final "$log" batches)"
  [ "${marked:-0}" -gt 0 ] || fail "$name marked nothing"
  total_marked=$((total_marked + ${marked:-0}))
done
expect_eq "$EVENTS" "$total_marked" "rows marked by the two survivors together (relay-a marked none)"

step "nothing lost; relay-a's acknowledged batch is the only duplicate"
run status --json
expect_rc 0 "status --json"
expect_json "$OUT" ".unpublished == 0 and .claimed == 0 and .published == $EVENTS" "status: all $EVENTS published"
expect_check "valid=1,lost=0,stuck=0,phantom=0,atomicity=0,ok=$EVENTS,outbox_rows=$EVENTS,business_rows=$EVENTS,duplicated=500"

finish
