#!/usr/bin/env bash
# Chapter 7.1's answer to the 3 duplicates: deduplicate downstream by event id (幂等消费).
# Injects: the chapter's two kill -9s (8 records for 5 events), then a kill -9 of the idempotent
#          consumer after it applied an event's effect but before it committed the Kafka offset
#          (failpoint consume.after_effect, 7th record: evt-1004, applied), then a restart of the consumer.
# Expects: the restart resumes at the uncommitted record and skips it as a duplicate; from the 8
#          records exactly 5 effects exist (one per event id) and 5 processed_event rows.
#          Then (issue 9 §7) `--retain 1h` on a replay of all 8 skips them all and prunes nothing;
#          `--retain 1ms --prune-batch-size 2` prunes the 5 rows in 3 transactions; a replay after
#          that applies every event again, which is why the retention must cover every re-send.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

start_broker
EFFECTS=$TMP/effects.db

step "the chapter's run: 5 loans, 3 sent and not marked, re-published: 8 records"
run reset
start_hold write write-hold 5
kill9 "$HOLD_PID"
start_hold publish publish-hold 3
kill9 "$HOLD_PID"
run publish 10
expect_rc 0 "publish 10"
expect_verify kafka_records=8,kafka_distinct=5,published=5

step "idempotent consumer, killed after the 7th record's effect (evt-1004), before its offset commit"
export OUTBOX_FAILPOINTS='consume.after_effect=6*off->hold'
start_hold consumer consume --dedupe --group loans --effects-db "$EFFECTS"
unset OUTBOX_FAILPOINTS
expect_count 4 ' applied$' "$HOLD_LOG"
expect_count 3 'duplicate: skipped$' "$HOLD_LOG"
expect_line '^\[failpoint\] consume.after_effect HOLD' "$HOLD_LOG"
kill9 "$HOLD_PID"

step "restart: evt-1004's offset was never committed: it comes again and is skipped"
run consume --dedupe --group loans --effects-db "$EFFECTS"
expect_rc 0 "consume after restart"
expect_line '^\[consume\] partition=0 offset=6 event=evt-1004 duplicate: skipped$' "$OUT"
expect_line '^\[consume\] read=2 applied=1 skipped=1 effects-total=5$' "$OUT"
expect_eq 5 "$(sqlite3 "$EFFECTS" 'SELECT COUNT(*) FROM loan_effect')" "loan_effect rows"
expect_eq 5 "$(sqlite3 "$EFFECTS" 'SELECT COUNT(DISTINCT event_id) FROM loan_effect')" "distinct effects"
expect_eq 5 "$(sqlite3 "$EFFECTS" 'SELECT COUNT(*) FROM processed_event')" "processed_event rows"

step "a third run finds nothing new"
run consume --dedupe --group loans --effects-db "$EFFECTS"
expect_line '^\[consume\] read=0 applied=0 skipped=0 effects-total=5$' "$OUT"

step "--retain: a replay of all 8 records inside the window is skipped; nothing is pruned"
run consume --dedupe --group replay --effects-db "$EFFECTS" --retain 1h --prune-batch-size 2
expect_rc 0 "consume --retain 1h"
expect_line '^\[consume\] read=8 applied=0 skipped=8 effects-total=5$' "$OUT"
expect_line '^\[consume\] pruned=0 batches=0 processed-kept=5 ' "$OUT"

step "--retain 1ms --prune-batch-size 2: the 5 rows go in 3 bounded transactions"
run consume --dedupe --group loans --effects-db "$EFFECTS" --retain 1ms --prune-batch-size 2
expect_rc 0 "consume --retain 1ms"
expect_line '^\[consume\] pruned=5 batches=3 processed-kept=0 ' "$OUT"
expect_eq 0 "$(sqlite3 "$EFFECTS" 'SELECT COUNT(*) FROM processed_event')" "processed_event rows after pruning"

step "the rule's reason: a replay after its rows were pruned applies every event again"
run consume --dedupe --group replay-late --effects-db "$EFFECTS"
expect_line '^\[consume\] read=8 applied=5 skipped=3 effects-total=10$' "$OUT"

step "--retain without --dedupe is a usage error"
run consume --retain 1h
expect_rc 2 "consume --retain without --dedupe"

finish
