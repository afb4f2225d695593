#!/usr/bin/env bash
# Read-only media and a database owned by another user (issue 9 §2).
# Injects: (1) a read-only medium: the database's directory bind-mounted read-only in a private
#          mount namespace (`unshare -rm`), so every write gets EROFS from the kernel, as on a
#          read-only mount or a write-protected card; (2) another user's files: the directory and
#          database made read-only (chmod a-w) and the lab run as user nobody (setpriv; as a
#          non-root user the chmod alone does it), as on a database owned by the service account;
#          (3) as (2), after a writer was killed with -9, so the -wal and -shm it left hold the
#          only copy of its commits; (4) as (3) with the -shm gone (what power-cut leaves);
#          (5) a read-only database of an older schema.
# Expects: the commands that only read (status, metrics, parked, verify, check, report) open the
#          database read-only and give the right counts, on a cleanly closed WAL database (no -wal,
#          no -shm, none can be created) and on the killed writer's WAL (its rows counted); every
#          command that writes exits 17 at once (well inside its busy timeout) with one error line
#          naming the file and saying it is read-only; no file changes (sha256) and no -wal or -shm
#          appears. (4) exits 4 naming the -wal, (5) exits 17 naming the schema version.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

sha() { sha256sum "$1" | cut -d' ' -f1; }
REAL_BIN=$LAB_BIN
WRITERS=("write 1" "relay --once" "publish 1" "purge --older-than 1s" "unpark --all" "reset"
  "naive-hold" "rollback")

# expect_reads_ok WHAT: status, parked, metrics and verify/check agree with 3 rows, 2 published.
expect_reads_ok() {
  run status --json
  expect_rc 0 "$1: status --json"
  expect_json "$OUT" '.unpublished == 1 and .published == 2' "$1: status --json"
  run metrics
  expect_rc 0 "$1: metrics"
  expect_line '^outbox_unpublished_rows 1$' "$OUT"
  run parked --json
  expect_rc 0 "$1: parked --json"
  expect_json "$OUT" '.parked == 0' "$1: parked --json"
  run verify --no-kafka --expect business=3,outbox=3,published=2,unpublished=1
  expect_rc 0 "$1: verify --no-kafka"
  run verify --expect business=3,outbox=3,published=2,unpublished=1,kafka_records=2,kafka_distinct=2
  expect_rc 0 "$1: verify with Kafka"
  run check --expect valid=0,ok=2,stuck=1
  expect_rc 0 "$1: check"
}

# expect_writers_refused WHAT FILE: every writing command exits 17 at once with one line naming FILE.
expect_writers_refused() {
  local cmd
  for cmd in "${WRITERS[@]}"; do
    # shellcheck disable=SC2086  # the command and its options are words
    run --busy-timeout 30s $cmd
    expect_rc 17 "$1: $cmd"
    expect_error_line "$1: $cmd"
    grep -q -F "'$2'" "$ERR" || fail "$1: $cmd: the error does not name '$2'"
    grep -q 'read-only' "$ERR" || fail "$1: $cmd: the error does not say read-only"
    [ "$RUN_MS" -lt 5000 ] || fail "$1: $cmd took $RUN_MS ms: not at once"
  done
}

step "a database with 3 loans, 2 of them published, closed cleanly"
start_broker
run reset
expect_rc 0 "reset"
run write 3 --quiet
expect_rc 0 "write 3"
run publish 2
expect_rc 0 "publish 2"
[ ! -e "$DB-wal" ] && [ ! -e "$DB-shm" ] || die "the database was not closed cleanly"
[ "$(od -An -tu1 -j18 -N2 "$DB" | tr -s ' ')" = " 2 2" ] || die "the database is not in WAL mode"

step "(1) read-only medium: the directory bind-mounted read-only (EROFS)"
MEDIA=$TMP/media
mkdir "$MEDIA" && cp "$DB" "$MEDIA/outbox.db" || die "cannot copy the database"
media_sha=$(sha "$MEDIA/outbox.db")
cat >"$TMP/ro-media" <<EOF
#!/bin/sh
# Runs the lab with $MEDIA read-only, in a private mount namespace.
exec unshare -rm sh -c 'mount --bind "\$0" "\$0" && mount -o remount,bind,ro "\$0" && exec "\$@"' "$MEDIA" "$REAL_BIN" "\$@"
EOF
chmod +x "$TMP/ro-media"
"$TMP/ro-media" --db "$MEDIA/outbox.db" failpoints >/dev/null 2>"$TMP/unshare.err" ||
  die "cannot mount read-only with unshare -rm: $(head -n 1 "$TMP/unshare.err")"
"$TMP/ro-media" --db "$MEDIA/outbox.db" reset >/dev/null 2>&1
[ "$(sha "$MEDIA/outbox.db")" = "$media_sha" ] || die "the medium is not read-only: reset changed it"
LAB_BIN=$TMP/ro-media
DB=$MEDIA/outbox.db
expect_reads_ok "read-only medium"
run report --html "$TMP/media-report.html"
expect_rc 0 "read-only medium: report"
expect_writers_refused "read-only medium" "$DB"
expect_line 'read-only \(Read-only file system\)' "$ERR"
expect_eq "$media_sha" "$(sha "$DB")" "sha256 of the database on the read-only medium"
[ ! -e "$DB-wal" ] && [ ! -e "$DB-shm" ] || fail "a -wal or -shm appeared on the read-only medium"

step "(2) another user's database: directory and file chmod a-w, run as nobody"
OTHER=$TMP/other
mkdir "$OTHER" && cp "$TMP/outbox.db" "$OTHER/outbox.db" || die "cannot copy the database"
chmod a-w "$OTHER" "$OTHER/outbox.db"
chmod 755 "$TMP"  # nobody must reach the directory (mktemp made it 0700)
other_sha=$(sha "$OTHER/outbox.db")
if [ "$(id -u)" = 0 ]; then
  cat >"$TMP/as-other" <<EOF
#!/bin/sh
exec setpriv --reuid=65534 --regid=65534 --clear-groups "$REAL_BIN" "\$@"
EOF
else
  printf '#!/bin/sh\nexec "%s" "$@"\n' "$REAL_BIN" >"$TMP/as-other"
fi
chmod +x "$TMP/as-other"
LAB_BIN=$TMP/as-other
DB=$OTHER/outbox.db
expect_reads_ok "another user's database"
expect_writers_refused "another user's database" "$DB"
expect_line 'read-only \(Permission denied\)' "$ERR"
expect_eq "$other_sha" "$(sha "$DB")" "sha256 of the other user's database"
[ ! -e "$DB-wal" ] && [ ! -e "$DB-shm" ] || fail "a -wal or -shm appeared beside the other user's database"

step "(3) another user's database after its writer was killed: its -wal holds 2 more loans"
LAB_BIN=$REAL_BIN
CRASHED=$TMP/crashed
mkdir "$CRASHED" && cp "$TMP/outbox.db" "$CRASHED/outbox.db" || die "cannot copy the database"
DB=$CRASHED/outbox.db
start_hold write write-hold 2
kill9 "$HOLD_PID"
[ -s "$DB-wal" ] && [ -e "$DB-shm" ] || die "the killed writer left no -wal and -shm"
chmod a-w "$CRASHED" "$DB" "$DB-wal" "$DB-shm"
crashed_sha=$(sha "$DB")$(sha "$DB-wal")
LAB_BIN=$TMP/as-other
run verify --no-kafka --expect business=5,outbox=5,published=2,unpublished=3
expect_rc 0 "verify --no-kafka reads the killed writer's commits from its -wal"
run status --json
expect_json "$OUT" '.unpublished == 3' "status --json on the crashed database"
run write 1
expect_rc 17 "write on the crashed read-only database"
expect_error_line "write on the crashed read-only database"
expect_eq "$crashed_sha" "$(sha "$DB")$(sha "$DB-wal")" "sha256 of the crashed database and its -wal"

step "(4) as (3) without the -shm (what power-cut leaves): refused, naming the -wal"
chmod u+w "$CRASHED"
rm -f "$DB-shm"
chmod a-w "$CRASHED"
run status
expect_rc 4 "status on a -wal without a -shm that cannot be created"
expect_error_line "status on a -wal without a -shm"
grep -q -F "'$DB-wal'" "$ERR" || fail "the error does not name the -wal"

step "(5) a read-only database of schema 2: reading needs a migration it cannot write"
LAB_BIN=$REAL_BIN
OLD=$TMP/old
mkdir "$OLD" && cp "$TMP/outbox.db" "$OLD/outbox.db" || die "cannot copy the database"
sqlite3 "$OLD/outbox.db" 'PRAGMA user_version = 2' || die "sqlite3 could not set user_version"
chmod a-w "$OLD" "$OLD/outbox.db"
LAB_BIN=$TMP/as-other
DB=$OLD/outbox.db
run status
expect_rc 17 "status on a read-only schema 2 database"
expect_error_line "status on a read-only schema 2 database"
expect_line 'schema version 2 must be migrated to 7' "$ERR"

LAB_BIN=$REAL_BIN
DB=$TMP/outbox.db
chmod -R u+w "$TMP"
finish
