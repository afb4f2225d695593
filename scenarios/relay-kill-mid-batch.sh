#!/usr/bin/env bash
# Chapter 7.1, "发送后、标记前" — the production relay killed between the broker's acks and the mark.
# Injects: kill -9 of `relay --until-empty --batch-size 500` held by the failpoint
#          relay.after_ack_before_mark=2*off->hold, i.e. in its third batch (rows 1001..1500,
#          evt-2001..evt-2500), after all 500 records were acknowledged and before the batch's
#          one settle transaction.
# Expects: at the kill, 1,000 rows marked published and 1,500 records on the topic: the held
#          batch is in Kafka but not marked. Its claim survives the kill; once the lease has run
#          out, a restarted `relay --until-empty` claims those rows again and re-sends them with
#          the rest. Final: check valid, 0 lost, 3,500 records, exactly the 500 held events
#          duplicated (x2 each) — one batch, never more (at-least-once, chapter's decision 3).
# The killed relay runs with --send-timeout 2s --lease 3s (instead of 10s/30s) only so the
# restart does not wait 30 s for the dead relay's lease.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

EVENTS=3000
BATCH=500
HELD_FIRST=$((2 * BATCH + 1))  # outbox id of the first row of the held (third) batch
HELD_LAST=$((3 * BATCH))

start_broker

step "reset, then write $EVENTS loans with their outbox events"
run reset
expect_rc 0 "reset"
run --synchronous normal write "$EVENTS" --quiet
expect_rc 0 "write $EVENTS"
expect_line "^\[write\] committed=$EVENTS\$" "$OUT"

step "relay until the third batch is acked, HOLD before its mark, then kill -9"
export OUTBOX_FAILPOINTS='relay.after_ack_before_mark=2*off->hold'
start_hold relay relay --until-empty --batch-size "$BATCH" --send-timeout 2s --lease 3s
unset OUTBOX_FAILPOINTS
expect_count 2 "^\[relay\] batch token=[0-9]+ claimed=$BATCH acked=$BATCH failed=0 marked=$BATCH retried=0 parked=0 fenced=0\$" "$HOLD_LOG"
expect_line '^\[failpoint\] relay.after_ack_before_mark HOLD; kill -9 me$' "$HOLD_LOG"
kill9 "$HOLD_PID"

step "after the kill: two batches marked, three batches on the topic"
run status --json
expect_rc 0 "status --json"
python3 - "$OUT" "$BATCH" "$EVENTS" <<'PY' || fail "status after the kill is not published=2 batches, the rest unpublished"
import json, sys
s = json.load(open(sys.argv[1]))
batch, events = int(sys.argv[2]), int(sys.argv[3])
# claimed is 500 until the 3 s lease runs out, then 0: either is right.
ok = (s["published"] == 2 * batch and s["unpublished"] == events - 2 * batch
      and s["parked"] == 0 and s["claimed"] in (0, batch))
print("status:", "ok" if ok else "WRONG", s)
sys.exit(0 if ok else 1)
PY
run check --json
expect_rc 1 "check --json after the kill (rows still unpublished: invalid for now)"
python3 - "$OUT" "$BATCH" "$EVENTS" <<'PY' || fail "topic after the kill is not exactly the first three batches, once each"
import json, sys
r = json.load(open(sys.argv[1]))
batch, events = int(sys.argv[2]), int(sys.argv[3])
evt = lambda i: f"evt-{1000 + i}"
problems = []
for key, want in (("kafka_records", 3 * batch), ("ok", 3 * batch)):
    if r[key] != want: problems.append(f"{key}={r[key]} (expected {want})")
if r["lost"] != [evt(i) for i in range(3 * batch + 1, events + 1)]:
    problems.append(f"{len(r['lost'])} ids not in Kafka, expected exactly ids {3 * batch + 1}..{events}")
if r["stuck"] != [evt(i) for i in range(2 * batch + 1, events + 1)]:
    problems.append(f"{len(r['stuck'])} rows unmarked, expected exactly ids {2 * batch + 1}..{events}")
for key in ("phantom", "atomicity", "lost_after_mark"):
    if r[key]: problems.append(f"{key}: {r[key][:3]}")
if r["duplicated"]: problems.append(f"duplicated: {len(r['duplicated'])}")
print("check:", "; ".join(problems) if problems else
      f"batches 1-3 in Kafka once each; batches 1-2 marked; the held batch "
      f"({evt(2 * batch + 1)}..{evt(3 * batch)}) in Kafka but unmarked")
sys.exit(1 if problems else 0)
PY

step "restart: the relay drains the rest and, after the lease, the held batch again"
run relay --until-empty
expect_rc 0 "relay --until-empty after the kill"
expect_line "^\[relay\] done: batches=[0-9]+ acked=$((EVENTS - 2 * BATCH)) marked=$((EVENTS - 2 * BATCH)) failed=0 parked=0 fenced=0 pending=0\$" "$OUT"
echo "restart took ${RUN_MS} ms (includes waiting out the dead relay's lease)"

step "check: nothing lost, exactly the held batch duplicated"
run check --json
expect_rc 0 "check --json"
python3 - "$OUT" "$EVENTS" "$BATCH" "$HELD_FIRST" "$HELD_LAST" <<'PY' || fail "check --json: not exactly the held batch duplicated"
import json, sys
r = json.load(open(sys.argv[1]))
events, batch, first, last = map(int, sys.argv[2:6])
held = {f"evt-{1000 + i}": 2 for i in range(first, last + 1)}
problems = []
if not r["valid"]: problems.append("not valid")
for key, want in (("outbox_rows", events), ("ok", events), ("kafka_records", events + batch)):
    if r[key] != want: problems.append(f"{key}={r[key]} (expected {want})")
for key in ("lost", "phantom", "atomicity", "lost_after_mark", "stuck"):
    if r[key]: problems.append(f"{key}: {len(r[key])} e.g. {r[key][:3]}")
dup = r["duplicated"]
if not 0 < len(dup) <= batch: problems.append(f"{len(dup)} duplicated ids, expected 1..{batch}")
if dup != held:
    extra = sorted(set(dup) - set(held))[:3]
    missing = sorted(set(held) - set(dup))[:3]
    problems.append(f"duplicated ids are not evt-{1000 + first}..evt-{1000 + last} x2 "
                    f"(extra e.g. {extra}, missing e.g. {missing})")
print("check:", "; ".join(problems) if problems else
      f"valid, 0 lost, {len(dup)} duplicated: evt-{1000 + first}..evt-{1000 + last} x2 each")
sys.exit(1 if problems else 0)
PY

finish
