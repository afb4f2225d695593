#!/usr/bin/env bash
# Issue 12, crash kinds on PostgreSQL: the database server's own crash in the middle of a relay
# batch, on a cluster of this scenario's own (port 55433), never the shared one.
# Injects: the relay stands after a batch's acks and before its mark (failpoint
#          relay.after_ack_before_mark=1*pause->off); the server is crashed (pg_ctl stop -m
#          immediate: no checkpoint, the next start replays the WAL); the relay is released while
#          the server is down, so its settle meets a dead connection; then the server restarts.
# Expects: the relay prints "waiting: database connection lost ..." lines, reconnects by itself
#          once the server is back, and finishes: nothing is lost (check valid, lost=0, stuck=0,
#          every row published); the unsettled batch is re-sent after its lease (duplicates,
#          at-least-once).
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

finish
