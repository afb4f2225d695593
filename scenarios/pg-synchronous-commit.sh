#!/usr/bin/env bash
# Issue 12, crash kinds on PostgreSQL: `synchronous_commit = off`, the analogue of SQLite's
# `synchronous` lesson (power-loss.sh). With it off, COMMIT returns before its WAL record is
# written out; the WAL writer writes it within 3 x wal_writer_delay (200 ms by default), and a
# server crash inside that window undoes commits the client was told succeeded.
# Injects: per setting S (off, then on), on a cluster of this scenario's own (port 55436): reset
#          (the schema committed with synchronous_commit=on); a relay in forever mode and
#          `write 10 --history H`, both with synchronous_commit=S in their connection URL
#          (options=-csynchronous_commit%3DS: every session of the run, so no synchronous commit
#          of another session flushes theirs); once the server's WAL flush position has passed
#          those 10 commits, the WAL writer is held (SIGSTOP to its PID, from pg_stat_activity):
#          the crash is made to land inside its window, as the lab's failpoints hold its own
#          processes instead of racing a sleep; `write 10` more; once the relay has published all
#          20, the relay is stopped (SIGTERM), the server crashes (pg_ctl stop -m immediate: no
#          checkpoint, and the postmaster SIGKILLs the held WAL writer after 5 s, its unwritten WAL
#          with it) and restarts, and `relay --until-empty` drains what survived.
# Expects: S=off: check --history H --synchronous-used off valid (undone commits and their
#          phantoms are what the setting allows), lost=0, atomicity=0, undone >= 1 and
#          undone-phantom >= 1 (the relay had published them), none of the first 10 (flushed
#          before the hold) undone, and business rows = 20 - undone. S=on: check --history H
#          valid with 0 undone, 0 phantom, 0 lost and all 20 rows there: the same crash at the same
#          instant undoes nothing.
# Nothing else may write the WAL out meanwhile: the cluster runs without autovacuum (its workers
# commit with synchronous_commit=local, a flush of everything before) and with checkpoint_timeout
# 1h. Without the hold the window is a race: the WAL writer is woken for every full 8 kB WAL page,
# so only commits in the last, partly filled page are at risk; measured with the lab's writer
# (20 loans) and relay, a crash right after the relay published them undid 0, 0, 1, 0, 0 at
# wal_writer_delay=10s, 3, 0, 0, 0, 5 at 200 ms (README, "PostgreSQL").
# Skipped (exit 77) only when OUTBOX_PG_URL is unset.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

FIRST=10
LATER=10
LOANS=$((FIRST + LATER))
RELAY_ARGS=(--batch-size 5 --lease 2s --send-timeout 1s --idle-max 50ms --quiet)
require_postgres
start_own_postgres "${OUTBOX_PG_SYNC_PORT:-55436}"
use_postgres
start_broker
DB_DURABLE=$DB  # synchronous_commit=on, the server's own setting (scripts/postgres.sh)
TOPIC_BASE=$TOPIC
PSQL_URL=$DB_DURABLE
# _sql QUERY: one value from the own cluster (a read: no transaction id, so it flushes nothing).
_sql() { psql "$PSQL_URL" -X -tA -v ON_ERROR_STOP=1 -c "$1"; }
psql "$PSQL_URL" -X -q -v ON_ERROR_STOP=1 -c "ALTER SYSTEM SET autovacuum = off" \
  -c "ALTER SYSTEM SET checkpoint_timeout = '1h'" -c "SELECT pg_reload_conf()" >/dev/null ||
  die "cannot turn autovacuum off on the scenario's cluster"
_no_autovacuum() { [ "$(_sql "SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'autovacuum%'")" = 0 ]; }
wait_until 30 "the autovacuum launcher gone after the reload" _no_autovacuum || die "autovacuum still runs"

_wal_flushed_to() { [ "$(_sql "SELECT pg_current_wal_flush_lsn() >= '$1'::pg_lsn")" = t ]; }
_published() {
  "$LAB_BIN" --db "$DB" status --json 2>/dev/null | jq -e ".published == $1" >/dev/null
}

ROWS=()
# cell S: one run with synchronous_commit=S; appends a row to ROWS.
cell() {
  local sync=$1 history=$TMP/$1.history
  TOPIC=$TOPIC_BASE.$sync
  step "synchronous_commit=$sync: reset (synchronous), a relay, $FIRST loans (topic $TOPIC)"
  DB=$DB_DURABLE
  run reset
  expect_rc 0 "reset"
  DB="$DB_DURABLE%20-csynchronous_commit%3D$sync"
  start_bg "relay-$sync" relay "${RELAY_ARGS[@]}"
  local relay_pid=$BG_PID relay_log=$BG_LOG
  run write "$FIRST" --quiet --history "$history"
  expect_rc 0 "write $FIRST"
  local lsn
  lsn=$(_sql "SELECT pg_current_wal_insert_lsn()")
  wait_until 10 "the WAL flushed to $lsn (the first $FIRST commits)" _wal_flushed_to "$lsn"
  echo "WAL flushed to $lsn: the first $FIRST commits are durable"

  step "synchronous_commit=$sync: hold the WAL writer, $LATER loans more, the relay publishes all $LOANS"
  local walwriter
  walwriter=$(_sql "SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'")
  [ -n "$walwriter" ] || die "no walwriter in pg_stat_activity"
  echo "\$ kill -STOP $walwriter   # the WAL writer"
  kill -STOP "$walwriter" || die "kill -STOP $walwriter failed"
  wait_until 5 "the WAL writer ($walwriter) stopped" _stopped "$walwriter" || die "the WAL writer did not stop"
  run write "$LATER" --quiet --history "$history"
  expect_rc 0 "write $LATER"
  wait_for 30 "$relay_pid" "all $LOANS published" _published "$LOANS" || die "the relay did not publish all $LOANS"
  echo "WAL inserted $(_sql "SELECT pg_current_wal_insert_lsn()"), flushed $(_sql "SELECT pg_current_wal_flush_lsn()")"

  step "synchronous_commit=$sync: the relay stops; the server crashes and restarts; a relay drains"
  # Stopped before the crash: its marks, like everything after the hold, are in the held WAL
  # either way (a relay riding out the crash is pg-server-crash.sh's subject).
  echo "\$ kill -TERM $relay_pid"
  kill -TERM "$relay_pid" || fail "kill -TERM $relay_pid: no such process"
  wait_exit "$relay_pid" 30 "the relay after SIGTERM"
  sed 's/^/  | /' "$relay_log"
  expect_eq 0 "$BG_RC" "exit code of the relay after SIGTERM"
  pg_own crash
  pg_own start >/dev/null || die "the crashed cluster did not start again"
  run relay --until-empty "${RELAY_ARGS[@]}"
  expect_rc 0 "relay --until-empty"

  step "synchronous_commit=$sync: check --history"
  local used=full
  [ "$sync" = off ] && used=off
  run check --json --history "$history" --synchronous-used "$used"
  expect_rc 0 "check --synchronous-used $used"
  expect_json "$OUT" '.valid and (.lost | length) == 0 and (.atomicity | length) == 0 and (.stuck | length) == 0' \
    "check: valid, lost=0, atomicity=0, stuck=0"
  expect_json "$OUT" ".history.acknowledged == $LOANS" "check: $LOANS commits acknowledged"
  if [ "$sync" = off ]; then
    expect_json "$OUT" '(.undone | length) >= 1' "check: undone >= 1 (the lesson: acknowledged commits undone)"
    expect_json "$OUT" '(.undone_phantom | length) >= 1' "check: undone-phantom >= 1 (published, then undone)"
    expect_json "$OUT" "[.undone[] | select(. <= \"evt-$((1000 + FIRST))\")] == []" \
      "check: none of the first $FIRST (flushed before the hold) undone"
    expect_json "$OUT" ".business_rows == $LOANS - (.undone | length)" "check: business rows = $LOANS - undone"
  else
    expect_json "$OUT" '(.undone | length) == 0 and (.undone_phantom | length) == 0 and (.phantom | length) == 0' \
      "check: undone=0, undone-phantom=0, phantom=0"
    expect_json "$OUT" ".outbox_rows == $LOANS and .business_rows == $LOANS" "check: all $LOANS rows there"
  fi
  ROWS+=("$(jq -r --arg s "$sync" '[$s, (.undone | length), (.undone_phantom | length), (.phantom | length),
      (.duplicated | length), (.lost | length), .business_rows, .verdict] | @tsv' "$OUT" |
    awk '{printf "%-19s %6s %14s %7s %10s %4s %8s  %s", $1, $2, $3, $4, $5, $6, $7, $8}')")
}

_stopped() { [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" = T ]; }

cell off
cell on

step "synchronous_commit x the same crash (acknowledged: $LOANS each)"
printf '%-19s %6s %14s %7s %10s %4s %8s  %s\n' synchronous_commit undone undone-phantom phantom duplicated lost business verdict
printf '%s\n' "${ROWS[@]}"
finish
