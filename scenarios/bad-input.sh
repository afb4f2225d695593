#!/usr/bin/env bash
# Bad input and unavailable dependencies: the lab refuses cleanly.
# Injects: N=0/-1/abc; a database under an uncreatable directory; a file of random bytes; a
#          missing file; SQLite files without the lab schema; a database whose write lock another
#          process (the sqlite3 CLI, inside BEGIN IMMEDIATE) holds; a broker nobody listens on
#          (127.0.0.1:1) for publish and for verify; an unknown librdkafka property; a bad
#          --expect key; no broker at all.
# Expects: each refusal exits with its documented code (src/cli/exit_code.h: usage 2, config 3,
#          db-unavailable 4, not-sqlite 5, schema-missing 6, busy 7, broker-unavailable 8,
#          delivery-failed 9), says so in one `outbox-lab: error: ...` line on stderr (librdkafka
#          may log before it), returns promptly, and leaves every file byte-for-byte as it was
#          (sha256) — a missing file stays missing. The one refusal without an error line is a
#          failed delivery: publish reports it per row on stdout, as the relay's result, and the
#          row stays unpublished.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

sha() { sha256sum "$1" | cut -d' ' -f1; }

# expect_refused CODE WHAT: exit CODE with one error line.
expect_refused() {
  expect_rc "$1" "$2"
  expect_error_line "$2"
}

# A database holding work: two committed loans with unpublished outbox rows.
step "a database with 2 unpublished events"
run reset
expect_rc 0 "reset"
start_hold write write-hold 2
kill9 "$HOLD_PID"
# Opening once after the kill checkpoints the WAL the killed writer left, so from here on the main
# file alone holds the data and its hash must not move.
expect_verify business=2,outbox=2,published=0,unpublished=2
[ ! -e "$DB-wal" ] || fail "the WAL is still there after a clean open and close"
good_db=$DB
good_sha=$(sha "$good_db")
echo "sha256 $good_sha"

# db_untouched WHAT: the database has the same bytes and counts as before.
db_untouched() {
  expect_eq "$good_sha" "$(sha "$good_db")" "sha256 of the database after $1"
}

step "N must be a positive integer (usage, exit 2)"
for sub in write-hold publish-hold publish; do
  for n in 0 -1 abc; do
    run "$sub" "$n"
    expect_refused 2 "$sub $n"
  done
done
db_untouched "bad N"

step "a database path under a directory that cannot be created (exit 4)"
DB=/proc/outbox-lab/x.db
run reset
expect_refused 4 "reset of $DB"
[ ! -e /proc/outbox-lab ] || fail "/proc/outbox-lab exists"

step "a file of random bytes (not SQLite, exit 5); it keeps its bytes"
DB=$TMP/garbage.db
head -c 8192 /dev/urandom >"$DB"
garbage_sha=$(sha "$DB")
for args in "reset" "verify --no-kafka" "write-hold 1" "rollback"; do
  # shellcheck disable=SC2086  # split the words of args on purpose
  run $args
  expect_refused 5 "$args on random bytes"
done
expect_eq "$garbage_sha" "$(sha "$DB")" "sha256 of the random-bytes file"
[ ! -e "$DB-wal" ] || fail "a WAL appeared next to the random-bytes file"

step "a missing database (exit 6); nothing is created"
DB=$TMP/missing/outbox.db
for args in "verify" "write-hold 1" "rollback" "publish 1"; do
  # shellcheck disable=SC2086
  run $args
  expect_refused 6 "$args on a missing file"
done
[ ! -e "$DB" ] || fail "$DB was created"
[ ! -e "$TMP/missing" ] || fail "$TMP/missing was created"

step "valid SQLite files without the lab schema (exit 6); they keep their bytes"
zero=$TMP/zero-bytes.db
: >"$zero"
vacuumed=$TMP/empty.db
sqlite3 "$vacuumed" 'VACUUM;' || die "sqlite3 could not create $vacuumed"
other=$TMP/other-app.db
sqlite3 "$other" 'CREATE TABLE t(x); INSERT INTO t VALUES (1);' || die "sqlite3 could not create $other"
for DB in "$zero" "$vacuumed" "$other"; do
  before=$(sha "$DB")
  run write-hold 1
  expect_refused 6 "write-hold 1 on $(basename "$DB")"
  run rollback
  expect_refused 6 "rollback on $(basename "$DB")"
  expect_eq "$before" "$(sha "$DB")" "sha256 of $(basename "$DB")"
done
DB=$good_db

step "another process holds the write lock (exit 7 after the busy timeout)"
fifo=$TMP/sqlite3.stdin
mkfifo "$fifo"
# sqlite3 reads its statements from the fifo; holding the fifo open keeps it (and the lock) alive.
sqlite3 "$DB" <"$fifo" >"$TMP/sqlite3.out" 2>&1 &
sqlite_pid=$!
PIDS+=("$sqlite_pid")
exec {lock_fd}>"$fifo"
echo "BEGIN IMMEDIATE; SELECT 'locked';" >&"$lock_fd"
wait_for 10 "$sqlite_pid" "sqlite3 holding the write lock" _has_line '^locked$' "$TMP/sqlite3.out" ||
  die "sqlite3 did not take the lock: $(cat "$TMP/sqlite3.out")"
echo "sqlite3 (pid $sqlite_pid) holds BEGIN IMMEDIATE on $(basename "$DB")"
run write-hold 1 --busy-timeout-ms 200
expect_refused 7 "write-hold 1 against a held lock"
[ "$RUN_MS" -lt 5000 ] || fail "write-hold with --busy-timeout-ms 200 took ${RUN_MS} ms"
printf 'ROLLBACK;\n.quit\n' >&"$lock_fd"
exec {lock_fd}>&-
wait "$sqlite_pid"
expect_eq 0 "$?" "sqlite3 exit status"
_forget_pid "$sqlite_pid"
expect_verify business=2,outbox=2,published=0,unpublished=2
db_untouched "the lock"

step "publish to a broker nobody listens on (exit 9); the rows stay unpublished"
run publish 5 --brokers 127.0.0.1:1 --delivery-timeout-ms 1500
expect_rc 9 "publish to 127.0.0.1:1"
expect_line '^\[publish\] outboxId=1 key=evt-1001 delivery FAILED: .*left unpublished$' "$OUT"
expect_line '^\[publish\] sent=0 marked=0 failed=1 unpublished-left=2$' "$OUT"
[ "$RUN_MS" -lt 10000 ] || fail "publish with --delivery-timeout-ms 1500 took ${RUN_MS} ms"
expect_verify business=2,outbox=2,published=0,unpublished=2
db_untouched "the failed publish"

step "verify against a broker nobody listens on (exit 8, bounded by --timeout-ms)"
run verify --brokers 127.0.0.1:1 --timeout-ms 2000
expect_refused 8 "verify against 127.0.0.1:1"
[ "$RUN_MS" -lt 10000 ] || fail "verify with --timeout-ms 2000 took ${RUN_MS} ms"

step "configuration errors (exit 3), caught before the database is touched"
run -X no.such.prop=1 write-hold 1
expect_refused 3 "-X no.such.prop=1 write-hold 1"
run verify -X no.such.prop=1 --no-kafka
expect_refused 3 "verify -X no.such.prop=1"
run verify --no-kafka --expect no_such_key=1
expect_refused 2 "verify --expect no_such_key=1"
run publish 1
expect_refused 3 "publish with no broker configured"
expect_verify business=2,outbox=2,published=0,unpublished=2
db_untouched "the configuration errors"

finish
