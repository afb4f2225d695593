#!/usr/bin/env bash
# `reset` from another process while relays and writers run on the same SQLite outbox (the twin
# of pg-relay-reset.sh). The new outbox gives ids from 1 again, so a settle of rows read before
# the reset names ids of new rows.
# Injects: (1) claims mode: relay-a stands between the acks and the mark of its first batch of the
#          old outbox (relay.after_ack_before_mark=1*pause->off) while `reset` recreates the
#          outbox and 300 new loans are written; relay-b claims 200 of them and stands there
#          (relay.after_claim=1*pause->off); relay-a is let go, so its late settle names ids
#          relay-b holds; relay-b is then killed with kill -9 before it sends anything.
#          (2) leader mode, and (3) leader mode with --overlap-mark --pipeline 2: the leader
#          relay-c stands before the mark of its first page, the same way; after the reset and
#          the new loans a second leader, relay-d, takes the term the reset ended and stands with
#          its first page of the new outbox read (relay.after_claim); relay-c is let go, then
#          relay-d is killed with kill -9.
#          (4) writers: a `write` that stands between two of its transactions
#          (write.after_commit=100*off->1*pause->off) across a reset, and a `write` running
#          flat out that a reset meets mid-way, with a claims relay running throughout.
# Expects: every late settle marks nothing (claims: fenced=200, relay-b's rows still claimed;
#          leader: its pages fenced out, nothing published): a row marked without being sent would
#          be `lost` by `check` once relay-b or relay-d is gone. Every relay lives through the reset
#          (no error line; 0 on SIGTERM) and sends every row of the new run; each `write` ends with
#          0, its loans after the reset in the new tables with their events (check: atomicity=0).
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

OLD=1000
NEW=300
COMMON=(--batch-size 200 --delivery-timeout 2s --idle-max 200ms --json)
# The relay that stands with the new outbox's rows read: a lease of 10 s, so the other relay
# cannot take its rows (or its term) over while the assertions below look at them.
HOLDER=(--batch-size 200 --pipeline 1 --delivery-timeout 2s --lease 10s --idle-max 200ms --json)

start_broker

step "claims: a settle of the old outbox's batch after a reset marks nothing of the new one"
run reset
expect_rc 0 "reset"
run write "$OLD" --quiet
expect_rc 0 "write $OLD"
OUTBOX_FAILPOINTS='relay.after_ack_before_mark=1*pause->off' \
  start_bg relay-a relay --coordination claims "${COMMON[@]}" --pipeline 1 --lease 3s \
  --owner relay-a
pid_a=$BG_PID log_a=$BG_LOG
wait_paused "$pid_a" "$log_a" relay.after_ack_before_mark
run reset
expect_rc 0 "reset while relay-a stands before its mark"
expect_line '^\[reset\] removed business_loan=1000 outbox=1000 ' "$OUT"
run write "$NEW" --quiet
expect_rc 0 "write $NEW after the reset"
OUTBOX_FAILPOINTS='relay.after_claim=1*pause->off' \
  start_bg relay-b relay --coordination claims "${HOLDER[@]}" --owner relay-b
pid_b=$BG_PID log_b=$BG_LOG
wait_paused "$pid_b" "$log_b" relay.after_claim
run status --json
expect_json "$OUT" '.claimed == 200 and .published == 0' "status: relay-b holds 200 new rows"
release "$pid_a"
wait_for 30 "$pid_a" "relay-a's late settle" _has_line '"report":"batch"' "$log_a"
expect_first_batch "$log_a" \
  '.claimed == 200 and .acked == 200 and .marked == 0 and .fenced == 200' \
  "relay-a's late settle: its 200 acks fenced, nothing of the new outbox marked"
# relay-a goes on with the 100 rows nobody claimed: only relay-b's rows are looked at.
run status --json
expect_json "$OUT" '.claims | map(select(.owner == "relay-b") | .rows) == [200]' \
  "status after relay-a's late settle: relay-b's 200 rows still claimed, unpublished"
kill9 "$pid_b"
wait_published "$pid_a" "$NEW"
expect_check "valid=1,lost=0,stuck=0,phantom=0,atomicity=0,ok=$NEW,outbox_rows=$NEW,duplicated=0"
expect_tokens_above "$log_a"
expect_line '^\{"report":"reset","previous_run":"[0-9a-f-]+","run":"[0-9a-f-]+",' "$log_a"
expect_no_error "$log_a"
term_relay "$pid_a" relay-a

for variant in leader overlap-mark; do
  # fenced: the rows of relay-c's pages of the old outbox, one page, or two with --pipeline 2
  # (the second was read and sent while the first waited for its acks).
  extra=(--pipeline 1) fenced=200
  [ "$variant" = overlap-mark ] && extra=(--pipeline 2 --overlap-mark) fenced=400
  step "$variant: a leader's settle of an old page after a reset is fenced out; a new term goes on"
  run reset
  expect_rc 0 "reset"
  run write "$OLD" --quiet
  expect_rc 0 "write $OLD"
  OUTBOX_FAILPOINTS='relay.after_ack_before_mark=1*pause->off' \
    start_bg relay-c relay --coordination leader "${COMMON[@]}" --lease 3s "${extra[@]}" \
    --owner relay-c
  pid_c=$BG_PID log_c=$BG_LOG
  wait_paused "$pid_c" "$log_c" relay.after_ack_before_mark
  run reset
  expect_rc 0 "reset while the leader stands before its mark"
  run write "$NEW" --quiet
  expect_rc 0 "write $NEW after the reset"
  OUTBOX_FAILPOINTS='relay.after_claim=1*pause->off' \
    start_bg relay-d relay --coordination leader "${HOLDER[@]}" --owner relay-d
  pid_d=$BG_PID log_d=$BG_LOG
  wait_paused "$pid_d" "$log_d" relay.after_claim
  expect_line \
    '^\{"report":"lease","event":"acquired","owner":"relay-d",.*"previous_owner":"\(reset\)"' \
    "$log_d"
  release "$pid_c"
  wait_for 30 "$pid_c" "relay-c's late settle" _has_line '"report":"batch"' "$log_c"
  expect_first_batch "$log_c" '.claimed == 200 and .marked == 0 and .fenced == 200' \
    "relay-c's late settle: fenced out, nothing of the new outbox marked"
  # The first fenced settle ends relay-c's term (the line before its batch line).
  expect_line '^\{"report":"lease","event":"lost","owner":"relay-c",' "$log_c"
  run status --json
  expect_json "$OUT" '.published == 0' "status after relay-c's late settles: no new row published"
  kill9 "$pid_d"
  wait_published "$pid_c" "$NEW"
  expect_check "valid=1,lost=0,stuck=0,phantom=0,atomicity=0,ok=$NEW,outbox_rows=$NEW,duplicated=0"
  json_lines "$log_c" | jq -e -s '[.[] | select(.report == "batch" and .marked == 0)] | length > 0
      and all(.fenced == .claimed)' >/dev/null ||
    fail "relay-c: a batch that marked nothing was not wholly fenced"
  expect_line '^\{"report":"reset",' "$log_c"
  expect_no_error "$log_c"
  term_relay "$pid_c" relay-c
  expect_eq "$fenced" "$(relay_final "$log_c" fenced)" "rows relay-c's late settles fenced"
done

step "writers: a write paused between its transactions across a reset goes on in the new tables"
run reset
expect_rc 0 "reset"
start_bg relay-w relay --coordination claims "${COMMON[@]}" --pipeline 1 --lease 3s --owner relay-w
pid_w=$BG_PID log_w=$BG_LOG
OUTBOX_FAILPOINTS='write.after_commit=100*off->1*pause->off' start_bg writer write 500
pid_writer=$BG_PID log_writer=$BG_LOG
wait_paused "$pid_writer" "$log_writer" write.after_commit
run reset
expect_rc 0 "reset while the writer stands after its 101st commit"
expect_line '^\[reset\] removed business_loan=101 outbox=101 ' "$OUT"
release "$pid_writer"
wait_exit "$pid_writer" 60 "the writer"
expect_eq 0 "$BG_RC" "exit code of the write across the reset"
expect_line '^\[write\] committed=500$' "$log_writer"
wait_published "$pid_w" 399
expect_check "valid=1,lost=0,stuck=0,phantom=0,atomicity=0,ok=399,outbox_rows=399,business_rows=399"

step "writers: a reset meets a write running flat out; every loan after it keeps its event"
run reset
expect_rc 0 "reset"
start_bg writer write 10000
pid_writer=$BG_PID log_writer=$BG_LOG
wait_for 60 "$pid_writer" "1,000 loans written" status_is '.unpublished + .published >= 1000'
run reset
expect_rc 0 "reset while the writer writes"
removed=$(sed -n 's/^\[reset\] removed business_loan=\([0-9]*\) outbox=\([0-9]*\) .*/\1 \2/p' \
  "$OUT")
read -r removed_loans removed_rows <<<"$removed"
expect_eq "$removed_loans" "$removed_rows" "loans and outbox rows the reset removed (in one txn)"
wait_exit "$pid_writer" 60 "the writer"
expect_eq 0 "$BG_RC" "exit code of the write the reset met"
expect_line '^\[write\] committed=10000$' "$log_writer"
new_rows=$((10000 - ${removed_rows:-0}))
[ "${removed_rows:-0}" -ge 1000 ] && [ "$new_rows" -gt 0 ] ||
  fail "the reset did not fall mid-write (it removed ${removed_rows:-no} rows of 10000)"
wait_published "$pid_w" "$new_rows"
expect_check "valid=1,lost=0,stuck=0,phantom=0,atomicity=0,ok=$new_rows,outbox_rows=$new_rows,\
business_rows=$new_rows"
expect_no_error "$log_w"
term_relay "$pid_w" relay-w

finish
