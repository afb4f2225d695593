#!/usr/bin/env bash
# Chapter 7.1, "多 relay 抢同一行" — two production relays on one outbox.
# Injects: contention, no crash — two `relay --until-empty --batch-size 500` processes started
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

# done_field LOG FIELD: FIELD of the relay's final `[relay] done: ...` line (empty if none).
done_field() {
  sed -n -E "s/^\[relay\] done: .*[ ]$2=([0-9]+)( .*)?\$/\1/p" "$1" | tail -n 1
}

# sum_batches LOG FIELD: FIELD summed over the relay's `[relay] batch ...` lines.
sum_batches() {
  sed -n -E "s/^\[relay\] batch .*[ ]$2=([0-9]+)( .*)?\$/\1/p" "$1" | awk '{ s += $1 } END { print s + 0 }'
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
start_bg relay-a relay --until-empty --batch-size 500 --owner relay-a
pid_a=$BG_PID log_a=$BG_LOG
start_bg relay-b relay --until-empty --batch-size 500 --owner relay-b
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
  expect_line '^\[relay\] done: batches=[0-9]+ acked=[0-9]+ marked=[0-9]+ failed=0 parked=0 fenced=0 pending=0$' "$log"
  expect_no_line '^outbox-lab: error:' "$log"
  marked=$(done_field "$log" marked)
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
python3 - "$OUT" "$EVENTS" <<'PY' || fail "status --json is not published=$EVENTS with nothing unpublished, parked or claimed"
import json, sys
s = json.load(open(sys.argv[1]))
want = {"unpublished": 0, "in_backoff": 0, "parked": 0, "claimed": 0, "published": int(sys.argv[2])}
bad = {k: s[k] for k in want if s[k] != want[k]}
print("status:", "ok" if not bad else f"WRONG {bad}, expected {want}")
sys.exit(1 if bad else 0)
PY

step "check: every event exactly once on the topic"
run check --json
expect_rc 0 "check --json"
python3 - "$OUT" "$EVENTS" <<'PY' || fail "check --json: not $EVENTS events each exactly once"
import json, sys
r = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
problems = []
if not r["valid"]: problems.append("not valid")
for key, want in (("outbox_rows", n), ("business_rows", n), ("kafka_records", n), ("ok", n)):
    if r[key] != want: problems.append(f"{key}={r[key]} (expected {want})")
for key in ("lost", "phantom", "atomicity", "lost_after_mark", "stuck"):
    if r[key]: problems.append(f"{key}: {len(r[key])} e.g. {r[key][:3]}")
if r["duplicated"]:
    problems.append(f"duplicated: {len(r['duplicated'])} e.g. {list(r['duplicated'].items())[:3]}")
print("check:", "; ".join(problems) if problems else
      f"valid, {n} records, {n} distinct events, 0 lost, 0 duplicated")
sys.exit(1 if problems else 0)
PY

finish
