#!/usr/bin/env bash
# Chapter 7.1, "多 relay 抢同一行" — two production relays on one outbox.
# Injects: contention, no crash — two `relay --coordination claims --until-empty --batch-size 500`
#          processes (claims mode: the mode in which relays share the work; leader-two-relays.sh
#          is the default leader mode's version) started
#          together on the same database and topic, over 10,000 unpublished events.
# Expects: the claims (BEGIN IMMEDIATE + lease + fencing token, SQLite's stand-in for SKIP LOCKED)
#          split the backlog instead of doubling it: both relays exit 0 and mark something, their
#          claimed counts and their marked counts each sum to exactly 10,000, nothing failed or
#          was fenced; the topic holds exactly 10,000 records, 10,000 distinct event ids: check is
#          valid with 0 lost and 0 duplicated; status shows 10,000 published and 0 claimed.
# Each relay pauses after its first claim (failpoint relay.after_claim=1*pause->off), holding no
# lock; both are released only once both stand there, so both have a batch in flight at the same
# time — the overlap a broken claim would turn into double sends. Without it SQLite's busy handler
# (no lock queue: sleep, retry) can leave one relay waiting on BEGIN IMMEDIATE while the other
# drains nearly everything (splits of 9500/500 seen), which would make "both relays marked
# something" a matter of luck.
# The writes use --synchronous normal only to keep the setup short: a commit survives kill -9 at
# any setting, and nothing here is killed.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

EVENTS=10000

# sum_batches LOG FIELD: FIELD summed over the batch reports of a `relay --json` log.
sum_batches() {
  json_lines "$1" | jq -s "map(select(.report == \"batch\") | .$2) | add // 0"
}

start_broker

step "reset, then write $EVENTS loans with their outbox events"
run reset
expect_rc 0 "reset"
run --synchronous normal write "$EVENTS" --quiet
expect_rc 0 "write $EVENTS"
expect_line "^\[write\] committed=$EVENTS\$" "$OUT"

step "two relays at once on the same outbox"
echo "(OUTBOX_FAILPOINTS='relay.after_claim=1*pause->off')"
export OUTBOX_FAILPOINTS='relay.after_claim=1*pause->off'
start_bg relay-a relay --coordination claims --until-empty --batch-size 500 --owner relay-a --json
pid_a=$BG_PID log_a=$BG_LOG
start_bg relay-b relay --coordination claims --until-empty --batch-size 500 --owner relay-b --json
pid_b=$BG_PID log_b=$BG_LOG
unset OUTBOX_FAILPOINTS
wait_paused "$pid_a" "$log_a" relay.after_claim
wait_paused "$pid_b" "$log_b" relay.after_claim
run status --json
expect_rc 0 "status --json while both relays stand after their first claim"
expect_eq 1000 "$(jq -r .claimed "$OUT")" "rows claimed by the two paused relays (500 each, no overlap)"
release "$pid_a"
release "$pid_b"
wait_exit "$pid_a" 45 "relay-a"
rc_a=$BG_RC
wait_exit "$pid_b" 45 "relay-b"
rc_b=$BG_RC
for name in relay-a relay-b; do
  echo "--- $name"
  sed 's/^/  | /' "$TMP/$name.log"
done
expect_eq 0 "$rc_a" "exit code of relay-a"
expect_eq 0 "$rc_b" "exit code of relay-b"

step "each relay took its own share; together exactly the backlog"
total_claimed=0
total_marked=0
for log in "$log_a" "$log_b"; do
  name=$(basename "$log" .log)
  expect_json "$log" '.report == "final" and (.stopped | not) and .failed == 0 and .parked == 0 and .fenced == 0 and .pending == 0 and .marked == .acked' \
    "$name: final report"
  expect_no_line '^outbox-lab: error:' "$log"
  marked=$(relay_final "$log" marked)
  claimed=$(sum_batches "$log" claimed)
  echo "$name: claimed=$claimed marked=${marked:-?}"
  [ "${marked:-0}" -gt 0 ] || fail "$name marked nothing (marked=${marked:-no done line})"
  expect_eq "$claimed" "${marked:-?}" "$name: rows marked vs rows claimed"
  total_claimed=$((total_claimed + claimed))
  total_marked=$((total_marked + ${marked:-0}))
done
expect_eq "$EVENTS" "$total_claimed" "rows claimed by both relays together (a row claimed twice would exceed it)"
expect_eq "$EVENTS" "$total_marked" "rows marked by both relays together"

step "status: everything published, nothing left claimed"
run status --json
expect_rc 0 "status --json"
expect_json "$OUT" ".unpublished == 0 and .in_backoff == 0 and .parked == 0 and .claimed == 0 and .published == $EVENTS" \
  "status --json: all $EVENTS published, nothing unpublished, parked or claimed"

step "check: every event exactly once on the topic"
expect_check "valid=1,outbox_rows=$EVENTS,business_rows=$EVENTS,kafka_records=$EVENTS,ok=$EVENTS,duplicated=0,lost=0,phantom=0,atomicity=0,lost_after_mark=0,stuck=0"

finish
