#!/usr/bin/env bash
# `reset` from another process while relays run on the same PostgreSQL outbox (a schema of its own).
# Injects: (1) claims mode: relay-a stands between the acks and the mark of its first batch of the
#          old outbox (relay.after_ack_before_mark=1*pause->off) while `reset` recreates the
#          schema and 300 new loans are written (their ids start again at 1); relay-b claims 200
#          of them and stands there (relay.after_claim=1*pause->off); relay-a is let go, so its
#          late settle names ids relay-b holds; relay-b is then killed with kill -9 before it
#          sends anything.
#          (2) leader mode: a leader's late settle of a page of the old outbox, the same way.
#          (3) both modes: `reset` while the relay's statement waits behind the reset's DROP (a psql
#          session holds ACCESS SHARE on outbox, so the DROP queues, and the idle relay's next
#          poll queues behind it); the holder then commits.
# Expects: no relay dies (each ends with 0 on SIGTERM); every late settle marks nothing (claims:
#          fenced=200; leader: fenced out, then a new term after the reset's); every row written
#          after the reset is published, none lost (relay-b's claimed rows are sent by relay-a once
#          b's 10 s lease ran out: a row marked without being sent would be `lost` here), and no
#          duplicate in the new run.
# Skipped (exit 77) only when OUTBOX_PG_URL is unset; scripts/test.sh sets it.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

OLD=1000
NEW=300
COMMON=(--batch-size 200 --pipeline 1 --delivery-timeout 2s --lease 3s --idle-max 200ms --json)

use_postgres
start_broker

# count_sql SQL: one number from this scenario's schema.
count_sql() { psql "$DB" -qAtc "$1"; }

step "claims: a settle of the old outbox's batch after a reset marks nothing of the new one"
run reset
expect_rc 0 "reset"
run write "$OLD" --quiet
expect_rc 0 "write $OLD"
OUTBOX_FAILPOINTS='relay.after_ack_before_mark=1*pause->off' start_bg relay-a relay --coordination claims "${COMMON[@]}" --owner relay-a
pid_a=$BG_PID log_a=$BG_LOG
wait_paused "$pid_a" "$log_a" relay.after_ack_before_mark
run reset
expect_rc 0 "reset while relay-a stands before its mark"
expect_line '^\[reset\] removed .* outbox=1000 ' "$OUT"
run write "$NEW" --quiet
expect_rc 0 "write $NEW after the reset"
# A lease of 10 s: relay-a cannot take relay-b's rows over while the assertions below look at them.
OUTBOX_FAILPOINTS='relay.after_claim=1*pause->off' start_bg relay-b relay --coordination claims --batch-size 200 --pipeline 1 --delivery-timeout 2s --lease 10s --idle-max 200ms --json --owner relay-b
pid_b=$BG_PID log_b=$BG_LOG
wait_paused "$pid_b" "$log_b" relay.after_claim
run status --json
expect_json "$OUT" '.claimed == 200 and .published == 0' "status: relay-b holds 200 new rows, none published"
release "$pid_a"
wait_for 30 "$pid_a" "relay-a's late settle" _has_line '"report":"batch"' "$log_a"
expect_first_batch "$log_a" '.claimed == 200 and .acked == 200 and .marked == 0 and .fenced == 200' \
  "relay-a's late settle: its 200 acks fenced, nothing of the new outbox marked"
expect_eq 200 "$(count_sql "SELECT count(*) FROM outbox WHERE claim_owner = 'relay-b' AND NOT published")" \
  "relay-b's claimed rows after relay-a's late settle: still relay-b's, unpublished"
kill9 "$pid_b"
wait_published "$pid_a" "$NEW"
expect_check "valid=1,lost=0,stuck=0,phantom=0,ok=$NEW,outbox_rows=$NEW,duplicated=0"
expect_tokens_above "$log_a"
expect_line '^\{"report":"reset","previous_run":"[0-9a-f-]+","run":"[0-9a-f-]+","dropped":[0-9]+\}$' "$log_a"
expect_no_error "$log_a"
term_relay "$pid_a" relay-a

step "leader: a leader's settle of an old page after a reset is fenced out; a new term goes on"
run reset
expect_rc 0 "reset"
run write "$OLD" --quiet
expect_rc 0 "write $OLD"
OUTBOX_FAILPOINTS='relay.after_ack_before_mark=1*pause->off' start_bg relay-c relay --coordination leader "${COMMON[@]}" --owner relay-c
pid_c=$BG_PID log_c=$BG_LOG
wait_paused "$pid_c" "$log_c" relay.after_ack_before_mark
run reset
expect_rc 0 "reset while the leader stands before its mark"
run write "$NEW" --quiet
expect_rc 0 "write $NEW after the reset"
release "$pid_c"
wait_for 30 "$pid_c" "relay-c's late settle" _has_line '"report":"batch"' "$log_c"
expect_first_batch "$log_c" '.claimed == 200 and .marked == 0 and .fenced == 200' \
  "relay-c's late settle: fenced out, nothing of the new outbox marked"
wait_published "$pid_c" "$NEW"
expect_line '^\{"report":"lease","event":"lost","owner":"relay-c",' "$log_c"
expect_line '^\{"report":"lease","event":"acquired","owner":"relay-c","token":[0-9]+,.*"previous_owner":"\(reset\)"' "$log_c"
expect_check "valid=1,lost=0,stuck=0,phantom=0,ok=$NEW,outbox_rows=$NEW,duplicated=0"
expect_line '^\{"report":"reset",' "$log_c"
expect_no_error "$log_c"
term_relay "$pid_c" relay-c

# _lock_waiters N: at least N sessions wait for a lock on this schema's outbox.
_lock_waiters() {
  [ "$(count_sql "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'outbox'::regclass")" -ge "$1" ]
}

for mode in claims leader; do
  step "$mode: reset while the relay's statement waits behind the reset's DROP"
  run reset
  expect_rc 0 "reset"
  run write "$NEW" --quiet
  expect_rc 0 "write $NEW"
  start_bg "relay-$mode" relay --coordination "$mode" "${COMMON[@]}" --owner "relay-$mode"
  pid_r=$BG_PID log_r=$BG_LOG
  wait_published "$pid_r" "$NEW"
  # A session that holds ACCESS SHARE on outbox until told: the reset's DROP waits for it.
  mkfifo "$TMP/holder-$mode.in"
  psql "$DB" -qAt <"$TMP/holder-$mode.in" >"$TMP/holder-$mode.out" 2>&1 &
  holder=$!
  PIDS+=("$holder")
  exec 7>"$TMP/holder-$mode.in"
  echo "BEGIN; LOCK TABLE outbox IN ACCESS SHARE MODE; SELECT 'locked';" >&7
  wait_for 30 "$holder" "the lock holder's line" _has_line '^locked$' "$TMP/holder-$mode.out"
  start_bg "reset-$mode" reset
  pid_reset=$BG_PID log_reset=$BG_LOG
  wait_for 30 "$pid_reset" "the reset's DROP waiting" _lock_waiters 1
  wait_for 30 "$pid_r" "the relay's poll waiting behind the DROP" _lock_waiters 2
  echo "(the reset's DROP waits for the lock holder, the relay's poll for the DROP)"
  kill -0 "$pid_r" 2>/dev/null || fail "relay-$mode ended while its poll waited"
  echo "COMMIT;" >&7
  exec 7>&-
  wait_exit "$pid_reset" 30 "reset"
  expect_eq 0 "$BG_RC" "exit code of the reset"
  expect_line '^\[reset\] removed .* outbox=300 ' "$log_reset"
  wait_exit "$holder" 10 "the lock holder"
  run write "$NEW" --quiet
  expect_rc 0 "write $NEW after the reset"
  wait_published "$pid_r" "$NEW"
  expect_check "valid=1,lost=0,stuck=0,phantom=0,ok=$NEW,outbox_rows=$NEW,duplicated=0"
  expect_line '^\{"report":"reset",' "$log_r"
  expect_no_error "$log_r"
  term_relay "$pid_r" "relay-$mode"
done

finish
