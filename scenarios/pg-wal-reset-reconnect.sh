#!/usr/bin/env bash
# A WAL relay (relay --source wal) that loses its walsender right after it received a `reset`, on
# PostgreSQL (a schema of its own).
# Injects: a WAL relay runs with --batch-size 1000 --linger 20s; 20 loans, `reset`, 30 loans: the
#          relay receives the 20, the reset and the 30 and lingers; the walsender is terminated
#          (pg_terminate_backend) before the batch is sent; the relay reconnects by itself
#          (same process) and streams again from the slot's confirmed position, before the 20.
#          Then a second reset and 1000 loans (a full batch: sent and confirmed at once), a second
#          termination and 1000 loans more.
# Expects: the 20 go out under the old run id, the 30 under the new one (check: ok=30 lost=0 with
#          20 records of other runs); after the second reconnect, from past the second reset, the
#          loans go out under the newest run (ok=2000). Before, the reconnect read the run id
#          from the database again (the new one) and dropped the 20 streamed again as rows of a
#          dropped outbox (dropped=20): they were never sent, though the relay had seen their run.
# Synchronised on the relay's JSON lines (reset, wal-reconnect, wal-open, batch).
# Skipped (exit 77) only when OUTBOX_PG_URL is unset; scripts/test.sh sets it.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

use_postgres
start_broker

_lines() { [ "$(json_lines "$3" | jq -c "select(.report == \"$2\")" | wc -l)" -ge "$1" ]; }
terminate_walsender() {
  echo "\$ SELECT pg_terminate_backend(walsender of $PG_WAL_SLOT)"
  psql "$PG_BASE_URL" -qAtc "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
    WHERE slot_name = '$PG_WAL_SLOT' AND active" | grep -qx t || die "no walsender to terminate"
}

step "the walsender lost after the relay received the 20, the reset and the 30"
run reset
expect_rc 0 "reset"
start_bg relay relay --source wal --json --batch-size 1000 --linger 20s
pid=$BG_PID log=$BG_LOG
wait_for 60 "$pid" "relay streaming" _lines 1 wal-open "$log" || die "relay did not stream"
PG_WAL_SLOT=$(json_lines "$log" | jq -r 'select(.report == "wal-open") | .slot' | head -n 1)
run write 20 --quiet
expect_rc 0 "write 20"
old_run=$(run_id)
run reset
expect_rc 0 "reset while the WAL relay streams"
new_run=$(run_id)
run write 30 --quiet
expect_rc 0 "write 30 after the reset"
wait_for 30 "$pid" "the relay's reset line" _lines 1 reset "$log" || die "the relay saw no reset"
terminate_walsender
wait_for 30 "$pid" "the relay streaming again" _lines 2 wal-open "$log" || die "no reconnect"
wait_for 90 "$pid" "the relay sending the 20 and the 30" wal_sent 50 "$log"
json_lines "$log" | jq -c 'select(.report != "batch")'
jq -e --arg old "$old_run" --arg new "$new_run" '.previous_run == $old and .run == $new and .dropped == 0' \
  <<<"$(json_lines "$log" | jq -c 'select(.report == "reset")' | tail -n 1)" >/dev/null ||
  fail "the reset line after the reconnect does not name run $old_run ending, none dropped"

step "the walsender lost again after a second reset was received and confirmed"
run reset
expect_rc 0 "second reset"
newest_run=$(run_id)
run write 1000 --batch 100 --quiet
expect_rc 0 "write 1000"
wait_for 90 "$pid" "the relay sending the 1000" wal_sent 1050 "$log"
terminate_walsender
wait_for 30 "$pid" "the relay streaming again" _lines 3 wal-open "$log" || die "no reconnect"
run write 1000 --batch 100 --quiet
expect_rc 0 "write 1000 after the reconnect"
wait_for 90 "$pid" "the relay sending the 1000 more" wal_sent 2050 "$log"
echo "\$ kill -TERM $pid"
kill -TERM "$pid"
wait_exit "$pid" 30 relay
expect_eq 0 "$BG_RC" "exit code of the relay"
wait_until 10 "the slot released" _wal_slot_inactive
expect_no_line 'error:' "$log"
expect_check "valid=1,lost=0,stuck=0,phantom=0,ok=2000,outbox_rows=2000,duplicated=0"
run check --json
expect_json "$OUT" '.run_id == "'"$newest_run"'" and .ok == 2000 and .other_run_records == 50' \
  "check --json: the 2000 under the newest run id, the 20 and the 30 under theirs"

finish
