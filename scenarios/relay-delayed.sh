#!/usr/bin/env bash
# Delayed publish: `write --delay` sets each row's not_before; the relay sends no row before it,
# in both coordination modes, and under block-key a delayed row holds back the later rows of its
# aggregate.
# Injects: per mode (claims, then leader), on a fresh reset: 50 loans written with --delay 2s,
#          then 50 renewals of the same 50 loans without a delay (each held behind its loan's
#          delayed first event), 5 loans with --delay 1h (they must not go during the run) and
#          10 loans without a delay; one relay --key aggregate-id runs through it. Then, as a
#          foreign writer may, not_before of the 1 h rows is set to -1 (untrusted: "due now").
# Expects: the relay publishes the 110 rows that come due within seconds and keeps the 5 others:
#          status says `unpublished=5 pending=0 delayed=5 oldest-pending-age-ms=0` (delayed rows
#          do not age the backlog), metrics (the command and the relay's GET /metrics)
#          outbox_delayed_rows 5 and outbox_oldest_pending_age_seconds 0, and GET /readyz 200
#          under --ready-max-age 1s; no published row has published_at before its
#          not_before (the database's own record, whatever the machine's load); after the -1 the
#          relay sends the 5 at once, its stop line says acked=115, and check is valid with 0
#          order violations: every LoanRenewed after its loan's delayed LoanCreated.
# With DELAY_BACKEND=postgres (pg-relay-delayed.sh) it runs on PostgreSQL, not_before on the
# server's clock.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [ "${DELAY_BACKEND:-sqlite}" = postgres ]; then
  SCENARIO=pg-relay-delayed
  use_postgres
fi

# sql QUERY: one value from this scenario's database, as a foreign program reads it.
sql() {
  if [ "${DELAY_BACKEND:-sqlite}" = postgres ]; then
    psql "$DB" -v ON_ERROR_STOP=1 -Atqc "$1"
  else
    sqlite3 "$DB" "$1"
  fi
}

command -v curl >/dev/null || die "curl is missing (scripts/install-deps.sh installs it)"

http_port() { sed -n 's/^\[relay\] http: listening on [^ ]*:\([0-9][0-9]*\) .*/\1/p' "$1" | head -n 1; }
# shellcheck disable=SC2317  # called through wait_for
_http_is() { [ "$(curl -s -m 5 -o "$TMP/http.body" -w '%{http_code}' "http://127.0.0.1:$PORT$1")" = "$2" ]; }

# shellcheck disable=SC2317  # called through wait_for
_published() {
  "$LAB_BIN" "${LAB_ARGS[@]}" status --json 2>/dev/null | jq -e ".published == $1" >/dev/null
}

start_broker

for mode in claims leader; do
  step "$mode: 50 loans delayed 2 s, their 50 renewals, 5 loans delayed 1 h, 10 loans at once"
  run reset
  expect_rc 0 "reset"
  run write 50 --workload 50 --delay 2s --quiet
  expect_rc 0 "write 50 --delay 2s"
  expect_line '^\[write\] committed=50 delay=2s$' "$OUT"
  run write 50 --workload 50 --quiet
  expect_rc 0 "write 50 renewals"
  run write 5 --delay 1h --quiet
  expect_rc 0 "write 5 --delay 1h"
  run write 10 --quiet
  expect_rc 0 "write 10"
  expect_eq 55 "$(sql 'SELECT COUNT(*) FROM outbox WHERE not_before IS NOT NULL')" \
    "rows written with a not_before"

  step "$mode: a relay sends what comes due and keeps the 1 h rows"
  start_bg "relay-$mode" relay --coordination "$mode" --key aggregate-id --idle-max 200ms \
    --http 127.0.0.1:0 --ready-max-age 1s
  relay_pid=$BG_PID relay_log=$BG_LOG
  lab_args
  wait_for 20 "$relay_pid" "http listening line" _has_line '^\[relay\] http: listening on 127.0.0.1:' "$relay_log" ||
    die "relay --http never listened: $(cat "$relay_log")"
  PORT=$(http_port "$relay_log")
  wait_for 60 "$relay_pid" "the 110 rows that come due are published" _published 110
  run status
  expect_line '^\[status\] unpublished=5 pending=0 delayed=5 oldest-pending-age-ms=0 ' "$OUT"
  run status --json
  expect_json "$OUT" '.delayed == 5 and .pending == 0 and .behind_delayed == 0 and .published == 110' \
    "status --json counts the delayed rows apart"
  run metrics
  expect_line '^outbox_delayed_rows 5$' "$OUT"
  expect_line '^outbox_pending_rows 0$' "$OUT"
  expect_line '^outbox_oldest_pending_age_seconds 0$' "$OUT"
  echo "\$ curl http://127.0.0.1:$PORT/metrics"
  _http_is /metrics 200 || fail "GET /metrics did not answer 200"
  grep -E '^outbox_(pending|delayed|behind_delayed)_rows |^outbox_oldest_pending_age_seconds ' "$TMP/http.body" | sed 's/^/  | /'
  expect_line '^outbox_delayed_rows 5$' "$TMP/http.body"
  expect_line '^outbox_oldest_pending_age_seconds 0$' "$TMP/http.body"
  # --ready-max-age 1s: the 1 h rows, written seconds ago, do not make the backlog too old.
  wait_for 20 "$relay_pid" "GET /readyz answers 200 beside the delayed rows" _http_is /readyz 200 ||
    sed 's/^/  | /' "$TMP/http.body"
  early=$(sql 'SELECT COUNT(*) FROM outbox WHERE published AND published_at < not_before')
  expect_eq 0 "$early" "rows published before their not_before"
  expect_eq 50 "$(sql 'SELECT COUNT(*) FROM outbox WHERE published AND not_before IS NOT NULL')" \
    "the 2 s rows published, each at or after its not_before"

  step "$mode: a foreign writer sets not_before of the 1 h rows to -1 (due now)"
  sql 'UPDATE outbox SET not_before = -1 WHERE NOT published' >/dev/null ||
    fail "the UPDATE of not_before failed"
  wait_for 30 "$relay_pid" "the 5 rows published" _published 115
  echo "\$ kill -TERM $relay_pid"
  kill -TERM "$relay_pid"
  wait_exit "$relay_pid" 20 "relay after SIGTERM"
  expect_eq 0 "$BG_RC" "the relay's exit code"
  grep -v '^\[relay\] batch ' "$relay_log" | sed 's/^/  | /'
  expect_line '^\[relay\] stopped on signal: batches=[0-9]+ acked=115 marked=115 failed=0 parked=0 fenced=0 pending=0$' "$relay_log"
  run status
  expect_line '^\[status\] unpublished=0 pending=0 delayed=0 ' "$OUT"
  expect_check "valid=1,outbox_rows=115,ok=115,lost=0,phantom=0,atomicity=0,lost_after_mark=0,stuck=0,order_violations=0"
done

finish
