#!/usr/bin/env bash
# The server ends the relay's idle sessions, on PostgreSQL: a relay whose connections carry
# idle_session_timeout = 3 s (a setting of its URL only, not of the shared server). Between
# batches the relay's second connection, which marks them, sits idle, and so does its LISTEN
# connection; a server, pooler or firewall that ends idle sessions closes both.
# Injects: for each coordination mode (claims, leader): a relay (forever, --idle-max 200ms, so its
#          first connection polls often enough to stay open) publishes 3 loans; then the scenario
#          finds the relay's session that ran the mark (pg_stat_activity), waits until the server
#          has ended it, and writes 3 more loans.
# Expects: the relay marks the second batch within 10 s on a reopened session: no "database
#          connection lost" line, no reconnect, a final line that counts the sessions opened
#          again, exit 0 on SIGTERM, and check finds 6 records and no duplicate. (Before the
#          relay reopened a session ended while idle, that mark failed: the batch was sent
#          again, and in claims mode its rows waited out the 30 s lease.)
# Skipped (exit 77) only when OUTBOX_PG_URL is unset; scripts/test.sh sets it.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

use_postgres
start_broker

# The relay's own URL: the scenario's schema, the timeout, and a name to find its sessions by.
APP=idle-cut-$$
RELAY_DB="$DB%20-cidle_session_timeout%3D3000&application_name=$APP"

# _settle_pid: the server backend of the relay's second connection, the one that marks batches
# (its last statement set published = true); empty when there is none.
_settle_pid() {
  psql "$PG_BASE_URL" -qAtc "SELECT pid FROM pg_stat_activity WHERE application_name = '$APP' AND query LIKE '%published = true%' ORDER BY pid LIMIT 1"
}

# _gone PID: the server has no backend PID any more.
_gone() {
  [ "$(psql "$PG_BASE_URL" -qAtc "SELECT count(*) FROM pg_stat_activity WHERE pid = $1")" = 0 ]
}

# _published_within PID N SECONDS: N rows published, none waiting, within SECONDS.
_published_within() {
  wait_for "$3" "$1" "$2 rows published" status_is ".published == $2 and .unpublished == 0"
}

for mode in claims leader; do
  step "$mode: a relay whose sessions the server ends after 3 s idle publishes 3 loans"
  run reset
  expect_rc 0 "reset"
  DB=$RELAY_DB start_bg "relay-$mode" relay --coordination "$mode" --idle-max 200ms
  pid=$BG_PID log=$BG_LOG
  run write 3 --quiet
  expect_rc 0 "write 3"
  _published_within "$pid" 3 30

  step "$mode: the server ends the idle session the relay marks batches on"
  settle_pid=$(_settle_pid)
  [ -n "$settle_pid" ] || fail "$mode: no session of the relay's ran the mark (is the second connection open?)"
  echo "(the relay's mark ran on backend ${settle_pid:-none})"
  wait_for 30 "$pid" "the server ending the relay's idle settle session" _gone "${settle_pid:-0}"

  step "$mode: 3 more loans are marked on a reopened session, without a reconnect"
  run write 3 --quiet
  expect_rc 0 "write 3 more"
  _published_within "$pid" 6 10
  term_relay "$pid" "relay-$mode"
  sed 's/^/  | /' "$log"
  expect_no_line 'connection lost|reconnected' "$log"
  expect_line '^\[relay\] opened [1-9][0-9]* database sessions again that the server had ended while they sat idle' "$log"
  expect_line 'stopped on signal: batches=[0-9]+ acked=6 marked=6 failed=0 parked=0 fenced=0 pending=0' "$log"
  expect_check "valid=1,lost=0,ok=6,duplicated=0"
done

finish
