#!/usr/bin/env bash
# Two other sessions that hold something the outbox needs, on PostgreSQL, and nothing silent
# about either.
# Injects: (1) a psql session holding the schema's advisory lock (pg_advisory_lock(
#          122550254464888), the key "outbox") while it sleeps; (2) a psql session holding a
#          REPEATABLE READ transaction open (a snapshot, so the MVCC horizon) while it sleeps.
# Expects: (1) on a current schema `status` takes no lock and answers at once; `reset` waits
#          its bound (lock_timeout from the URL: 1.5 s; else 10 s) and exits 7 with one line
#          naming the key, the holder's PID, application_name and state, and the
#          `SELECT pg_terminate_backend(PID)` hint; nothing is dropped (status still works);
#          after the holder is terminated, `reset` succeeds. (2) `status` names nothing under its
#          default threshold (60s); `status --horizon-threshold 1s` names the holder's PID,
#          application_name and state in text and in --json (.horizon).
# Runs on a PostgreSQL cluster of its own (port 55437), so its lock holds up no other test.
# Skipped (exit 77) only when OUTBOX_PG_URL is unset; scripts/test.sh sets it.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

require_postgres
# A cluster of its own: the schema lock is one key for the whole database, and while this
# scenario holds it every other test's reset on the shared server would wait its bound and fail.
start_own_postgres "${OUTBOX_PG_LOCK_PORT:-55437}"
use_postgres
LOCK_KEY=122550254464888  # PgStore::kMigrationLockKey, 0x6f7574626f78

psql_q() { psql "$PG_BASE_URL" -X -qtA -v ON_ERROR_STOP=1 -c "$1"; }
lock_held() {
  [ "$(psql_q "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = 28533 AND objid = 1952608120 AND objsubid = 1")" = 1 ]
}
snapshot_older_than_1s() {
  [ "$(psql_q "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'horizon-holder-$$' AND backend_xmin IS NOT NULL AND now() - xact_start > interval '1200 ms'")" = 1 ]
}

step "reset: the schema, then a session that holds the schema lock"
run reset
expect_rc 0 "reset"
run write 5
expect_rc 0 "write 5"
echo "\$ psql -c 'SELECT pg_advisory_lock($LOCK_KEY)' -c 'SELECT pg_sleep(600)' &"
PGAPPNAME=lock-holder psql "$PG_BASE_URL" -X -q -c "SELECT pg_advisory_lock($LOCK_KEY)" \
  -c "SELECT pg_sleep(600)" >"$TMP/lock-holder.log" 2>&1 &
LOCK_PSQL=$!
PIDS+=("$LOCK_PSQL")
wait_for 15 "$LOCK_PSQL" "the advisory lock held" lock_held || die "the psql session never took the lock"
HOLDER=$(psql_q "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = 28533 AND objid = 1952608120 AND objsubid = 1")
echo "(lock held by backend PID $HOLDER)"

step "a current schema takes no lock: status answers at once"
run status
expect_rc 0 "status beside the held lock"
[ "$RUN_MS" -lt 5000 ] || fail "status took $RUN_MS ms beside the held lock (it must take none)"

step "reset behind the lock, bounded by the URL's lock_timeout (1.5 s)"
DB_PLAIN=$DB
DB="$DB%20-clock_timeout%3D1500"
run reset
DB=$DB_PLAIN
expect_rc 7 "reset behind a held advisory lock"
expect_error_line "reset behind a held advisory lock"
expect_line "^outbox-lab: error: .*advisory lock $LOCK_KEY .*lock_timeout 1500ms: held by PID $HOLDER application_name 'lock-holder' state 'active' .*run \`SELECT pg_terminate_backend\($HOLDER\)\`" "$ERR"
[ "$RUN_MS" -ge 1400 ] && [ "$RUN_MS" -lt 6000 ] || fail "reset took $RUN_MS ms, expected about 1500"

step "reset behind the lock with no lock_timeout: the 10 s default bound"
run reset
expect_rc 7 "reset behind a held advisory lock, default bound"
expect_line "lock_timeout 10000ms: held by PID $HOLDER " "$ERR"
[ "$RUN_MS" -ge 9500 ] && [ "$RUN_MS" -lt 20000 ] || fail "reset took $RUN_MS ms, expected about 10000"

step "nothing was dropped; terminate the holder as the line says, and reset runs"
run status --json
expect_rc 0 "status after the refused reset"
expect_json "$OUT" '.unpublished == 5' "the 5 rows survive a refused reset"
psql_q "SELECT pg_terminate_backend($HOLDER)" >/dev/null
wait_exit "$LOCK_PSQL" 15 "the lock holder's psql"
run reset
expect_rc 0 "reset once the holder is gone"

step "a REPEATABLE READ transaction holds the horizon"
echo "\$ psql -c 'BEGIN ISOLATION LEVEL REPEATABLE READ' -c 'SELECT count(*) FROM outbox' -c 'SELECT pg_sleep(600)' &"
PGAPPNAME=horizon-holder-$$ psql "$DB" -X -q -c "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM outbox; SELECT pg_sleep(600);" \
  >"$TMP/horizon-holder.log" 2>&1 &
HORIZON_PSQL=$!
PIDS+=("$HORIZON_PSQL")
wait_for 15 "$HORIZON_PSQL" "the snapshot 1.2 s old" snapshot_older_than_1s || die "the REPEATABLE READ session never held a snapshot"
HZ=$(psql_q "SELECT pid FROM pg_stat_activity WHERE application_name = 'horizon-holder-$$'")
run status
expect_rc 0 "status under the default threshold"
expect_no_line '^\[status\] horizon' "$OUT"
run status --horizon-threshold 1s
expect_rc 0 "status --horizon-threshold 1s"
expect_line "^\[status\] horizon held by pid=$HZ application-name='horizon-holder-$$' state='active' .*transaction-age-ms=[0-9]+ xmin-age=[0-9]+ outbox-dead-tuples=[0-9]+: VACUUM cannot remove dead outbox rows while it stays open; end it or run \`SELECT pg_terminate_backend\($HZ\)\`" "$OUT"
run status --json --horizon-threshold 1s
expect_json "$OUT" ".horizon.pid == $HZ and .horizon.state == \"active\" and .horizon.transaction_age_ms >= 1200 and .horizon.threshold_ms == 1000" "status --json names the horizon holder"
psql_q "SELECT pg_terminate_backend($HZ)" >/dev/null
wait_exit "$HORIZON_PSQL" 15 "the horizon holder's psql"
run status --json --horizon-threshold 1s
expect_json "$OUT" ".horizon == null or .horizon.pid != $HZ" "status forgets the ended holder"

finish
