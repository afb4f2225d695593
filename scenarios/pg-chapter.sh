#!/usr/bin/env bash
# Chapter 7.1's experiment on PostgreSQL (issue 12): the same commands as outbox-crash.sh with
# --db postgresql://... (a schema of its own on the server at $OUTBOX_PG_URL).
# Injects: (1) kill -9 of write-hold 5 after five committed business+outbox transactions (each loan
#          and its outbox row in ONE PostgreSQL transaction), before any publish; (2) kill -9 of
#          publish-hold 3 after three acknowledged sends, before any mark.
# Expects: the chapter's table: business 5, outbox 5, published 5, 8 Kafka records, 5 distinct
#          event ids, evt-1001/1002/1003 twice each; rollback leaves no business row (shared fate on
#          PostgreSQL: the unique violation aborts the whole transaction); consume --dedupe applies
#          each event once; relay (claims, PostgreSQL's default), status and check run on the same
#          database; status says the WAL size is not measured there; relay --coordination leader
#          takes the lease row (token 1), sends 2 more rows and releases it; a final reset counts
#          the rows it removes.
# Skipped (exit 77) only when OUTBOX_PG_URL is unset; scripts/test.sh sets it.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

use_postgres
start_broker

step "scripts/postgres.sh from a folder the postgres user cannot enter says nothing but the URL"
# As root the server's tools run as postgres; from a 0700 folder of root's they used to print
# `could not change directory to "...": Permission denied` on every call.
(cd "$TMP" && "$REPO_DIR/scripts/postgres.sh" start >"$TMP/pg-start.out" 2>"$TMP/pg-start.err")
expect_eq 0 "$?" "scripts/postgres.sh start's exit code"
expect_no_line 'could not change directory' "$TMP/pg-start.err"
expect_count 0 '.' "$TMP/pg-start.err"
export OUTBOX_HISTORY=$TMP/history.jsonl

step "reset on PostgreSQL"
run reset
expect_rc 0 "reset"
expect_line '^\[reset\] schema ready db=postgresql://' "$OUT"

step "naive-hold: the orphan business row (no outbox row), then kill -9"
start_hold naive naive-hold
expect_line '^\[naive\] business row L-2001 committed; HOLD before send; kill -9 '"$HOLD_PID\$" "$HOLD_LOG"
kill9 "$HOLD_PID"
expect_verify business=1,outbox=0,kafka_records=0
run reset
expect_rc 0 "reset after the orphan"
expect_line '^\[reset\] removed business_loan=1 outbox=0 ' "$OUT"

step "first crash: write-hold 5, kill -9 before publishing"
start_hold write write-hold 5
for i in 1 2 3 4 5; do
  expect_line "^\[write\] txn i=$i loan=L-100$i event=evt-100$i committed business=$i outbox=$i\$" "$HOLD_LOG"
done
kill9 "$HOLD_PID"
expect_verify business=5,outbox=5,published=0,unpublished=5,kafka_records=0

step "shared fate: rollback reuses evt-1001; the loan rolls back with the outbox insert"
run rollback
expect_rc 0 "rollback"
expect_line '^\[rollback\] outbox insert failed: .*SQLSTATE 23505.* \(event_id .evt-1001.\)$' "$OUT"
expect_line '^\[rollback\] business_loan has L-3001 = false$' "$OUT"
expect_verify business=5,outbox=5

step "second crash: publish-hold 3, kill -9 after the acks and before the marks"
start_hold publish-hold publish-hold 3
for i in 1 2 3; do
  expect_line "^\[send\] outboxId=$i key=evt-100$i partition=0 offset=$((i - 1))\$" "$HOLD_LOG"
done
kill9 "$HOLD_PID"
expect_verify business=5,outbox=5,published=0,unpublished=5,kafka_records=3,kafka_distinct=3

step "third start: publish re-sends all five and marks them"
run publish 10
expect_rc 0 "publish 10"
for i in 1 2 3 4 5; do
  expect_line "^\[publish\] outboxId=$i key=evt-100$i offset=$((i + 2)) marked=$i\$" "$OUT"
done
expect_line '^\[publish\] sent=5 marked=5 unpublished-left=0$' "$OUT"

step "final reconciliation: the chapter's table"
run verify --json
expect_rc 0 "verify --json"
expect_json "$OUT" '.kafka.duplicates == {"evt-1001": 2, "evt-1002": 2, "evt-1003": 2} and .kafka.records == 8 and .kafka.distinct_event_ids == 5 and .kafka.missing == [] and .kafka.unexpected == []' \
  "verify --json: exactly evt-1001, evt-1002, evt-1003 twice, 8 records of 5 events"
expect_verify business=5,outbox=5,published=5,unpublished=0,kafka_records=8,kafka_distinct=5,kafka_duplicates=3,kafka_missing=0,kafka_unexpected=0
expect_line '^\[verify\] business_loan=5 outbox=5 published=5 unpublished=0$' "$OUT"

step "the idempotent consumer applies each of the 5 events once"
run consume --dedupe --group pg-chapter --effects-db "$TMP/effects.db"
expect_rc 0 "consume --dedupe"
expect_line '^\[consume\] read=8 applied=5 skipped=3 ' "$OUT"

step "the production relay on PostgreSQL: write 3 more, relay until empty, status"
run write 3
expect_rc 0 "write 3"
expect_line '^\[write\] committed=3$' "$OUT"
run relay --until-empty
expect_rc 0 "relay --until-empty"
expect_line '^\[relay\] done: batches=[0-9]+ acked=3 marked=3 failed=0 parked=0 fenced=0 pending=0$' "$OUT"
run status --json
expect_rc 0 "status --json"
expect_json "$OUT" '.unpublished == 0 and .pending == 0 and .published == 8' "status: 8 published, nothing pending"
# No WAL file of the lab's on PostgreSQL: status says so instead of printing a size of 0.
expect_json "$OUT" '.wal_bytes == null' "status --json: wal_bytes null on PostgreSQL"
run status
expect_rc 0 "status"
expect_line '^\[status\] wal-bytes not measured: on PostgreSQL the WAL is the server.s' "$OUT"

step "the checker on PostgreSQL"
run check --history "$OUTBOX_HISTORY"
expect_rc 0 "check (valid)"
expect_line '^\[check\] ok=8 lost=0 duplicated=3 phantom=0 atomicity=0 lost-after-mark=0 stuck=0 order-violations=0$' "$OUT"
expect_line '^\[check\] valid$' "$OUT"

step "commands and SQLite options not ported to PostgreSQL fail with one line and exit 18 (purge, unpark and parked run there: pg-park-purge.sh)"
run batch-loop
expect_rc 18 "batch-loop on PostgreSQL"
expect_error_line "batch-loop on PostgreSQL"
expect_line '^outbox-lab: error: batch-loop does not run on PostgreSQL yet' "$ERR"
run --synchronous off status
expect_rc 18 "--synchronous off on PostgreSQL"
expect_error_line "--synchronous off on PostgreSQL"
expect_line '^outbox-lab: error: --synchronous off is SQLite.s PRAGMA' "$ERR"

step "leader mode on PostgreSQL: write 2 more, one relay takes the lease row and sends them"
# The relay above ran in claims mode, the PostgreSQL default; leader mode runs on request.
run write 2
expect_rc 0 "write 2"
run relay --coordination leader --until-empty
expect_rc 0 "relay --coordination leader --until-empty"
expect_line '^\[relay\] leader: acquired the lease with token 1$' "$OUT"
expect_line '^\[relay\] leader: released the lease of token 1$' "$OUT"
expect_line '^\[relay\] done: batches=[0-9]+ acked=2 marked=2 failed=0 parked=0 fenced=0 pending=0$' "$OUT"
run status --json
expect_rc 0 "status --json after the leader's clean exit"
expect_json "$OUT" '.published == 10 and .leader == null and .lease_token == 1' "status: 10 published, the lease released at token 1"

step "reset on PostgreSQL counts what it removes"
run reset
expect_rc 0 "reset of a database with rows"
expect_line '^\[reset\] removed business_loan=10 outbox=10 \(published=10 unpublished=0\) archived=0$' "$OUT"

finish
