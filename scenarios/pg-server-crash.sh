#!/usr/bin/env bash
# Issue 12, crash kinds on PostgreSQL: the database server's own crash in the middle of a relay
# batch, then in the middle of a write burst, on a cluster of this scenario's own (port 55433),
# never the shared one.
# Part 1, mid relay batch.
# Injects: the relay stands after a batch's acks and before its mark (failpoint
#          relay.after_ack_before_mark=1*pause->off); the server is crashed (pg_ctl stop -m
#          immediate: no checkpoint, the next start replays the WAL); the relay is released while
#          the server is down, so its settle meets a dead connection; then the server restarts.
# Expects: the relay prints "waiting: database connection lost ..." lines, reconnects by itself
#          once the server is back, and finishes: nothing is lost (check valid, lost=0, stuck=0,
#          every row published); the unsettled batch is re-sent after its lease (duplicates,
#          at-least-once).
# Part 2, mid write burst (a new run on a topic of its own).
# Injects: a relay in forever mode; writer-a stands inside its transaction, its 201st loan
#          inserted and not committed (write.before_commit=200*off->1*pause->off); writer-b writes
#          loans as fast as it can (a burst of 1,000,000 that cannot end before the crash); once
#          writer-b has 100 commits acknowledged and the relay has published 100 rows, the server
#          is crashed; writer-a is released while it is down; then the server restarts, and
#          writer-c writes one loan.
# Expects: both writers end by themselves (no hang) with exit 4 (database unavailable) and one
#          `outbox-lab: error: ...` line; the relay reconnects and publishes everything, writer-c's
#          loan included, and stops cleanly on SIGTERM (exit 0). check --history of both writers: valid, lost=0, phantom=0,
#          atomicity=0, undone=0 (every commit a writer was told succeeded is there:
#          synchronous_commit=on), every business row has its event, and at most the one
#          transaction whose COMMIT was in flight at the crash is there without an "ok" (the
#          writer records it as "info", indeterminate: the server may have made it durable before
#          it died, as it does here often, waiting on fsync).
# Skipped (exit 77) only when OUTBOX_PG_URL is unset (the scenario runs where PostgreSQL runs);
# scripts/test.sh sets it.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

EVENTS=2000
require_postgres
start_own_postgres "${OUTBOX_PG_CRASH_PORT:-55433}"
use_postgres
start_broker

step "reset, write $EVENTS loans with their outbox events"
run reset
expect_rc 0 "reset"
run write "$EVENTS" --quiet
expect_rc 0 "write $EVENTS"

step "the relay stands between the acks of a batch and its mark"
echo "(OUTBOX_FAILPOINTS='relay.after_ack_before_mark=1*pause->off')"
OUTBOX_FAILPOINTS='relay.after_ack_before_mark=1*pause->off' \
  start_bg relay relay --until-empty --batch-size 500 --pipeline 1 --delivery-timeout 2s --lease 3s --idle-max 500ms
relay_pid=$BG_PID relay_log=$BG_LOG
wait_paused "$relay_pid" "$relay_log" relay.after_ack_before_mark

step "crash the server, release the relay while it is down, restart the server"
pg_own crash
release "$relay_pid"
wait_for 30 "$relay_pid" "the relay's waiting line" _has_lines 2 '^\[relay\] waiting: database connection lost' "$relay_log" ||
  fail "the relay printed no waiting line while the server was down"
pg_own start >/dev/null || die "the crashed cluster did not start again"
wait_exit "$relay_pid" 60 "the relay"
sed 's/^/  | /' "$relay_log"
expect_eq 0 "$BG_RC" "exit code of the relay"
expect_line '^\[relay\] reconnected 1 times after a lost database connection$' "$relay_log"
expect_line '^\[relay\] done: .* pending=0$' "$relay_log"

step "nothing lost: every row published, every event on the topic"
run status --json
expect_rc 0 "status --json"
expect_json "$OUT" ".unpublished == 0 and .published == $EVENTS" "status: all $EVENTS published"
# The one batch that stood unsettled (--pipeline 1, 500 rows) is sent again: 500 duplicates.
expect_check "valid=1,lost=0,stuck=0,phantom=0,atomicity=0,ok=$EVENTS,outbox_rows=$EVENTS,business_rows=$EVENTS,duplicated=500"

# _history_oks FILE: how many transactions FILE records as acknowledged ("ok" txn).
_history_oks() { jq -c 'select(.f == "txn" and .type == "ok")' "$1" 2>/dev/null | wc -l; }
_committed_at_least() { [ "$(_history_oks "$1")" -ge "$2" ]; }
# _published_at_least N [UNPUBLISHED]: status says N rows or more published (and, when given,
# exactly UNPUBLISHED unpublished).
_published_at_least() {
  "$LAB_BIN" --db "$DB" status --json 2>/dev/null |
    jq -e ".published >= $1 and (${2:-null} == null or .unpublished == ${2:-0})" >/dev/null
}
# expect_db_lost NAME LOG: the writer NAME ended with exit 4 and one error line saying why.
expect_db_lost() {
  expect_eq 4 "$BG_RC" "exit code of $1 after the server crash (4: database unavailable)"
  expect_count 1 '^outbox-lab: error: ' "$2"
}

TOPIC=$TOPIC.burst
step "part 2: a write burst and a running relay (topic $TOPIC)"
run reset
expect_rc 0 "reset"
start_bg relay-burst relay --batch-size 100 --delivery-timeout 2s --lease 3s --idle-max 500ms --quiet
relay_pid=$BG_PID relay_log=$BG_LOG
echo "(OUTBOX_FAILPOINTS='write.before_commit=200*off->1*pause->off' for writer-a)"
OUTBOX_FAILPOINTS='write.before_commit=200*off->1*pause->off' \
  start_bg writer-a write 400 --quiet --history "$TMP/writer-a.history"
writer_a=$BG_PID writer_a_log=$BG_LOG
wait_paused "$writer_a" "$writer_a_log" write.before_commit
start_bg writer-b write 1000000 --quiet --history "$TMP/writer-b.history"
writer_b=$BG_PID writer_b_log=$BG_LOG
wait_for 60 "$writer_b" "100 commits of writer-b" _committed_at_least "$TMP/writer-b.history" 100 ||
  die "writer-b did not commit 100 loans"
wait_for 60 "$relay_pid" "100 rows published" _published_at_least 100 || die "the relay published nothing"

step "crash the server in the burst: writer-a inside its transaction, writer-b writing"
kill -0 "$writer_b" 2>/dev/null || fail "writer-b ended before the crash: no burst to crash into"
pg_own crash
release "$writer_a"
wait_exit "$writer_a" 30 "writer-a after losing its connection"
sed 's/^/  | /' "$writer_a_log"
expect_db_lost writer-a "$writer_a_log"
wait_exit "$writer_b" 30 "writer-b after losing its connection"
sed 's/^/  | /' "$writer_b_log"
expect_db_lost writer-b "$writer_b_log"
wait_for 30 "$relay_pid" "the relay's waiting line" _has_line '^\[relay\] waiting: database connection lost' "$relay_log" ||
  fail "the relay printed no waiting line while the server was down"
pg_own start >/dev/null || die "the crashed cluster did not start again"

ACKED=$(($(_history_oks "$TMP/writer-a.history") + $(_history_oks "$TMP/writer-b.history")))
echo "acknowledged commits: writer-a $(_history_oks "$TMP/writer-a.history"), writer-b $(_history_oks "$TMP/writer-b.history")"
expect_eq 200 "$(_history_oks "$TMP/writer-a.history")" "writer-a's acknowledged commits (its 201st stood uncommitted)"

step "the relay reconnects by itself and publishes every row, and a loan written after the restart"
# The relay's own evidence of its reconnect: a row that did not exist before the restart.
run write 1 --quiet --history "$TMP/writer-c.history"
expect_rc 0 "write 1 after the restart"
ACKED=$((ACKED + 1))
wait_for 60 "$relay_pid" "every row published" _published_at_least "$ACKED" 0
echo "\$ kill -TERM $relay_pid"
kill -TERM "$relay_pid" || fail "kill -TERM $relay_pid: no such process"
wait_exit "$relay_pid" 30 "the relay after SIGTERM"
grep -v '^\[relay\] waiting: ' "$relay_log" | sed 's/^/  | /'
expect_eq 0 "$BG_RC" "exit code of the relay after SIGTERM"
expect_line '^\[relay\] reconnected [1-9][0-9]* times after a lost database connection$' "$relay_log"

step "check with every writer's history: each acknowledged commit is there, nothing lost"
run check --json --history "$TMP/writer-a.history" --history "$TMP/writer-b.history" \
  --history "$TMP/writer-c.history"
expect_rc 0 "check"
expect_json "$OUT" '.valid and (.lost | length) == 0 and (.phantom | length) == 0 and (.atomicity | length) == 0 and (.stuck | length) == 0' "check: valid, lost=0, phantom=0, atomicity=0, stuck=0"
expect_json "$OUT" '(.undone | length) == 0' "check: undone=0 (synchronous_commit=on)"
expect_json "$OUT" ".history.acknowledged == $ACKED and (.history.unexpected | length) == 0" "check: $ACKED acknowledged, none unexpected"
expect_json "$OUT" ".outbox_rows == .business_rows and .outbox_rows - $ACKED >= 0 and .outbox_rows - $ACKED <= 1" "check: the outbox holds the $ACKED acknowledged rows and at most the one in flight"
# writer-a's COMMIT met the dead connection: "info" (its outcome unknown to it); writer-b's last
# transaction: "info" if the crash met its COMMIT, "fail" if it met an earlier statement.
expect_json "$OUT" ".history.indeterminate >= 1 and .history.failed + .history.indeterminate == 2" "check: one unfinished transaction per writer, writer-a's indeterminate"

finish
