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
#          The writer and both relays write a history (--history): the relays' settles say 3,000 rows
#          marked, each after an ack of the same relay, none fenced.
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
run --synchronous normal --history "$TMP/history.jsonl" write "$EVENTS" --quiet
expect_rc 0 "write $EVENTS"
expect_line "^\[write\] committed=$EVENTS\$" "$OUT"

step "relay until the third batch is acked, HOLD before its mark, then kill -9"
export OUTBOX_FAILPOINTS='relay.after_ack_before_mark=2*off->hold'
start_hold relay --history "$TMP/history.jsonl" relay --until-empty --batch-size "$BATCH" --send-timeout 2s --lease 3s
unset OUTBOX_FAILPOINTS
expect_count 2 "^\[relay\] batch token=[0-9]+ claimed=$BATCH acked=$BATCH failed=0 marked=$BATCH retried=0 parked=0 fenced=0\$" "$HOLD_LOG"
expect_line '^\[failpoint\] relay.after_ack_before_mark HOLD; kill -9 '"$HOLD_PID\$" "$HOLD_LOG"
kill9 "$HOLD_PID"

step "after the kill: two batches marked, three batches on the topic"
run status --json
expect_rc 0 "status --json"
# claimed is 500 until the 3 s lease runs out, then 0: either is right.
expect_json "$OUT" ".published == $((2 * BATCH)) and .unpublished == $((EVENTS - 2 * BATCH)) and .parked == 0 and (.claimed == 0 or .claimed == $BATCH)" \
  "status after the kill: two batches published, the rest unpublished"
run check --json
expect_rc 15 "check --json after the kill (rows still unpublished: not drained yet, nothing lost)"
# Kafka holds batches 1-3 once each; batches 1-2 are marked; the held batch is in Kafka, unmarked.
expect_json "$OUT" "
  def evt(\$i): \"evt-\\(1000 + \$i)\";
  .kafka_records == $((3 * BATCH)) and .ok == $((3 * BATCH)) and .verdict == \"not-drained\"
  and .lost == [] and .parked == []
  and .pending == [range($((2 * BATCH + 1)); $((EVENTS + 1))) | evt(.)]
  and .stuck == [range($((2 * BATCH + 1)); $((EVENTS + 1))) | evt(.)]
  and .phantom == [] and .atomicity == [] and .lost_after_mark == [] and .duplicated == {}" \
  "topic after the kill: exactly the first three batches, once each"

step "restart: the relay drains the rest and, after the lease, the held batch again"
run --history "$TMP/history.jsonl" relay --until-empty --json --quiet
expect_rc 0 "relay --until-empty after the kill"
expect_json "$OUT" ".report == \"final\" and .acked == $((EVENTS - 2 * BATCH)) and .marked == .acked and .failed == 0 and .parked == 0 and .fenced == 0 and .pending == 0" \
  "the restarted relay's final report"
echo "restart took ${RUN_MS} ms (includes waiting out the dead relay's lease)"

step "check: nothing lost, exactly the held batch duplicated"
run check --json
expect_rc 0 "check --json"
expect_json "$OUT" "
  .valid and .outbox_rows == $EVENTS and .ok == $EVENTS and .kafka_records == $((EVENTS + BATCH))
  and .lost == [] and .phantom == [] and .atomicity == [] and .lost_after_mark == [] and .stuck == []
  and .duplicated == ([range($HELD_FIRST; $((HELD_LAST + 1))) | {key: \"evt-\\(1000 + .)\", value: 2}] | from_entries)" \
  "check --json: valid, nothing lost, exactly the held batch evt-$((1000 + HELD_FIRST))..evt-$((1000 + HELD_LAST)) twice"

step "check --history: the relays' settles, every mark after its own ack"
expect_check "valid=1,history_marked=$EVENTS,history_marked_without_ack=0,history_fenced=0,history_parked=0" --history "$TMP/history.jsonl"

finish
