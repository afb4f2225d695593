#!/usr/bin/env bash
# `reset` from another process while a WAL relay (relay --source wal) streams the outbox's slot, and
# while it is down, on PostgreSQL (a schema of its own).
# Injects: (1) a WAL relay runs with --batch-size 50 --linger 60s; 20 loans are written, then
#          `reset`, then 30 loans: the relay receives the 20, the reset and the 30 in one batch.
#          (2) the relay sends 10 loans and stops; 15 more are written and not sent; `reset`; 25
#          loans; the relay starts again from the slot's confirmed position.
# Expects: the relay lives through each reset (it ends with 0 on SIGTERM) and prints one reset line
#          naming the new run id, read from the stream at the reset's commit. (1) the 20 go out
#          under the old run id and the 30 under the new one: check ok=30 lost=0 with 20 other
#          runs' records. (2) the 15 rows of the outbox the reset dropped, whose run the
#          restarted relay cannot know, are not sent (dropped=15); the 25 go out under the new run
#          id: check ok=25 lost=0. Before, the reset took the new outbox out of the relay's
#          publication: the new rows were never streamed (check: lost), even after a restart.
# Skipped (exit 77) only when OUTBOX_PG_URL is unset; scripts/test.sh sets it.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

use_postgres
start_broker

# start_wal NAME ARGS...: a WAL relay in the background, waited for until it streams.
start_wal() {
  local name=$1
  shift
  start_bg "$name" relay --source wal --json "$@"
  wait_for 60 "$BG_PID" "$name streaming" wal_streaming "$BG_LOG" ||
    die "$name did not start streaming"
  PG_WAL_SLOT=$(json_lines "$BG_LOG" | jq -r 'select(.report == "wal-open") | .slot' | head -n 1)
}
# stop_wal PID NAME: SIGTERM; the relay must end by itself with 0 and its walsender let go.
stop_wal() {
  echo "\$ kill -TERM $1"
  kill -TERM "$1"
  wait_exit "$1" 30 "$2"
  expect_eq 0 "$BG_RC" "exit code of $2 (it lived through the reset)"
  wait_until 10 "the slot released after $2 stopped" _wal_slot_inactive
}
# reset_lines LOG: the relay's reset reports.
reset_lines() { json_lines "$1" | jq -c 'select(.report == "reset")'; }

step "a reset while the WAL relay streams: old rows, the reset and new rows in one batch"
run reset
expect_rc 0 "reset"
start_wal relay-a --batch-size 50 --linger 60s
pid_a=$BG_PID log_a=$BG_LOG
run write 20 --quiet
expect_rc 0 "write 20"
old_run=$(run_id)
run reset
expect_rc 0 "reset while the WAL relay streams"
expect_line '^\[reset\] removed .* outbox=20 ' "$OUT"
new_run=$(run_id)
[ "$old_run" != "$new_run" ] || fail "the reset did not start a new run ($new_run)"
# The reset listed the new tables in the relay's publication, in its own transaction.
publication_sql="SELECT tablename FROM pg_publication_tables WHERE pubname = '$PG_WAL_SLOT'
  AND schemaname = current_schema() ORDER BY 1"
expect_eq "outbox outbox_run" "$(psql "$DB" -qAtc "$publication_sql" | tr '\n' ' ' | sed 's/ $//')" \
  "tables of the relay's publication after the reset"
run write 30 --quiet
expect_rc 0 "write 30 after the reset"
wait_for 90 "$pid_a" "relay-a sending the 20 and the 30" wal_sent 50 "$log_a"
reset_lines "$log_a"
expect_eq 1 "$(reset_lines "$log_a" | wc -l)" "reset lines of relay-a"
jq -e --arg old "$old_run" --arg new "$new_run" \
  '.previous_run == $old and .run == $new and .dropped == 0' <<<"$(reset_lines "$log_a")" >/dev/null ||
  fail "relay-a's reset line does not name run $old_run ending and run $new_run beginning"
batches=$(json_lines "$log_a" | jq -c 'select(.report == "batch") | .records' | tr '\n' ' ')
echo "(relay-a's batches, records each: $batches)"
stop_wal "$pid_a" relay-a
expect_no_line 'error:' "$log_a"
expect_check "valid=1,lost=0,stuck=0,phantom=0,ok=30,outbox_rows=30,duplicated=0"
run check --json
expect_json "$OUT" '.run_id == "'"$new_run"'" and .ok == 30 and .other_run_records == 20' \
  "check --json: the 30 under the new run id, the 20 under the old one"

step "a reset while the WAL relay is down: the restarted relay skips the dropped outbox's rows"
run reset
expect_rc 0 "reset"
start_wal relay-b
pid_b=$BG_PID log_b=$BG_LOG
run write 10 --quiet
expect_rc 0 "write 10"
wait_for 60 "$pid_b" "relay-b sending the 10" wal_sent 10 "$log_b"
stop_wal "$pid_b" relay-b
run write 15 --quiet
expect_rc 0 "write 15 with no relay running"
run reset
expect_rc 0 "reset with 15 rows not sent"
expect_line '^\[reset\] removed .* outbox=25 ' "$OUT"
new_run=$(run_id)
run write 25 --quiet
expect_rc 0 "write 25 after the reset"
start_wal relay-c
pid_c=$BG_PID log_c=$BG_LOG
wait_for 60 "$pid_c" "relay-c sending the 25" wal_sent 25 "$log_c"
reset_lines "$log_c"
jq -e --arg new "$new_run" '.previous_run == null and .run == $new and .dropped == 15' \
  <<<"$(reset_lines "$log_c")" >/dev/null ||
  fail "relay-c's reset line does not name run $new_run with the 15 rows of the dropped outbox"
stop_wal "$pid_c" relay-c
expect_eq 25 "$(relay_final "$log_c" records)" "records relay-c sent"
expect_no_line 'error:' "$log_c"
expect_check "valid=1,lost=0,stuck=0,phantom=0,ok=25,outbox_rows=25,duplicated=0"
run check --json
expect_json "$OUT" '.run_id == "'"$new_run"'" and .ok == 25 and .other_run_records == 60' \
  "check --json: the 25 under the new run id; 20 + 30 + 10 of the earlier runs"

finish
