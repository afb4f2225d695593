#!/usr/bin/env bash
# Bad input and unavailable dependencies: the lab refuses cleanly.
# Injects: N=0/-1/abc; a database under an uncreatable directory; a file of random bytes; a
#          missing file; SQLite files without the lab schema; a database whose write lock another
#          process (the sqlite3 CLI, inside BEGIN IMMEDIATE) holds; a broker nobody listens on
#          (127.0.0.1:1) for publish and for verify; an unknown librdkafka property; a bad
#          --expect key; no broker at all; (issue 9) rows inserted by the sqlite3 CLI with the bytes
#          C3 28 (not UTF-8) in event_id, aggregate_id, event_type and payload; INSERTs whose
#          created_at is in seconds, text or omitted; a schema 2 database holding such rows;
#          rows whose headers column is good, NULL, invalid JSON, not UTF-8, an array, has a number
#          value or forges the relay's event_id header. (Read-only media: scenarios/read-only.sh.)
# Expects: each refusal exits with its documented code (src/cli/exit_code.h: usage 2, config 3,
#          db-unavailable 4, not-sqlite 5, schema-missing 6, busy 7, broker-unavailable 8,
#          delivery-failed 9), says so in one `outbox-lab: error: ...` line on stderr (librdkafka
#          may log before it), returns promptly, and leaves every file byte-for-byte as it was
#          (sha256) — a missing file stays missing. The one refusal without an error line is a
#          failed delivery: publish reports it per row on stdout, as the relay's result, and the
#          row stays unpublished. Foreign bytes: `relay --until-empty --history` delivers every
#          row (exit 0), Kafka holds the bytes unchanged (key, value, event_id header: check ok),
#          and check/status/verify/relay --json print JSON that jq accepts. The created_at
#          contract: a bad INSERT fails in the writer's transaction, an omitted created_at gets
#          the database clock, and status names the old rows that break it instead of aging them.
#          Headers: the good row reaches Kafka with its headers after the relay's three, the bad
#          ones are parked at once with the reason (relay --fail-on-parked exits 14), and the
#          chapter's publish stops at the first with exit 9.
# Issue 15, section 4 (errors that say the fix): a mistyped subcommand, -Doutbox.db with a space
#          or given to the binary, an unquoted path with spaces, another subcommand's option, a
#          subcommand's option before it; each exits 2 with one line naming the fix, directly and
#          through run.sh; every subcommand's --help lists the global options; the "reset first"
#          hint quotes the command as the user runs it (outbox-lab --db ..., or run.sh's
#          -Doutbox.db=... OutboxLab); run.sh (in a copy of the repo whose cmake is a stand-in)
#          stops with exit 125 and shows a `CMake Error` line even though cmake exited 0, and
#          starts no broker for a word that is not a subcommand.
# A newcomer's list: check against an exclusive lock (7); check on a missing, schema-less, text or
#          directory database, without a
#          broker, with a bad -X, an unreachable broker, an injected read error, a bad --expect
#          (each exits with the table's code: 6 6 5 4 3 3 8 11 2); a vfs.* failpoint without
#          --vfs powerloss (3); -X bootstrap.servers named in the error instead of --brokers; bad
#          --topic names and --db values (:memory:, '', file:) (2); --seed abc/-1, counts above
#          INT_MAX, --send-timeout with --delivery-timeout, --lease 106751991000d, --owner '',
#          --backoff-base above --backoff-max (2, one line naming the option and its range);
#          bench/report --html under a missing directory (3, before any work); check and verify
#          of a topic the broker lacks while rows are published (8, "check --topic"); check with
#          an empty history file (the unexpected ids listed, and a hint).
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
DB=$good_db
run consume --dedupe --group g1 --effects-db "$TMP/garbage.db" --brokers 127.0.0.1:1
expect_refused 5 "consume --effects-db of random bytes"
expect_line "^outbox-lab: error: open the consumer's --effects-db '$TMP/garbage.db': not an SQLite database" "$ERR"
DB=$TMP/garbage.db
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

step "another process holds an exclusive lock: check cannot read either (exit 7, not 'could not check')"
sqlite3 "$DB" <"$fifo" >"$TMP/sqlite3-exclusive.out" 2>&1 &
sqlite_pid=$!
PIDS+=("$sqlite_pid")
exec {lock_fd}>"$fifo"
echo "PRAGMA locking_mode=EXCLUSIVE; BEGIN EXCLUSIVE; SELECT 'locked';" >&"$lock_fd"
wait_for 10 "$sqlite_pid" "sqlite3 holding an exclusive lock" _has_line '^locked$' "$TMP/sqlite3-exclusive.out" ||
  die "sqlite3 did not take the lock: $(cat "$TMP/sqlite3-exclusive.out")"
run check --busy-timeout 200ms
expect_refused 7 "check against an exclusive lock"
printf 'ROLLBACK;\n.quit\n' >&"$lock_fd"
exec {lock_fd}>&-
wait "$sqlite_pid"
expect_eq 0 "$?" "sqlite3 exit status"
_forget_pid "$sqlite_pid"
db_untouched "the exclusive lock"

step "publish to a broker nobody listens on (exit 9); the rows stay unpublished"
run publish 5 --brokers 127.0.0.1:1 --delivery-timeout-ms 1500
expect_rc 9 "publish to 127.0.0.1:1"
expect_line '^\[publish\] outboxId=1 key=evt-1001 delivery FAILED: .*left unpublished$' "$OUT"
expect_line '^\[publish\] sent=0 marked=0 failed=1 unpublished-left=2$' "$OUT"
# Up to 2 s to learn the broker, the 1.5 s timeout, librdkafka's once-a-second timeout scan.
[ "$RUN_MS" -lt 6000 ] || fail "publish with --delivery-timeout-ms 1500 took ${RUN_MS} ms"
expect_verify business=2,outbox=2,published=0,unpublished=2
db_untouched "the failed publish"

step "publish-hold with nothing to send does not hold (exit 10)"
DB=$TMP/empty-outbox.db
run reset
expect_rc 0 "reset of $DB"
run publish-hold 3 --brokers 127.0.0.1:1 --delivery-timeout 1s
expect_refused 10 "publish-hold 3 on an empty outbox"
expect_line "^outbox-lab: error: publish-hold: no unpublished row in '$DB', so no send to hold before its mark; \`write N\` first\$" "$ERR"
DB=$good_db

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

# --- issue 15, section 4: errors that say the fix ---------------------------------------------------

# expect_usage_hint ERE WHAT: the last run exited 2 with one error line matching ERE.
expect_usage_hint() {
  expect_refused 2 "$2"
  expect_line "$1" "$ERR"
}

step "a mistyped subcommand is named with the closest real one (exit 2)"
run verfy
expect_usage_hint "^outbox-lab: error: unknown subcommand 'verfy'; did you mean 'verify'\? \(see --help\)\$" "verfy"
run frobnicate
expect_usage_hint "^outbox-lab: error: unknown subcommand 'frobnicate' \(see --help for the list\)\$" "frobnicate"

step "the chapter's -Doutbox.db given to the binary, and an unquoted path with spaces (exit 2)"
LAB_BARE=1 run "-Doutbox.db=$DB" reset
expect_usage_hint "^outbox-lab: error: -Doutbox.db=$DB is run.sh's spelling \(the chapter's\); outbox-lab takes --db $DB\$" "-Doutbox.db=PATH to the binary"
LAB_BARE=1 run --db "$TMP/my" dir/x.db reset
expect_usage_hint "^outbox-lab: error: 'dir/x.db' follows the value of --db: a value with spaces must be quoted, as in --db '$TMP/my dir/x.db'\$" "an unquoted path with spaces"
[ ! -e "$TMP/my" ] || fail "$TMP/my was created"

step "an option in the wrong place names where it belongs (exit 2)"
run reset --no-kafka
# shellcheck disable=SC2016  # the backquotes are the message's own, not an expansion
expect_usage_hint '^outbox-lab: error: reset has no option --no-kafka; .*verify.* \(see `outbox-lab reset --help`\)$' "reset --no-kafka"
LAB_BARE=1 run --no-kafka verify
# shellcheck disable=SC2016  # the backquotes are the message's own, not an expansion
expect_usage_hint '^outbox-lab: error: --no-kafka is an option of .*verify.*: write it after the subcommand, as in `outbox-lab [a-z-]+ --no-kafka`$' "--no-kafka before verify"
run verify --no-kafak
# shellcheck disable=SC2016  # the backquotes are the message's own, not an expansion
expect_usage_hint '^outbox-lab: error: unknown option --no-kafak; did you mean --no-kafka\? \(see `outbox-lab verify --help`\)$' "verify --no-kafak"
db_untouched "the usage errors"

step "every subcommand's --help lists the global options"
LAB_BARE=1 run --help
expect_rc 0 "--help"
subcommands=$(awk '/^Subcommands:/ { on = 1; next } on && /^  [a-z]/ { print $1 }' "$OUT")
[ "$(wc -w <<<"$subcommands")" -ge 20 ] || fail "--help lists only $(wc -w <<<"$subcommands") subcommands"
for sub in $subcommands; do
  LAB_BARE=1 run "$sub" --help >/dev/null
  expect_rc 0 "$sub --help"
  for option in --db --brokers --topic -X; do
    awk '/^Global options/ { on = 1 } on' "$OUT" | grep -q -E -- "^ +$option( |,)" ||
      fail "$sub --help: no global option $option under 'Global options'"
  done
done

step "the reset-first hint quotes the command as typed"
DB=$TMP/missing-hint/outbox.db
run verify --no-kafka
expect_refused 6 "verify on a missing file"
expect_line "^outbox-lab: error: open database '$DB': no such file; run \`outbox-lab --db $DB reset\` first\$" "$ERR"
DB=$good_db

# --- a newcomer's bad input: check's exit codes, values the parser used to let through -----------

step "check cannot check: it exits with the code of the error, as every command does"
DB=$TMP/missing-check/outbox.db
run check
expect_refused 6 "check on a missing file"
[ ! -e "$TMP/missing-check" ] || fail "$TMP/missing-check was created"
DB=$vacuumed
run check
expect_refused 6 "check on an SQLite file without the lab schema"
DB=$TMP/text.db
echo hello >"$DB"
run check
expect_refused 5 "check on a text file"
expect_line "^outbox-lab: error: .*'$DB'.*\\(SQLITE_NOTADB\\)" "$ERR"
[ "$(cat "$DB")" = hello ] || fail "check changed the text file"
DB=$TMP
run check
expect_refused 4 "check with a directory as the database"
DB=$good_db
run check
expect_refused 3 "check with no broker configured"
run check -X no.such.prop=1
expect_refused 3 "check -X no.such.prop=1"
run check --brokers 127.0.0.1:1 --read-timeout 2s
expect_refused 8 "check against 127.0.0.1:1"
OUTBOX_FAILPOINTS=vfs.read=error run check --vfs powerloss
expect_refused 11 "check under vfs.read=error"
run check --expect bogus=1
expect_usage_hint "^outbox-lab: error: --expect: expectation 'bogus': unknown key; use .*" "check --expect bogus=1"
run check --expect history_ok=1
expect_usage_hint "^outbox-lab: error: --expect history_ok=1: history keys need --history FILE\$" "check --expect history_ok=1 without --history"
db_untouched "check's refusals"

step "a vfs.* failpoint without --vfs powerloss could never fire: refused (exit 3)"
OUTBOX_FAILPOINTS=vfs.sync=error run write 1
expect_refused 3 "write 1 under vfs.sync=error without --vfs powerloss"
expect_line "^outbox-lab: error: OUTBOX_FAILPOINTS sets vfs.sync, which can never fire here: vfs.\\* failpoints need --vfs powerloss \\(or OUTBOX_VFS=powerloss\\)\$" "$ERR"
db_untouched "the refused vfs failpoint"

step "-X bootstrap.servers wins over --brokers, and the error names the address it used"
run verify --brokers 127.0.0.1:9 -X bootstrap.servers=127.0.0.1:1 --read-timeout 2s
expect_refused 8 "verify with -X bootstrap.servers=127.0.0.1:1"
expect_line "127\\.0\\.0\\.1:1" "$ERR"
expect_no_line "127\\.0\\.0\\.1:9" "$ERR"

step "a broker port librdkafka would wrap (99999 dials 34463) is refused"
run verify --brokers 127.0.0.1:99999
expect_usage_hint "^outbox-lab: error: --brokers: broker '127.0.0.1:99999': the port must be a number from 1 to 65535, got '99999'\$" "--brokers 127.0.0.1:99999"
run verify -X bootstrap.servers=127.0.0.1:70000
expect_refused 3 "-X bootstrap.servers=127.0.0.1:70000"
expect_line "^outbox-lab: error: -X bootstrap.servers: broker '127.0.0.1:70000': the port must be" "$ERR"
db_untouched "the refused broker ports"

step "topic names and database paths that cannot work are usage errors (exit 2)"
saved_topic=$TOPIC
for topic in '' 'bad topic!' '..'; do
  TOPIC=$topic
  run verify --no-kafka
  expect_usage_hint "^outbox-lab: error: --topic: a topic .*" "--topic '$topic'"
done
TOPIC=$saved_topic
for db in ':memory:' '' 'file:uri.db'; do
  DB=$db
  run reset
  expect_usage_hint "^outbox-lab: error: --db: .*give a (plain )?file path, e.g. --db .*" "--db '$db' reset"
done
[ ! -e uri.db ] || fail "reset --db file:uri.db created uri.db"
DB=$good_db

step "numbers and durations out of range name the option and the range (exit 2)"
run power-cut --seed abc
expect_usage_hint "^outbox-lab: error: --seed: must be a whole number between 0 and 9223372036854775807, got 'abc'\$" "power-cut --seed abc"
run power-cut --seed -1
expect_usage_hint "^outbox-lab: error: --seed: must be a whole number between 0 and 9223372036854775807, got '-1'\$" "power-cut --seed -1"
for option in --pipeline --max-attempts; do
  run relay "$option" 3000000000
  expect_usage_hint "^outbox-lab: error: $option: must be a positive integer \\(at most 2147483647\\), got '3000000000'\$" "relay $option 3000000000"
done
run relay --send-timeout 5s --delivery-timeout 6s
expect_usage_hint "^outbox-lab: error: --send-timeout and --delivery-timeout are the same option; give one\$" "relay --send-timeout --delivery-timeout"
run relay --lease 106751991000d
expect_usage_hint "^outbox-lab: error: --lease: must be between 1ms and 2h, got '106751991000d'\$" "relay --lease 106751991000d"
run relay --owner ''
expect_usage_hint "^outbox-lab: error: --owner: an owner cannot be empty: give a name, or leave --owner out for relay-PID@HOST\$" "relay --owner ''"
run relay --backoff-base 2m --backoff-max 1m
expect_usage_hint "^outbox-lab: error: --backoff-base 2m must not exceed --backoff-max 1m: the first retry delay is at most the cap\$" "relay --backoff-base 2m --backoff-max 1m"
# The combinations relay --exactly-once cannot make safe: one line each, exit 22.
run relay --exactly-once --coordination claims --once
expect_rc 22 "relay --exactly-once --coordination claims"
expect_line '^outbox-lab: error: relay --exactly-once --coordination claims: refused: under claims several relays send at once' "$ERR"
expect_error_line "relay --exactly-once --coordination claims"
run relay --exactly-once --pipeline 2 --once
expect_rc 22 "relay --exactly-once --pipeline 2"
expect_line '^outbox-lab: error: relay --exactly-once --pipeline 2: refused: one transaction at a time' "$ERR"
expect_error_line "relay --exactly-once --pipeline 2"
# And the restart tail check's: claims (another relay could send after the check), and
# --exactly-once (it has its own recovery).
run relay --tail-check --coordination claims --once
expect_rc 22 "relay --tail-check --coordination claims"
expect_line '^outbox-lab: error: relay --tail-check --coordination claims: refused: under claims several relays send at once' "$ERR"
expect_error_line "relay --tail-check --coordination claims"
run relay --tail-check --exactly-once --once
expect_rc 22 "relay --tail-check --exactly-once"
expect_line '^outbox-lab: error: relay --tail-check --exactly-once: refused: --exactly-once recovers from its relay-state topic' "$ERR"
expect_error_line "relay --tail-check --exactly-once"
db_untouched "the refused numbers"

step "a page that cannot be written fails before the work (exit 3)"
run bench --quick --html /nonexist/x.html
expect_refused 3 "bench --quick --html /nonexist/x.html"
expect_line "^outbox-lab: error: write '/nonexist/x.html': the folder '/nonexist' does not exist \(create it first: mkdir -p '/nonexist'\)\$" "$ERR"
[ "$RUN_MS" -lt 5000 ] || fail "bench --html /nonexist/x.html took ${RUN_MS} ms before refusing"
run report --html /nonexist/x.html --read-timeout 2s
expect_refused 3 "report --html /nonexist/x.html"
expect_line "^outbox-lab: error: write '/nonexist/x.html': the folder '/nonexist' does not exist" "$ERR"

step "run.sh: the same hints, its own spelling in them, CMake errors shown, no broker for a typo"
# A copy of the repository's entry point around the binary under test; its cmake is a stand-in
# (on PATH) that builds nothing and, with FAKE_CMAKE_ERROR=1, prints a CMake Error yet exits 0.
fake_repo=$TMP/repo
mkdir -p "$fake_repo/scripts" "$fake_repo/build" "$TMP/fake-bin"
cp "$REPO_DIR/run.sh" "$fake_repo/run.sh"
cp "$REPO_DIR/scripts/wait-until.sh" "$fake_repo/scripts/"
ln -s "$(realpath "$LAB_BIN")" "$fake_repo/build/outbox-lab"
: >"$fake_repo/build/CMakeCache.txt"
cat >"$TMP/fake-bin/cmake" <<'SH'
#!/bin/sh
[ "${FAKE_CMAKE_ERROR:-0}" = 1 ] && printf 'CMake Error at CMakeLists.txt:1 (message):
  injected by bad-input.sh
'
exit 0
SH
chmod +x "$TMP/fake-bin/cmake"
# run_sh ARGS...: the copy's run.sh with its own state dir; stdout, stderr, exit code as `run`.
run_sh() {
  RUNS=$((RUNS + 1))
  OUT=$TMP/run-$RUNS.out
  ERR=${OUT%.out}.err
  echo "\$ $fake_repo/run.sh $*"
  # Without OUTBOX_LAB_BIN (ctest sets it): run.sh would take that binary and build nothing.
  env -u OUTBOX_LAB_BIN PATH="$TMP/fake-bin:$PATH" OUTBOX_LAB_STATE="$TMP/run-sh-state" timeout -k 5 60 \
    "$fake_repo/run.sh" "$@" </dev/null >"$OUT" 2>"$ERR"
  RC=$?
  cat "$OUT"
  sed 's/^/  (stderr) /' "$ERR"
  [ "$RC" -eq 0 ] || echo "  (exit $RC)"
}
FAKE_CMAKE_ERROR=1 run_sh "-Doutbox.db=$DB" OutboxLab status
expect_rc 125 "run.sh with a CMake Error in its build log"
expect_line '^CMake Error at CMakeLists.txt:1 \(message\):$' "$ERR"
expect_line '^run.sh: error: the build log has CMake errors' "$ERR"
expect_no_line '^\[status\]' "$OUT"
run_sh "-Doutbox.db=$DB" OutboxLab verfy
expect_usage_hint "^outbox-lab: error: unknown subcommand 'verfy'; did you mean 'verify'\? \(see --help\)\$" "run.sh verfy"
run_sh broker-status
expect_rc 3 "run.sh broker-status after a mistyped subcommand (no broker started for it)"
OUTBOX_KAFKA=real run_sh broker-addr
expect_rc 3 "run.sh broker-addr with OUTBOX_KAFKA=real and no Kafka running"
expect_line "^run.sh: OUTBOX_KAFKA=real and scripts/kafka.sh's Kafka is not running" "$ERR"
run_sh dmeo
expect_rc 2 "run.sh dmeo"
expect_line "^run.sh: error: unknown command 'dmeo'; did you mean './run.sh demo'\? \(see ./run.sh --help\)\$" "$ERR"
run_sh "-Doutbox.db=$DB" OutboxLab write-hold
expect_usage_hint "^outbox-lab: error: write-hold needs N \(.+\), e.g. \`$fake_repo/run.sh -Doutbox.db=$DB OutboxLab write-hold 5\`\$" "run.sh write-hold without N"
run_sh "-Doutbox.db=$DB" outboxlab verfy
expect_usage_hint "^outbox-lab: error: unknown subcommand 'verfy'; did you mean 'verify'\? \(see --help\)\$" "run.sh outboxlab (lower case) verfy"
run_sh -Doutbox.db "$DB" OutboxLab reset
expect_usage_hint "^outbox-lab: error: -Doutbox.db takes its path after '=', with no space: -Doutbox.db=$DB\$" "run.sh -Doutbox.db PATH"
run_sh "-Doutbox.db=$TMP/my" dir/x.db OutboxLab reset
expect_usage_hint "^outbox-lab: error: 'dir/x.db' follows the value of --db: a value with spaces must be quoted, as in -Doutbox.db='$TMP/my dir/x.db'\$" "run.sh with an unquoted path with spaces"
run_sh "-Doutbox.db=$TMP/missing-hint/outbox.db" OutboxLab write-hold 1
expect_refused 6 "run.sh write-hold on a missing file"
expect_line "^outbox-lab: error: open database '$TMP/missing-hint/outbox.db': no such file; run \`$fake_repo/run.sh -Doutbox.db=$TMP/missing-hint/outbox.db OutboxLab reset\` first\$" "$ERR"
[ ! -e "$TMP/missing-hint" ] || fail "$TMP/missing-hint was created"
db_untouched "the run.sh usage errors"

# --- issue 9: rows written by other programs -----------------------------------------------------
# From here on a broker runs (the steps above pass their own --brokers or none).

step "bytes that are not UTF-8 (C3 28) in each TEXT column: the relay delivers them unchanged"
start_broker
DB=$TMP/foreign-bytes.db
run reset
expect_rc 0 "reset"
run write 2 --quiet
expect_rc 0 "write 2"
echo "\$ sqlite3 $DB  # four loans and their events, each with X'C328' in one TEXT column"
sqlite3 -bail "$DB" <<'SQL' || die "sqlite3 could not insert the rows with foreign bytes"
.timeout 5000
BEGIN IMMEDIATE;
INSERT INTO business_loan(loan_id, book_id, member_id, status, created_at)
  SELECT loan, 'B-1', 'M-1', 'BORROWED', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)
  FROM (SELECT 'L-b1' AS loan UNION ALL SELECT 'L-' || CAST(X'C328' AS TEXT)
        UNION ALL SELECT 'L-b3' UNION ALL SELECT 'L-b4');
INSERT INTO outbox(event_id, aggregate_id, event_type, payload) VALUES
  ('evt-id-' || CAST(X'C328' AS TEXT), 'L-b1', 'LoanCreated', '{"n":1}'),
  ('evt-agg', 'L-' || CAST(X'C328' AS TEXT), 'LoanCreated', '{"n":2}'),
  ('evt-type', 'L-b3', 'Loan' || CAST(X'C328' AS TEXT), '{"n":3}'),
  ('evt-payload', 'L-b4', 'LoanCreated', 'raw ' || CAST(X'C328' AS TEXT));
COMMIT;
SQL
bytes_history=$TMP/foreign-bytes.history.jsonl
run --history "$bytes_history" relay --until-empty --json --key aggregate-id
expect_rc 0 "relay --until-empty --history over rows with foreign bytes"
expect_eq 6 "$(relay_final "$OUT" marked)" "rows the relay marked published"
expect_eq 0 "$(relay_final "$OUT" pending)" "rows left pending"
jq -e . "$bytes_history" >/dev/null || fail "the relay's history is not valid JSON lines"
run consume
expect_rc 0 "consume"
# consume prints key,value byte for byte: the aggregate id (the key) and the payload arrive as written.
grep -a -q -F "L-$(printf '\xc3(')," "$OUT" || fail "no record keyed L-C3 28 on the topic"
grep -a -q -F ",raw $(printf '\xc3(')" "$OUT" || fail "no record whose value is raw C3 28"
# check matches outbox event ids to the records' event_id headers byte for byte: ok=6, nothing lost.
run check --json
expect_rc 0 "check --json over foreign bytes"
jq -e . "$OUT" >/dev/null || fail "check --json printed invalid JSON"
expect_json "$OUT" '.valid == true and .ok == 6 and (.lost | length) == 0' "check --json"
for args in "status --json" "verify --json"; do
  # shellcheck disable=SC2086  # split the words of args on purpose
  run $args
  expect_rc 0 "$args over foreign bytes"
  jq -e . "$OUT" >/dev/null || fail "$args printed invalid JSON"
done
# A --topic the broker does not have, while rows are marked published: an error naming the fix
# (exit 8), not six lost events. An empty history file: each record is listed as unexpected.
saved_topic=$TOPIC
TOPIC=nosuch
for sub in check verify; do
  run "$sub"
  expect_refused 8 "$sub --topic nosuch"
  expect_line "^outbox-lab: error: topic 'nosuch' does not exist on $BROKER; check --topic \\(6 outbox rows are marked published\\)\$" "$ERR"
done
TOPIC=$saved_topic
: >"$TMP/empty.history.jsonl"
run check --history "$TMP/empty.history.jsonl"
expect_rc 1 "check with an empty history file"
expect_line '^\[check\] history: attempts=0 .* unexpected=6$' "$OUT"
expect_line '^\[check\] unexpected \(in Kafka, but no writer in the history attempted it\): evt-' "$OUT"
expect_line "^\\[check\\] the history file is empty: was it written by this run's processes with --history/OUTBOX_HISTORY\\?\$" "$OUT"
# Deleting the row behind evt-id- C3 28 makes check report it as phantom, in JSON and in text.
sqlite3 "$DB" "DELETE FROM outbox WHERE event_id = 'evt-id-' || CAST(X'C328' AS TEXT)" ||
  die "sqlite3 could not delete the row"
run check --json
expect_rc 1 "check --json with a phantom of foreign bytes"
expect_json "$OUT" '.phantom[0].hex == "6576742d69642dc328"' "check --json phantom as hex"
run check
expect_rc 1 "check with a phantom of foreign bytes"
expect_line '^\[check\] phantom: evt-id-\\xC3\($' "$OUT"

step "the created_at contract: bad INSERTs fail in the writer's transaction"
DB=$TMP/contract.db
run reset
expect_rc 0 "reset"
for created_at in 1700000000 "'2026-11-30 10:00:00'" 1700000000000.5 NULL; do
  echo "\$ sqlite3 $DB  # INSERT with created_at $created_at inside BEGIN ... COMMIT"
  if sqlite3 -bail "$DB" "BEGIN; INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at) VALUES ('evt-c', 'L-c', 'T', '{}', $created_at); COMMIT;" 2>"$TMP/sqlite3.err"; then
    fail "an INSERT with created_at $created_at was accepted"
  fi
  grep -q 'outbox.created_at must be an integer in epoch ms' "$TMP/sqlite3.err" ||
    fail "created_at $created_at: sqlite3 said $(cat "$TMP/sqlite3.err")"
done
before_ms=$(($(date +%s%N) / 1000000))
sqlite3 -bail "$DB" "INSERT INTO outbox(event_id, aggregate_id, event_type, payload) VALUES ('evt-now', 'L-n', 'T', '{}')" ||
  fail "an INSERT without created_at was refused"
after_ms=$(($(date +%s%N) / 1000000))
created=$(sqlite3 "$DB" "SELECT created_at FROM outbox WHERE event_id = 'evt-now'")
if [ "$created" -lt $((before_ms - 1)) ] || [ "$created" -gt $((after_ms + 1)) ]; then
  fail "created_at of an INSERT without it: $created, expected $before_ms..$after_ms"
fi
run status --json
expect_json "$OUT" '.unpublished == 1 and .bad_created_at == 0 and .oldest_unpublished_age_ms < 60000' "status after the contract INSERTs"

step "a schema 2 database with rows in seconds and text migrates; status names them"
DB=$TMP/schema2.db
run reset
expect_rc 0 "reset"
run write 1 --quiet
sqlite3 -bail "$DB" <<'SQL' || die "sqlite3 could not make a schema 2 database"
DROP TRIGGER outbox_created_at_insert;
DROP TRIGGER outbox_created_at_update;
PRAGMA user_version = 2;
INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at)
  VALUES ('evt-seconds', 'L-s', 'T', '{}', 1764496800),
         ('evt-text', 'L-t', 'T', '{}', '2026-11-30 10:00:00');
SQL
run status
expect_rc 0 "status on a schema 2 database"
expect_line '^\[status\] bad-created-at=2 ids=2,3: ' "$OUT"
run status --json
expect_json "$OUT" '.bad_created_at == 2 and .bad_created_at_ids == [2,3] and .oldest_unpublished_age_ms < 60000' "status --json on the migrated database"
[ "$(sqlite3 "$DB" 'PRAGMA user_version')" = 7 ] || fail "the database was not migrated to schema 7"
run metrics
expect_line '^outbox_bad_created_at_rows 2$' "$OUT"

step "the headers column: good headers reach Kafka as record headers; each bad one parks its row"
DB=$TMP/headers.db
run reset
expect_rc 0 "reset"
echo "\$ sqlite3 $DB  # events with a good, a NULL and five bad headers columns"
sqlite3 -bail "$DB" <<'SQL' || die "sqlite3 could not insert the rows with headers"
INSERT INTO outbox(event_id, aggregate_id, event_type, payload, headers) VALUES
  ('evt-h-ok', 'L-h1', 'LoanCreated', '{}',
   '{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tenant":"acme"}'),
  ('evt-h-null', 'L-h2', 'LoanCreated', '{}', NULL),
  ('evt-h-json', 'L-h3', 'LoanCreated', '{}', '{"tenant":'),
  ('evt-h-bytes', 'L-h4', 'LoanCreated', '{}', '{"t":"' || CAST(X'C328' AS TEXT) || '"}'),
  ('evt-h-array', 'L-h5', 'LoanCreated', '{}', '["acme"]'),
  ('evt-h-number', 'L-h6', 'LoanCreated', '{}', '{"tenant":7}'),
  ('evt-h-forged', 'L-h7', 'LoanCreated', '{}', '{"event_id":"evt-h-ok"}');
SQL
run relay --until-empty --json --fail-on-parked
expect_rc 14 "relay --until-empty --fail-on-parked over bad headers"
expect_eq 2 "$(relay_final "$OUT" marked)" "rows with good or no headers marked published"
expect_eq 5 "$(relay_final "$OUT" parked)" "rows with bad headers parked at once"
expect_eq 0 "$(relay_final "$OUT" pending)" "rows left pending"
run parked --json
expect_rc 0 "parked --json"
expect_json "$OUT" '.parked == 5 and ([.rows[] | select(.attempts == 1 and (.last_error | startswith("headers column: ")))] | length) == 5' "parked rows with the headers reason"
expect_json "$OUT" '[.rows[] | select(.event_id == "evt-h-json")][0].last_error == "headers column: invalid JSON: it ends after 10 bytes"' "the invalid JSON row's reason"
echo "\$ kcat -C -e -f '%k %h\\n'"
kcat -b "$BROKER" -t "$TOPIC" -C -e -q -f '%k %h\n' >"$TMP/headers.kcat" 2>"$TMP/kcat.err" || die "kcat failed: $(head -n 1 "$TMP/kcat.err")"
cat "$TMP/headers.kcat"
expect_count 2 '^evt-h-' "$TMP/headers.kcat"  # the topic also holds the earlier steps' records
expect_line '^evt-h-ok event_id=evt-h-ok,event_type=LoanCreated,outbox_id=1,run_id=[0-9]*-[0-9a-f]*,traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01,tenant=acme$' "$TMP/headers.kcat"
expect_line '^evt-h-null event_id=evt-h-null,event_type=LoanCreated,outbox_id=2,run_id=[0-9]*-[0-9a-f]*$' "$TMP/headers.kcat"
run publish 10
expect_rc 9 "publish stops at the first row with bad headers"
expect_line 'headers column: invalid JSON: it ends after 10 bytes' "$OUT"

finish
