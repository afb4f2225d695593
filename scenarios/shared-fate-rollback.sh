#!/usr/bin/env bash
# Chapter 7.1, "同库同事务" — the business row and its outbox row share one fate.
# Injects: (1) kill -9 of write-hold 5 after its five commits; (2) rollback: one transaction
#          inserts loan L-3001 and an outbox row reusing evt-1001, so the unique constraint fails.
# Expects: the five committed pairs survive the kill (business=5, outbox=5); rollback prints
#          `business_loan has L-3001 = false`, exits 0 and leaves the counts at 5/5; on a freshly
#          reset database with no event to collide with, rollback refuses with exit 10 and one
#          `outbox-lab: error:` line, and writes nothing.
# No broker: nothing here touches Kafka.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

step "reset, then write-hold 5 and kill -9 at the HOLD"
run reset
expect_rc 0 "reset"
start_hold write write-hold 5
expect_count 5 '^\[write\] txn i=[1-5] .* committed business=[1-5] outbox=[1-5]$' "$HOLD_LOG"
kill9 "$HOLD_PID"
expect_verify business=5,outbox=5,published=0,unpublished=5

step "rollback: the outbox insert fails, and the business insert goes with it"
run rollback
expect_rc 0 "rollback"
expect_line '^\[rollback\] outbox insert failed: .*UNIQUE.*evt-1001' "$OUT"
expect_line '^\[rollback\] business_loan has L-3001 = false$' "$OUT"

step "the counts are those of before the rollback"
expect_verify business=5,outbox=5,published=0,unpublished=5

step "rollback on a fresh database: no event to collide with"
DB=$TMP/fresh.db
run reset
expect_rc 0 "reset of the fresh database"
run rollback
expect_rc 10 "rollback with no event"
expect_error_line "rollback with no event"
expect_no_line 'L-3001 = (true|false)' "$OUT"
expect_verify business=0,outbox=0,published=0,unpublished=0

finish
