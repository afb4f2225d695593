# shellcheck shell=bash
# Shared helpers for the crash scenarios (like kcat's tests/helpers.sh). Source it first:
#
#   . "$(dirname "$0")/lib.sh"
#
# It gives each scenario a fresh temp dir with its own database ($DB), starts processes in the
# background and remembers their PIDs, waits for their own output lines (never a bare sleep),
# kills by PID only, and cleans everything up from an EXIT trap. Assertions are soft: a failed
# one is recorded and the scenario goes on, so one run shows every broken expectation; `finish`
# prints `PASS <name>` or `FAIL <name>: <first reason>` and exits 0 or 1. Setup failures
# (no binary, broker not starting, no HOLD line) use `die`, which finishes at once.
#
# Environment:
#   OUTBOX_LAB_BIN           the binary; default <repo>/build/outbox-lab
#   KAFKA_BOOTSTRAP_SERVERS  use this Kafka instead of an embedded broker, on a unique topic
#   OUTBOX_LAB_KEEP_TMP=1    keep the temp dir (its path is printed) for a post-mortem

set -u
set -o pipefail

SCENARIO=$(basename "${BASH_SOURCE[1]:-$0}" .sh)
SCENARIO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCENARIO_DIR/.." && pwd)
LAB_BIN=${OUTBOX_LAB_BIN:-$REPO_DIR/build/outbox-lab}
# shellcheck source-path=SCRIPTDIR/../scripts source=wait-until.sh
. "$REPO_DIR/scripts/wait-until.sh"

# The binary reads these from the environment (failpoints too); a scenario passes what it needs,
# so a caller's shell (say OUTBOX_DB left over from run.sh use) cannot leak into a run.
EXTERNAL_BROKERS=${KAFKA_BOOTSTRAP_SERVERS:-}
unset KAFKA_BOOTSTRAP_SERVERS OUTBOX_DB OUTBOX_TOPIC OUTBOX_BROKER_CONTROL OUTBOX_FAILPOINTS OUTBOX_HISTORY
unset OUTBOX_LAB_FRONTEND  # run.sh's: hints would quote run.sh instead of outbox-lab

TMP=$(mktemp -d "${TMPDIR:-/tmp}/outbox-lab-$SCENARIO.XXXXXX") || {
  echo "FAIL $SCENARIO: mktemp -d failed"
  exit 1
}
DB=$TMP/outbox.db
TOPIC=v2c7.outbox
BROKER=          # bootstrap address once start_broker ran
BROKER_PID=      # set only for an embedded broker we started
PIDS=()          # every background process this scenario started
FAILURES=()
FINISHED=0
STEP=0
RUNS=0
OUT=$TMP/none.out  # stdout of the last `run`
ERR=$TMP/none.err  # stderr of the last `run`
RC=0               # exit code of the last `run`

# --- cleanup -------------------------------------------------------------------------------------

_forget_pid() {
  local pid=$1 kept=() p
  for p in "${PIDS[@]}"; do [ "$p" = "$pid" ] || kept+=("$p"); done
  PIDS=("${kept[@]}")
}

# SIGTERM first (the broker removes its address file on a clean stop), SIGKILL after ~2 s.
_stop_pid() {
  local pid=$1
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  wait_until 2 "" process_gone "$pid" || kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  return 0
}

_wal_slot_inactive() {
  [ "$(psql "$PG_BASE_URL" -tAc "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$PG_WAL_SLOT' AND active")" = 0 ]
}

_cleanup() {
  local rc=$? pid
  trap - EXIT INT TERM
  for pid in "${PIDS[@]}"; do _stop_pid "$pid"; done
  # start_own_postgres's cluster is this scenario's alone: stopped and deleted.
  if [ -n "${PG_OWN_DIR:-}" ]; then
    OUTBOX_PG_DIR=$PG_OWN_DIR OUTBOX_PG_PORT=$PG_OWN_PORT "$REPO_DIR/scripts/postgres.sh" destroy >/dev/null 2>&1 ||
      echo "note: could not destroy the scenario's PostgreSQL cluster in $PG_OWN_DIR"
    PG_SCHEMA=
  fi
  # A WAL relay's slot (PG_WAL_SLOT, set by the scenario) pins the shared server's WAL until it is
  # dropped; its walsender lets go of it a moment after the relay is gone.
  if [ -n "${PG_WAL_SLOT:-}" ] && [ -n "${PG_SCHEMA:-}" ]; then
    wait_until 10 "" _wal_slot_inactive >/dev/null 2>&1
    psql "$PG_BASE_URL" -qc "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '$PG_WAL_SLOT'; DROP PUBLICATION IF EXISTS $PG_WAL_SLOT" >/dev/null 2>&1 ||
      echo "note: could not drop the replication slot $PG_WAL_SLOT: SELECT pg_drop_replication_slot('$PG_WAL_SLOT')"
  fi
  # use_postgres's schema goes with the temp dir (and stays with it under OUTBOX_LAB_KEEP_TMP=1).
  if [ -n "${PG_SCHEMA:-}" ] && [ "${OUTBOX_LAB_KEEP_TMP:-0}" != 1 ]; then
    psql "$PG_BASE_URL" -qc "DROP SCHEMA IF EXISTS $PG_SCHEMA CASCADE" >/dev/null 2>&1 ||
      echo "note: could not drop PostgreSQL schema $PG_SCHEMA"
  fi
  if [ "$FINISHED" -eq 0 ]; then
    echo "FAIL $SCENARIO: exited (code $rc) without reaching finish"
    rc=1
  fi
  if [ "${OUTBOX_LAB_KEEP_TMP:-0}" = 1 ]; then
    echo "(kept $TMP)"
  else
    rm -rf -- "$TMP"
  fi
  exit "$rc"
}
trap _cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- verdicts ------------------------------------------------------------------------------------

# fail REASON: record a broken expectation and carry on.
fail() {
  FAILURES+=("$1")
  echo "  !! $1"
}

# What wait_until (scripts/wait-until.sh) calls on a timeout: a failed expectation.
wait_timed_out() { fail "$1"; }

# die REASON: a setup step failed; nothing after it can be meaningful.
die() {
  fail "$1"
  finish
}

# finish: the verdict line, then exit 0 only if every assertion held.
finish() {
  # leave_report is defined at the end of this file: a die before that has no report to write.
  [ "$FINISHED" -eq 1 ] || { FINISHED=1; ! declare -F leave_report >/dev/null || leave_report; }
  echo
  if [ "${#FAILURES[@]}" -eq 0 ]; then
    echo "PASS $SCENARIO"
    exit 0
  fi
  local more=""
  [ "${#FAILURES[@]}" -gt 1 ] && more=" (and $((${#FAILURES[@]} - 1)) more above)"
  echo "FAIL $SCENARIO: ${FAILURES[0]}$more"
  exit 1
}

step() {
  STEP=$((STEP + 1))
  echo
  echo "== $STEP. $*"
}

# --- running the lab -----------------------------------------------------------------------------

[ -x "$LAB_BIN" ] || die "no executable at $LAB_BIN (build it, or set OUTBOX_LAB_BIN)"

# The global options of every lab call: this scenario's database, topic and broker. A scenario
# that passes its own --brokers (bad-input) must not have started one: the binary rejects a
# repeated option. With LAB_BARE=1, none: for a command line whose exact shape is the test.
lab_args() {
  LAB_ARGS=()
  [ "${LAB_BARE:-0}" = 1 ] && return 0
  LAB_ARGS=(--db "$DB" --topic "$TOPIC")
  [ -n "$BROKER" ] && LAB_ARGS+=(--brokers "$BROKER")
  # A scenario's SQLite synchronous level for every lab command it runs (empty: the default, full).
  [ -n "${LAB_SYNCHRONOUS:-}" ] && LAB_ARGS+=(--synchronous "$LAB_SYNCHRONOUS")
  return 0
}

# run ARGS...: run the lab to completion; stdout in $OUT, stderr in $ERR, exit code in $RC, wall
# time in $RUN_MS. Echoes the command and its output so a scenario's log reads like the chapter.
# A command that should have returned but blocks (say, a hold that validation let through) is
# stopped after RUN_TIMEOUT_S (default 60) seconds and reported as exit 124.
run() {
  lab_args
  RUNS=$((RUNS + 1))
  OUT=$TMP/run-$RUNS.out
  ERR=${OUT%.out}.err
  echo "\$ outbox-lab $*"
  local start
  start=$(_now_us)
  timeout -k 5 "${RUN_TIMEOUT_S:-60}" "$LAB_BIN" "${LAB_ARGS[@]}" "$@" </dev/null >"$OUT" 2>"$ERR"
  RC=$?
  RUN_MS=$((($(_now_us) - start) / 1000))
  cat "$OUT"
  sed 's/^/  (stderr) /' "$ERR"
  [ "$RC" -eq 0 ] || echo "  (exit $RC after ${RUN_MS} ms)"
  [ "$RC" -ne 124 ] || fail "outbox-lab $*: still running after ${RUN_TIMEOUT_S:-60}s"
}

# wait_for TIMEOUT_S PID WHAT CMD...: wait_until CMD succeeds, giving up early when PID exits.
# Fails (returns 1) if PID is gone first or TIMEOUT_S passes.
wait_for() {
  local timeout_s=$1 pid=$2 what=$3
  shift 3
  wait_until "$timeout_s" "" _done_or_gone "$pid" "$@"
  "$@" && return 0
  if kill -0 "$pid" 2>/dev/null; then
    fail "$what: not within ${timeout_s}s"
  else
    fail "$what: process $pid exited first"
  fi
  return 1
}

_done_or_gone() {
  local pid=$1
  shift
  "$@" || process_gone "$pid"
}

_now_us() { _wait_now_us; }

_nonempty() { [ -s "$1" ]; }
_has_line() { grep -q -- "$1" "$2" 2>/dev/null; }

# start_broker [--control [BROKER OPTIONS...]]: an embedded broker in its own process (it must
# survive our kill -9 of the lab), or, with KAFKA_BOOTSTRAP_SERVERS set, that Kafka and a topic no
# other run uses. With --control, the options after it go to `broker` (e.g. --broker-count 3).
start_broker() {
  local control=""
  [ "${1:-}" = "--control" ] && control=$TMP/broker.ctl && shift
  if [ -n "$EXTERNAL_BROKERS" ] && [ -z "$control" ]; then
    BROKER=$EXTERNAL_BROKERS
    TOPIC=outbox-lab-$SCENARIO-$$-$RANDOM
    echo "broker: external $BROKER, topic $TOPIC"
    return 0
  fi
  local addr_file=$TMP/broker.addr log=$TMP/broker.log
  local extra=()
  [ -n "$control" ] && extra=(--control "$control" "$@")
  : >"$log"  # emptied by us, not by the child: see start_hold
  "$LAB_BIN" --topic "$TOPIC" broker --addr-file "$addr_file" "${extra[@]}" </dev/null >>"$log" 2>&1 &
  BROKER_PID=$!
  PIDS+=("$BROKER_PID")
  # The broker creates its control socket before it writes the address file.
  if ! wait_for 15 "$BROKER_PID" "embedded broker ready" _nonempty "$addr_file" ||
     ! wait_for 5 "$BROKER_PID" "embedded broker ready line" _has_line '^\[broker\] ready ' "$log"; then
    sed 's/^/  (broker) /' "$log"
    die "embedded broker did not start (log above)"
  fi
  BROKER=$(head -n 1 "$addr_file")
  [ -n "$BROKER" ] || die "embedded broker wrote an empty address file"
  CONTROL=$control
  echo "broker: embedded $BROKER (pid $BROKER_PID), topic $TOPIC${control:+, control $control}"
}

# start_hold NAME ARGS...: start a hold command in the background, output to $TMP/NAME.log; wait
# for its own HOLD line; set HOLD_PID (the lab process itself, not a subshell) and HOLD_LOG.
start_hold() {
  local name=$1
  shift
  lab_args
  HOLD_LOG=$TMP/$name.log
  echo "\$ outbox-lab $* &"
  # A simple command with & is forked and exec'd directly, so $! is the lab's own PID. The log is
  # emptied here, not by the child's `>`: the child truncates only when it is scheduled, and until
  # then a poll would read an earlier run's log of the same name (HOLD and all).
  : >"$HOLD_LOG"
  "$LAB_BIN" "${LAB_ARGS[@]}" "$@" </dev/null >>"$HOLD_LOG" 2>&1 &
  HOLD_PID=$!
  PIDS+=("$HOLD_PID")
  if ! wait_for 30 "$HOLD_PID" "HOLD line of '$*'" _has_line 'HOLD' "$HOLD_LOG"; then
    sed 's/^/  | /' "$HOLD_LOG"
    die "'outbox-lab $*' never reached its HOLD point"
  fi
  cat "$HOLD_LOG"
  # The line names the process to kill: this very PID (issue 15).
  expect_line "; kill -9 $HOLD_PID\$" "$HOLD_LOG"
  local comm
  comm=$(ps -o comm= -p "$HOLD_PID" 2>/dev/null)
  [ "$comm" = "outbox-lab" ] || [ "$comm" = "$(basename "$LAB_BIN" | cut -c1-15)" ] ||
    fail "PID $HOLD_PID is '$comm', not the lab: kill -9 would hit the wrong process"
}

# kill9 PID: SIGKILL exactly that process and wait until it is gone.
kill9() {
  local pid=$1 status
  echo "\$ kill -9 $pid"
  kill -9 "$pid" 2>/dev/null || { fail "kill -9 $pid: no such process (it should have been holding)"; return 1; }
  wait "$pid" 2>/dev/null
  status=$?
  # Not our child (wait fails with 127): wait until it is gone, for at most 10 s.
  if [ "$status" -eq 127 ]; then
    wait_until 10 "" process_gone "$pid"
    status=137
  fi
  _forget_pid "$pid"
  kill -0 "$pid" 2>/dev/null && fail "process $pid still alive after kill -9"
  [ "$status" -eq 137 ] || fail "process $pid ended with status $status, not by SIGKILL (137)"
  return 0
}

# start_bg NAME ARGS...: the lab in the background (no HOLD line to wait for), output in
# $TMP/NAME.log; sets BG_PID (the lab's own PID) and BG_LOG.
start_bg() {
  local name=$1
  shift
  lab_args
  BG_LOG=$TMP/$name.log
  echo "\$ outbox-lab $* &"
  : >"$BG_LOG"  # emptied by us, not by the child: see start_hold
  "$LAB_BIN" "${LAB_ARGS[@]}" "$@" </dev/null >>"$BG_LOG" 2>&1 &
  BG_PID=$!
  PIDS+=("$BG_PID")
}

# wait_exit PID TIMEOUT_S WHAT: wait until PID has exited; its exit status in BG_RC (124 when it
# was still running after TIMEOUT_S; the EXIT trap stops it then).
wait_exit() {
  local pid=$1 timeout_s=$2 what=$3
  if ! wait_until "$timeout_s" "$what to exit" process_gone "$pid"; then
    BG_RC=124
    return 1
  fi
  wait "$pid"
  BG_RC=$?
  _forget_pid "$pid"
}

# wait_paused PID LOG POINT [N]: wait until LOG holds N (default 1) lines
# `[failpoint] POINT PAUSE; ...` — the process PID stands at its Nth pause there. Fails the
# scenario (die) when it does not get there: a scenario that misses its point proves nothing.
wait_paused() {
  local pid=$1 log=$2 point=$3 n=${4:-1}
  if ! wait_for 30 "$pid" "pause #$n of $point" _has_lines "$n" "^\[failpoint\] $point PAUSE; " "$log"; then
    sed 's/^/  | /' "$log"
    die "process $pid never paused at $point (pause #$n)"
  fi
  echo "(process $pid paused at $point, #$n)"
}

# release PID: let a paused process go on (the pause action waits for SIGUSR1).
release() {
  echo "\$ kill -USR1 $1"
  kill -USR1 "$1" || die "kill -USR1 $1: no such process (it should have been paused)"
}

_has_lines() { [ "$(grep -E -c -- "$2" "$3" 2>/dev/null)" -ge "$1" ]; }

# start_control_broker [BROKER OPTIONS...]: an embedded broker with a --control socket for
# broker-ctl (always embedded: a real Kafka cannot take faults from broker-ctl).
start_control_broker() { start_broker --control "$@"; }

# broker_ctl REQUEST...: one fault request to the broker of start_control_broker.
broker_ctl() {
  run broker-ctl --control "$CONTROL" "$@"
  expect_rc 0 "broker-ctl $*"
  expect_line "^\[broker-ctl\] $*: ok\$" "$OUT"
}

# --- assertions ----------------------------------------------------------------------------------

# expect_check K=V,...: `check --expect` against this scenario's DB and topic (keys: valid, ok,
# lost, duplicated, phantom, atomicity, lost_after_mark, stuck, ...; see `check --help`).
expect_check() {
  run check --expect "$@"
  [ "$RC" -eq 0 ] || fail "check --expect $*: exit $RC: $(grep -h -e MISMATCH -e 'error:' "$OUT" "$ERR" | head -n 1)"
}

# expect_json FILE JQ-CONDITION WHAT: the JSON in FILE (the last JSON line, for a log of JSON
# lines among others) makes the jq condition true.
expect_json() {
  local json
  json=$(jq -c -R 'fromjson? // empty' "$1" | tail -n 1)
  [ -n "$json" ] || { fail "$3: no JSON in $(basename "$1")"; return; }
  jq -e "$2" <<<"$json" >/dev/null || fail "$3: ($2) is false for $json"
}

# json_lines FILE: the JSON objects among FILE's lines (a relay --json log holds failpoint lines too).
json_lines() { jq -c -R 'fromjson? // empty' "$1"; }

# relay_final LOG FIELD: FIELD of the final report of a `relay --json` log (empty if none).
relay_final() {
  json_lines "$1" | jq -r "select(.report == \"final\") | .$2" | tail -n 1
}

# expect_verify K=V,...: `verify --expect` against this scenario's DB (and broker, if any).
expect_verify() {
  run verify --expect "$1"
  [ "$RC" -eq 0 ] || fail "verify --expect $1: exit $RC: $(grep -h -e MISMATCH -e 'error:' "$OUT" "$ERR" | head -n 1)"
}

# expect_line ERE FILE: FILE has a line matching the extended regex.
expect_line() {
  grep -E -q -- "$1" "$2" || fail "no line matching /$1/ in $(basename "$2")"
}

# expect_no_line ERE FILE
expect_no_line() {
  ! grep -E -q -- "$1" "$2" || fail "unexpected line matching /$1/ in $(basename "$2")"
}

# expect_count N ERE FILE: exactly N lines match.
expect_count() {
  local got
  got=$(grep -E -c -- "$2" "$3")
  [ "$got" -eq "$1" ] || fail "expected $1 lines matching /$2/ in $(basename "$3"), got $got"
}

# expect_error_line WHAT: the last run's stderr is one `outbox-lab: error: ...` line. librdkafka's
# own log lines (`%LEVEL|time|FAC|...`) may come before it: they are its logger, not our report.
expect_error_line() {
  local errors others
  errors=$(grep -c -E '^outbox-lab: error: .+' "$ERR")
  others=$(grep -v -E '^outbox-lab: error: |^%[0-7]\|' "$ERR" | grep -c .)
  [ "$errors" -eq 1 ] || fail "$1: $errors 'outbox-lab: error:' lines on stderr, expected 1"
  [ "$others" -eq 0 ] || fail "$1: $others stray lines on stderr"
}

# expect_rc EXPECTED WHAT: the last run exited with EXPECTED.
expect_rc() {
  [ "$RC" -eq "$1" ] || fail "$2: exit $RC, expected $1"
}

# expect_eq EXPECTED ACTUAL WHAT
expect_eq() {
  [ "$1" = "$2" ] || fail "$3: got '$2', expected '$1'"
}

# --- relays across a reset (pg-relay-reset, sqlite-relay-reset) ---------------------------------

# status_is JQ-CONDITION: `status --json` of this scenario's database makes the condition true.
status_is() { "$LAB_BIN" --db "$DB" status --json 2>/dev/null | jq -e "$1" >/dev/null; }

# wait_published PID N: until N rows are published and none waits (PID: the relay that must live).
wait_published() {
  wait_for 60 "$1" "$2 rows published" status_is ".published == $2 and .unpublished == 0"
}

# term_relay PID NAME: SIGTERM, and the relay must end by itself with 0.
term_relay() {
  echo "\$ kill -TERM $1"
  kill -TERM "$1"
  wait_exit "$1" 30 "$2"
  expect_eq 0 "$BG_RC" "exit code of $2 (it lived through the reset)"
}

# expect_no_error LOG: no error line in a relay's log.
expect_no_error() { expect_no_line 'error:' "$1"; }

# expect_first_batch LOG JQ-CONDITION WHAT: the first batch report of a relay --json log.
expect_first_batch() {
  local first
  first=$(json_lines "$1" | jq -c 'select(.report == "batch")' | head -n 1)
  jq -e "$2" <<<"$first" >/dev/null || fail "$3: ($2) is false for ${first:-no batch line}"
}

# expect_tokens_above LOG: every batch of a claims relay's --json log has a claim token above that
# of its first batch, whose settle came after a reset (the claim was made before it): none is
# given twice, so the late settle could match no row claimed after the reset.
expect_tokens_above() {
  local log=$1 old t
  old=$(json_lines "$log" | jq -r 'select(.report == "batch") | .token' | head -n 1)
  [ -n "$old" ] || { fail "$(basename "$log"): no batch line"; return; }
  while read -r t; do
    [ "$t" -eq "$old" ] || [ "$t" -gt "$old" ] ||
      fail "$(basename "$log"): claim token $t after the reset, not above its old $old"
  done < <(json_lines "$log" | jq -r 'select(.report == "batch") | .token')
}

# run_id: this scenario's current run id (PostgreSQL: outbox_run).
run_id() { psql "$DB" -qAtc "SELECT run_id FROM outbox_run"; }

# wal_sent N LOG: a WAL relay's batch lines (--json) add up to at least N records.
wal_sent() {
  local sent
  sent=$(json_lines "$2" | jq -s '[.[] | select(.report == "batch") | .records] | add // 0')
  [ "$sent" -ge "$1" ]
}

# wal_streaming LOG: a WAL relay's --json log has its wal-open line (it streams).
wal_streaming() { json_lines "$1" | jq -s -e 'any(.[]; .report == "wal-open")' >/dev/null; }

# --- the HTML report (issue 11) ------------------------------------------------------------------

# Any scenario leaves the HTML report of its run when given `--report DIR` (or
# OUTBOX_LAB_REPORT_DIR=DIR): `finish` writes DIR/<scenario>.html with `outbox-lab report`, while
# the scenario's broker still runs, from its database, its topic and its history ($OUTBOX_HISTORY,
# or the one this file starts for the report). The option is taken out of the scenario's own
# arguments here.
REPORT_DIR=${OUTBOX_LAB_REPORT_DIR:-}
_scenario_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --report)
      [ $# -ge 2 ] || die "--report needs a directory"
      REPORT_DIR=$2
      shift 2
      ;;
    --report=*) REPORT_DIR=${1#--report=}; shift ;;
    *) _scenario_args+=("$1"); shift ;;
  esac
done
set -- "${_scenario_args[@]}"
# With a report asked for, every lab process records a history for its timeline (a scenario that
# keeps its own, like outbox-crash.sh, sets OUTBOX_HISTORY after this and wins).
if [ -n "$REPORT_DIR" ]; then export OUTBOX_HISTORY=$TMP/report-history.jsonl; fi

# leave_report: write the report if one was asked for; a report that cannot be written fails the
# scenario (it was asked for). Called by finish.
leave_report() {
  [ -n "${REPORT_DIR:-}" ] || return 0
  if [ -z "$BROKER" ]; then
    fail "--report: this scenario has no broker to read the topic from"
    return 0
  fi
  mkdir -p "$REPORT_DIR" || { fail "--report: cannot create $REPORT_DIR"; return 0; }
  REPORT_HTML=$(cd "$REPORT_DIR" && pwd)/$SCENARIO.html
  local history=()
  [ -s "${OUTBOX_HISTORY:-}" ] && history=(--history "$OUTBOX_HISTORY")
  step "the HTML report of this run"
  run report --html "$REPORT_HTML" --title "outbox-lab: $SCENARIO" "${history[@]}"
  expect_rc 0 "report"
  echo "report: $REPORT_HTML"
}

# cell_report NAME [HISTORY]: the HTML report of one failing cell of a sweep or soak (issue 11:
# "the crash sweep and the kill soak write one per failing cell"), from the cell's $DB and $TOPIC
# and, when given and not empty, its history. Written to $REPORT_DIR when --report was given,
# else to <build>/artifacts/failures ($OUTBOX_LAB_ARTIFACTS/failures), which outlives the temp
# dir. Prints `report: FILE`; a report that cannot be written says why in the same line, and is
# no failure of its own (the cell has failed already).
cell_report() {
  local name=$1 history=${2:-} dir args=()
  dir=${REPORT_DIR:-${OUTBOX_LAB_ARTIFACTS:-$(dirname "$LAB_BIN")/artifacts}/failures}
  [ -n "$BROKER" ] || { echo "report: none for $name (no broker to read the topic from)"; return 0; }
  mkdir -p "$dir" || { echo "report: none for $name (cannot create $dir)"; return 0; }
  dir=$(cd "$dir" && pwd)
  [ -n "$history" ] && [ -s "$history" ] && args=(--history "$history")
  lab_args
  if "$LAB_BIN" "${LAB_ARGS[@]}" report --html "$dir/$SCENARIO-$name.html" \
    --title "outbox-lab: $SCENARIO, failing cell $name" "${args[@]}" >"$TMP/cell-report.out" 2>&1; then
    echo "report: $dir/$SCENARIO-$name.html"
  else
    echo "report: none for $name ($(tail -n 1 "$TMP/cell-report.out"))"
  fi
}

# --- PostgreSQL ----------------------------------------------------------------------------------

# require_postgres: skip this scenario (print "SKIP <name>: ...", exit 77) when OUTBOX_PG_URL is
# unset: the only reason a PostgreSQL scenario may skip.
require_postgres() {
  if [ -z "${OUTBOX_PG_URL:-}" ]; then
    echo "SKIP $SCENARIO: OUTBOX_PG_URL is not set (export OUTBOX_PG_URL=\$(scripts/postgres.sh start); scripts/test.sh does)"
    FINISHED=1
    exit 77
  fi
}

# use_postgres: this scenario's database becomes a schema of its own on the PostgreSQL server at
# $OUTBOX_PG_URL (scripts/postgres.sh start prints it; scripts/test.sh exports it): DB is that URL
# with search_path set to the schema, so scenarios and unit tests running at once never see each
# other's rows. The schema is dropped at exit. Without OUTBOX_PG_URL the scenario is skipped: it
# prints "SKIP <name>: ..." and exits 77 (ctest's SKIP_RETURN_CODE), never a PASS.
use_postgres() {
  require_postgres
  command -v psql >/dev/null 2>&1 || die "psql not installed (scripts/install-deps.sh installs postgresql-15)"
  PG_BASE_URL=$OUTBOX_PG_URL
  PG_SCHEMA=s_${SCENARIO//-/_}_$$
  psql "$PG_BASE_URL" -v ON_ERROR_STOP=1 -qc "SET client_min_messages = warning; DROP SCHEMA IF EXISTS $PG_SCHEMA CASCADE; CREATE SCHEMA $PG_SCHEMA" ||
    die "cannot create schema $PG_SCHEMA on $PG_BASE_URL (is the server running? scripts/postgres.sh start)"
  local sep='?'
  case $PG_BASE_URL in *\?*) sep='&' ;; esac
  DB="$PG_BASE_URL${sep}options=-csearch_path%3D$PG_SCHEMA"
  echo "# PostgreSQL: $PG_BASE_URL, schema $PG_SCHEMA"
}

# start_own_postgres PORT: a PostgreSQL cluster of this scenario's own (scripts/postgres.sh with
# OUTBOX_PG_DIR and OUTBOX_PG_PORT=PORT), for scenarios that crash the server: the shared one on
# 55432 serves other tests meanwhile. Exports OUTBOX_PG_URL for use_postgres; pg_own ARGS... runs
# postgres.sh on it (crash, start). Deleted at exit.
start_own_postgres() {
  PG_OWN_PORT=$1
  # Not under $TMP: as root, the cluster belongs to the postgres user, who cannot enter a 0700
  # directory of root's.
  PG_OWN_DIR=${TMPDIR:-/tmp}/outbox-lab-pg-$SCENARIO-$$
  OUTBOX_PG_URL=$(pg_own start) || die "could not start a PostgreSQL cluster on port $PG_OWN_PORT in $PG_OWN_DIR"
  export OUTBOX_PG_URL
  echo "# own PostgreSQL cluster: $OUTBOX_PG_URL ($PG_OWN_DIR)"
}

pg_own() {
  echo "\$ scripts/postgres.sh $* (port $PG_OWN_PORT)" >&2
  OUTBOX_PG_DIR=$PG_OWN_DIR OUTBOX_PG_PORT=$PG_OWN_PORT "$REPO_DIR/scripts/postgres.sh" "$@"
}
