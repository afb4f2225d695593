#!/usr/bin/env bash
# The server ends the relay's idle sessions, on PostgreSQL: a relay whose connections carry
# idle_session_timeout = 2 s (a setting of its URL only, not of the shared server). Between
# batches the relay's second connection, which marks them, sits idle, and so does its LISTEN
# connection; a server, pooler or firewall that ends idle sessions closes both.
# Injects: for each coordination mode (claims, leader): a relay (forever, --idle-max 200ms, so its
#          first connection polls often enough to stay open) publishes 3 loans; then the scenario
#          waits until the server has ended every session of the relay's but one (the poller's),
#          and writes 3 more loans.
# Expects: the relay marks the second batch within 10 s on a reopened session: no "database
#          connection lost" line, no reconnect, exit 0 on SIGTERM, and check finds 6 records and
#          no duplicate. (Before the relay reopened a session ended while idle, that mark failed:
#          the batch was sent again, and in claims mode its rows waited out the 30 s lease.)
# Skipped (exit 77) only when OUTBOX_PG_URL is unset; scripts/test.sh sets it.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

use_postgres
start_broker

# The relay's own URL: the scenario's schema, the timeout, and a name to find its sessions by.
APP=idle-cut-$$
RELAY_DB="$DB%20-cidle_session_timeout%3D2000&application_name=$APP"

# _relay_pids: the PIDs of the server's backends serving the relay, one per line.
_relay_pids() {
  psql "$PG_BASE_URL" -qAtc "SELECT pid FROM pg_stat_activity WHERE application_name = '$APP' ORDER BY pid"
}

# _at_most_one_left PIDS...: no more than one of the backends PIDS still runs.
_at_most_one_left() {
  local alive
  alive=$(psql "$PG_BASE_URL" -qAtc "SELECT count(*) FROM pg_stat_activity WHERE pid IN ($(IFS=,; echo "$*"))")
  [ "$alive" -le 1 ]
}

# _published_within PID N SECONDS: N rows published, none waiting, within SECONDS.
_published_within() {
  wait_for "$3" "$1" "$2 rows published" status_is ".published == $2 and .unpublished == 0"
}

for mode in claims leader; do
  step "$mode: a relay whose sessions the server ends after 2 s idle publishes 3 loans"
  run reset
  expect_rc 0 "reset"
  DB=$RELAY_DB start_bg "relay-$mode" relay --coordination "$mode" --idle-max 200ms
  pid=$BG_PID log=$BG_LOG
  run write 3 --quiet
  expect_rc 0 "write 3"
  _published_within "$pid" 3 30

  step "$mode: the server ends the relay's idle sessions (all but the poller's)"
  mapfile -t before < <(_relay_pids)
  echo "(the relay's sessions: ${before[*]})"
  [ "${#before[@]}" -ge 2 ] || fail "$mode: expected the relay's first and second connections, found ${#before[@]} sessions"
  wait_for 30 "$pid" "the server ending the relay's idle sessions" _at_most_one_left "${before[@]}"
  echo "(still running: $(_relay_pids | tr '\n' ' '))"

  step "$mode: 3 more loans are marked on a reopened session, without a reconnect"
  run write 3 --quiet
  expect_rc 0 "write 3 more"
  _published_within "$pid" 6 10
  term_relay "$pid" "relay-$mode"
  sed 's/^/  | /' "$log"
  expect_no_line 'connection lost|reconnected' "$log"
  expect_line 'stopped on signal: batches=[0-9]+ acked=6 marked=6 failed=0 parked=0 fenced=0 pending=0' "$log"
  expect_check "valid=1,lost=0,ok=6,duplicated=0"
done

finish
