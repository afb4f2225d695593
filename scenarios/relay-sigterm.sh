#!/usr/bin/env bash
# Graceful stop of the production relay: SIGTERM in the middle of a backlog.
# Injects: `kill -TERM` to `relay --batch-size 1000` (forever mode) over 20,000 unpublished events,
#          while its second batch is paused between the broker's acks and its mark (failpoint
#          relay.after_ack_before_mark=1*off->1*pause->off; released by SIGUSR1 after the
#          SIGTERM), so the signal lands in exactly that acked-but-unmarked window, the one
#          kill -9 turns into duplicates.
# Expects: the relay finishes the batch in flight, marks what was acked and exits 0 with a last
#          line `[relay] stopped on signal: batches=2 ...`, leaving part of the backlog pending; nothing
#          stays claimed (status claimed=0); every marked row is in Kafka (lost-after-mark 0) and
#          every record in Kafka belongs to a marked row, exactly once: records = distinct ids =
#          published = the relay's marked count. A second `relay --until-empty` drains the rest:
#          check valid, 20,000 records, 0 duplicated — a graceful stop costs no duplicate.
# The writes use --synchronous normal only to keep the setup short.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

EVENTS=20000
BATCH=1000

start_broker

step "reset, then write $EVENTS loans with their outbox events"
run reset
expect_rc 0 "reset"
run --synchronous normal write "$EVENTS" --quiet
expect_rc 0 "write $EVENTS"

step "a relay in forever mode; SIGTERM while batch 2 is acked and not yet marked"
echo "(OUTBOX_FAILPOINTS='relay.after_ack_before_mark=1*off->1*pause->off')"
export OUTBOX_FAILPOINTS='relay.after_ack_before_mark=1*off->1*pause->off'
start_bg relay relay --batch-size "$BATCH"
unset OUTBOX_FAILPOINTS
relay_pid=$BG_PID relay_log=$BG_LOG
wait_paused "$relay_pid" "$relay_log" relay.after_ack_before_mark
echo "\$ kill -TERM $relay_pid"
kill -TERM "$relay_pid" || fail "kill -TERM $relay_pid: no such process"
release "$relay_pid"
wait_exit "$relay_pid" 30 "relay after SIGTERM"
sed 's/^/  | /' "$relay_log"
expect_eq 0 "$BG_RC" "exit code of the relay after SIGTERM"
last=$(tail -n 1 "$relay_log")
case "$last" in
  '[relay] stopped on signal: '*) ;;
  *) fail "last line of the relay is '$last', not '[relay] stopped on signal: ...'" ;;
esac
expect_no_line '^outbox-lab: error:' "$relay_log"
marked=$(sed -n -E 's/^\[relay\] stopped on signal: .* marked=([0-9]+) .*$/\1/p' "$relay_log")
acked=$(sed -n -E 's/^\[relay\] stopped on signal: .* acked=([0-9]+) .*$/\1/p' "$relay_log")
pending=$(sed -n -E 's/^\[relay\] stopped on signal: .* pending=([0-9]+)$/\1/p' "$relay_log")
batches=$(sed -n -E 's/^\[relay\] stopped on signal: batches=([0-9]+) .*$/\1/p' "$relay_log")
echo "stopped relay: batches=${batches:-?} acked=${acked:-?} marked=${marked:-?} pending=${pending:-?}"
# The signal came while batch 2 stood acked and unmarked: batch 2 is finished and counted, and
# no batch 3 starts.
expect_eq 2 "${batches:-?}" "batches of the relay stopped during batch 2"
expect_count "${batches:-0}" '^\[relay\] batch token=[0-9]+ claimed=1000 acked=1000 failed=0 marked=1000 ' "$relay_log"
expect_eq "${acked:-?}" "${marked:-?}" "rows marked vs rows acked by the stopped relay"
[ "${pending:-0}" -gt 0 ] ||
  fail "the relay drained everything before the signal (pending=${pending:-?}): the stop interrupted nothing"
expect_eq "$((EVENTS - ${marked:-0}))" "${pending:-?}" "pending after the stop"

step "after the stop: nothing claimed; Kafka holds exactly the marked rows"
run status --json
expect_rc 0 "status --json"
python3 - "$OUT" "${marked:-0}" "$EVENTS" <<'PY' || fail "status after the stop: claims left, or published differs from the relay's marked count"
import json, sys
s = json.load(open(sys.argv[1]))
marked, events = int(sys.argv[2]), int(sys.argv[3])
ok = (s["claimed"] == 0 and s["published"] == marked and s["unpublished"] == events - marked
      and s["parked"] == 0 and s["in_backoff"] == 0)
print("status:", "ok" if ok else "WRONG", s)
sys.exit(0 if ok else 1)
PY
run check --json
expect_rc 1 "check --json after the stop (the rest is still unpublished: invalid for now)"
python3 - "$OUT" "${marked:-0}" "$EVENTS" <<'PY' || fail "after a graceful stop, Kafka is not exactly the marked rows once each"
import json, sys
r = json.load(open(sys.argv[1]))
marked, events = int(sys.argv[2]), int(sys.argv[3])
problems = []
# ok counts outbox events present in Kafka: with every marked row present (lost_after_mark empty)
# and ok == marked, no unmarked row has a record.
for key, want in (("kafka_records", marked), ("ok", marked)):
    if r[key] != want: problems.append(f"{key}={r[key]} (expected {marked}, the marked rows)")
if len(r["stuck"]) != events - marked: problems.append(f"{len(r['stuck'])} unmarked rows, expected {events - marked}")
if r["stuck"] != r["lost"]: problems.append("an unmarked row has a record in Kafka (acked but not marked)")
for key in ("lost_after_mark", "phantom", "atomicity"):
    if r[key]: problems.append(f"{key}: {len(r[key])} e.g. {r[key][:3]}")
if r["duplicated"]: problems.append(f"duplicated: {len(r['duplicated'])}")
print("check:", "; ".join(problems) if problems else
      f"{marked} records = {marked} distinct ids = {marked} marked rows; {events - marked} rows untouched")
sys.exit(1 if problems else 0)
PY

step "a second relay drains the rest"
run relay --until-empty --batch-size "$BATCH"
expect_rc 0 "relay --until-empty"
expect_line "^\[relay\] done: batches=[0-9]+ acked=$((EVENTS - ${marked:-0})) marked=$((EVENTS - ${marked:-0})) failed=0 parked=0 fenced=0 pending=0\$" "$OUT"
run check --json
expect_rc 0 "check --json"
python3 - "$OUT" "$EVENTS" <<'PY' || fail "check --json after the drain: not every event exactly once"
import json, sys
r = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
problems = []
if not r["valid"]: problems.append("not valid")
for key, want in (("outbox_rows", n), ("ok", n), ("kafka_records", n)):
    if r[key] != want: problems.append(f"{key}={r[key]} (expected {want})")
for key in ("lost", "phantom", "atomicity", "lost_after_mark", "stuck"):
    if r[key]: problems.append(f"{key}: {len(r[key])} e.g. {r[key][:3]}")
if r["duplicated"]: problems.append(f"duplicated: {len(r['duplicated'])}")
print("check:", "; ".join(problems) if problems else f"valid, {n} records, 0 duplicated")
sys.exit(1 if problems else 0)
PY

finish
