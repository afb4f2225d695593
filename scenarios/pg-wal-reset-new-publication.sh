#!/usr/bin/env bash
# A WAL relay (relay --source wal) starting on a fresh slot while a `reset` runs, on PostgreSQL (a
# schema of its own).
# Injects: another session holds ACCESS SHARE on outbox_archive, so `reset` stops at its first
#          DROP, after it read which publications list the outbox; the relay starts then and
#          creates its publication (FOR TABLE outbox, outbox_run); the lock is released, the reset
#          commits, 10 loans are written.
# Expects: the relay's publication lists the new outbox and outbox_run, the relay sends the 10 and
#          check says ok=10 lost=0. Before, the reset read the publications unlocked: the relay's
#          CREATE PUBLICATION committed on the old tables between that read and the DROP, the DROP
#          took them out and nothing added the new ones: the publication was empty, the relay
#          streamed nothing of the new run and said nothing (check: lost=10 once it stopped).
#          Now the reset locks the outbox and outbox_run (SHARE UPDATE EXCLUSIVE, what CREATE
#          PUBLICATION takes) before it reads: the relay's CREATE waits for the reset's commit and
#          finds the new tables.
# Synchronised on the server's own state (pg_locks, pg_publication) and the relay's JSON lines.
# Skipped (exit 77) only when OUTBOX_PG_URL is unset; scripts/test.sh sets it.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

use_postgres
start_broker

sql() { psql "$DB" -qAtc "$1"; }
# The reset waits for its DROP of outbox_archive (it read the publications already).
_reset_blocked() {
  [ "$(sql "SELECT count(*) FROM pg_locks WHERE relation = to_regclass('outbox_archive')
            AND mode = 'AccessExclusiveLock' AND NOT granted")" = 1 ]
}
# The relay created its publication, or waits for a lock on the outbox to create it.
_relay_at_publication() {
  [ "$(sql "SELECT (SELECT count(*) FROM pg_publication WHERE pubname = '$PG_WAL_SLOT') +
            (SELECT count(*) FROM pg_locks WHERE relation = to_regclass('outbox')
             AND mode = 'ShareUpdateExclusiveLock' AND NOT granted)")" -ge 1 ]
}

step "reset stopped at its DROP, a WAL relay starting on a fresh slot meanwhile"
run reset
expect_rc 0 "reset"
run write 5 --quiet
expect_rc 0 "write 5"
PG_WAL_SLOT=$(sql "SELECT 'outbox_wal_' || current_database() || '_' || current_schema()")
# The lock holder: a psql session fed through a FIFO, so this script says when it commits.
mkfifo "$TMP/lock.in"
psql "$DB" -qAt <"$TMP/lock.in" >"$TMP/lock.log" 2>&1 &
PIDS+=("$!")
exec 7>"$TMP/lock.in"
echo "BEGIN; LOCK TABLE outbox_archive IN ACCESS SHARE MODE; SELECT 'locked';" >&7
wait_until 30 "the lock holder's lock" _has_line '^locked$' "$TMP/lock.log" ||
  die "the lock holder did not lock outbox_archive"
start_bg reset reset
pid_reset=$BG_PID log_reset=$BG_LOG
wait_for 30 "$pid_reset" "reset waiting for its DROP" _reset_blocked || die "reset did not stop"
start_bg relay relay --source wal --json
pid_relay=$BG_PID log_relay=$BG_LOG
wait_for 30 "$pid_relay" "the relay at its publication" _relay_at_publication ||
  die "the relay did not get to its publication"
echo "COMMIT; SELECT 'released';" >&7
exec 7>&-
wait_exit "$pid_reset" 30 reset
expect_eq 0 "$BG_RC" "exit code of the reset"
sed 's/^/  | /' "$log_reset"
wait_for 60 "$pid_relay" "relay streaming" wal_streaming "$log_relay" || die "relay did not stream"
publication_sql="SELECT tablename FROM pg_publication_tables WHERE pubname = '$PG_WAL_SLOT'
  AND schemaname = current_schema() ORDER BY 1"
expect_eq "outbox outbox_run" "$(sql "$publication_sql" | tr '\n' ' ' | sed 's/ $//')" \
  "tables of the relay's publication after the reset"
run write 10 --quiet
expect_rc 0 "write 10 after the reset"
wait_for 30 "$pid_relay" "the relay sending the 10" wal_sent 10 "$log_relay"
echo "\$ kill -TERM $pid_relay"
kill -TERM "$pid_relay"
wait_exit "$pid_relay" 30 relay
expect_eq 0 "$BG_RC" "exit code of the relay"
wait_until 10 "the slot released" _wal_slot_inactive
expect_no_line 'error:' "$log_relay"
expect_check "valid=1,lost=0,stuck=0,phantom=0,ok=10,outbox_rows=10,duplicated=0"

finish
