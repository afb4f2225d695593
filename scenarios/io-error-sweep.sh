#!/usr/bin/env bash
# I/O error sweep (issue 10 §4): the disk returns an error instead of dying.
# Injects: for each vfs point (vfs.read, vfs.write, vfs.sync, vfs.truncate) x hit N (1, 3) x
#          command (write 20, relay --until-empty, purge --archive --older-than 0s, consume
#          --dedupe), one
#          injected I/O error at the Nth call of that point in that command, run with
#          --vfs powerloss (OUTBOX_FAILPOINTS='P=<N-1>*off->1*error'). The other commands of the
#          workload run before it without failpoints. Recovery: no failpoint; write the loans
#          still missing, relay --until-empty, consume --dedupe again, purge again.
# Expects: the command exits 0 (SQLite absorbed the error, say a failed checkpoint at close, or
#          the relay retried it: relay --until-empty retries up to 5 failed batches in a row) or
#          11 with one `outbox-lab: error:` line naming the SQLite code of the operation
#          (SQLITE_IOERR_READ|WRITE|FSYNC|TRUNCATE) and the file and failpoint that failed; then
#          check --history valid (no acknowledged event lost, none phantom, no row marked
#          published without its ack; purge archives, so its rows still count) and the consumer
#          applied each event once. Every point must fire (exit 11) in some case (vfs.truncate:
#          purge ends with PRAGMA wal_checkpoint(TRUNCATE)).
# Then a relay running forever (--idle-max 50ms): with vfs.write=1*error it retries after its idle
#          backoff (or defers the broker-incarnation note that took the error), publishes all 20,
#          prints `retried 1 batches after an I/O error` (or the deferred note) and exits 0 on
#          SIGTERM; with vfs.write=error it gives up after 5 failed batches in a row with exit 11
#          and the error line, nothing marked published.
# Prints a table and `N cases: F fired, P passed, X failed`.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

LOANS=20
POINTS=(vfs.read vfs.write vfs.sync vfs.truncate)
HITS=(1 3)
COMMANDS=(write relay purge consume)
command -v sqlite3 >/dev/null 2>&1 || die "sqlite3 is needed to read check --json"
json_get() { sqlite3 :memory: "SELECT json_extract(readfile('$1'), '$2')"; }

start_broker
TOPIC_BASE=$TOPIC

CASE_FAILURES=()
case_fail() { CASE_FAILURES+=("$1"); }

# must_run WHAT ARGS...: a setup or recovery step that has to succeed.
must_run() {
  local what=$1
  shift
  run "$@"
  [ "$RC" -eq 0 ] || case_fail "$what: exit $RC"
}

# sweep_case POINT N COMMAND
sweep_case() {
  local point=$1 n=$2 cmd=$3
  DB=$TMP/$point-$n-$cmd.db
  TOPIC=$TOPIC_BASE.$point.$n.$cmd
  local history=$TMP/$point-$n-$cmd.history effects=$TMP/$point-$n-$cmd.effects.db
  local consume_args=(consume --dedupe --group sweep --effects-db "$effects")
  CASE_FAILURES=()
  CASE_RC='-'
  CASE_ERROR='-'

  must_run reset reset
  case $cmd in
    relay) must_run "setup write" write "$LOANS" --quiet --history "$history" ;;
    purge | consume)
      must_run "setup write" write "$LOANS" --quiet --history "$history"
      must_run "setup relay" relay --until-empty --quiet --history "$history"
      ;;
  esac

  local spec="$point=$((n - 1))*off->1*error" args=()
  case $cmd in
    write) args=(write "$LOANS" --quiet) ;;
    relay) args=(relay --until-empty --batch-size 7 --quiet) ;;
    purge) args=(purge --archive --older-than 0s --batch-size 7) ;;
    consume) args=("${consume_args[@]}") ;;
  esac
  echo "-- $cmd under OUTBOX_FAILPOINTS='$spec' --vfs powerloss"
  OUTBOX_FAILPOINTS=$spec run "${args[@]}" --vfs powerloss --history "$history"
  CASE_RC=$RC
  if [ "$RC" -eq 11 ]; then
    expect_error_line "$cmd under $spec"
    CASE_ERROR=$(grep -o -E 'SQLITE_[A-Z_]+' "$ERR" | head -n 1)
    grep -q -E "^outbox-lab: error: .*\((SQLITE_IOERR_[A-Z]+|SQLITE_FULL)\): [a-z]+ '[^']*(\.db|-wal|-journal)': .*injected by failpoint $point" "$ERR" ||
      case_fail "error line does not name the code, file and failpoint: $(cat "$ERR")"
  elif [ "$RC" -ne 0 ]; then
    case_fail "$cmd under $spec: exit $RC, expected 0 or 11: $(cat "$ERR")"
  fi

  echo "-- recovery, no failpoint"
  local have=$LOANS
  run verify --no-kafka --json
  [ "$RC" -eq 0 ] && have=$(json_get "$OUT" '$.business_loan')
  [ "$have" -lt "$LOANS" ] && must_run "recovery write" write $((LOANS - have)) --quiet --history "$history"
  must_run "recovery relay" relay --until-empty --quiet --history "$history"
  run check --json --history "$history"
  # check's verdicts: 0 valid, 1 invalid, 15 not drained yet, 16 cannot judge; any other code: it
  # could not check (the error's own code from the README's table, e.g. 6 no database, 8 no broker).
  if [ "$RC" -eq 0 ] || [ "$RC" -eq 1 ] || [ "$RC" -eq 15 ] || [ "$RC" -eq 16 ]; then
    [ "$(json_get "$OUT" '$.valid')" = 1 ] || case_fail "check $(json_get "$OUT" '$.verdict'): $(cat "$OUT")"
  else
    case_fail "check: exit $RC (could not check)"
  fi
  if [ "$cmd" = consume ]; then
    must_run "recovery consume" "${consume_args[@]}"
    local seen
    seen=$(sqlite3 "$effects" "SELECT COUNT(*) || '/' || COUNT(DISTINCT event_id) FROM loan_effect" 2>&1)
    [ "$seen" = "$LOANS/$LOANS" ] || case_fail "consumer effects (rows/distinct) $seen, expected $LOANS/$LOANS"
  fi
  if [ "$cmd" = purge ]; then
    must_run "recovery purge" purge --archive --older-than 0s --batch-size 7
    run verify --no-kafka --json
    [ "$(json_get "$OUT" '$.outbox') $(json_get "$OUT" '$.unpublished')" = "0 0" ] ||
      case_fail "after the recovery purge: $(cat "$OUT")"
  fi
}

step "sweep: ${#POINTS[@]} vfs points x hits ${HITS[*]} x ${#COMMANDS[@]} commands"
HEADER=$(printf '%-13s %3s  %-8s %4s  %-22s %-7s' point hit command exit error verdict)
echo "$HEADER"
ROWS=()
PASSED=0
FAILED=0
FIRED=0
declare -A FIRED_AT=()
START=$(_now_us)
for point in "${POINTS[@]}"; do
  for n in "${HITS[@]}"; do
    for cmd in "${COMMANDS[@]}"; do
      log=$TMP/$point-$n-$cmd.log
      sweep_case "$point" "$n" "$cmd" >"$log" 2>&1
      verdict=PASS
      [ "${#CASE_FAILURES[@]}" -eq 0 ] || verdict=FAIL
      [ "$CASE_RC" = 11 ] && { FIRED=$((FIRED + 1)); FIRED_AT[$point]=1; }
      row=$(printf '%-13s %3s  %-8s %4s  %-22s %-7s' "$point" "$n" "$cmd" "$CASE_RC" "$CASE_ERROR" "$verdict")
      ROWS+=("$row")
      echo "$row"
      if [ "$verdict" = PASS ]; then
        PASSED=$((PASSED + 1))
      else
        FAILED=$((FAILED + 1))
        for reason in "${CASE_FAILURES[@]}"; do fail "$point x $n x $cmd: $reason"; done
        sed 's/^/    | /' "$log"
      fi
    done
  done
done
for point in "${POINTS[@]}"; do
  [ -n "${FIRED_AT[$point]:-}" ] || fail "$point never fired (no exit 11): the sweep no longer reaches it"
done

step "a relay running forever: a transient I/O error is retried, a persistent one ends it"
# _relay_published_all: every loan of the forever case is published (a poll condition).
_relay_published_all() {
  # grep reads to the end (no -q): verify's closing line would otherwise meet a closed pipe.
  "$LAB_BIN" --db "$DB" verify --no-kafka 2>/dev/null | grep "outbox=$LOANS published=$LOANS " >/dev/null
}
forever_case() {
  local kind=$1 spec=$2
  DB=$TMP/forever-$kind.db
  TOPIC=$TOPIC_BASE.forever.$kind
  local history=$TMP/forever-$kind.history
  run reset
  run write "$LOANS" --quiet --history "$history"
  OUTBOX_FAILPOINTS=$spec start_bg "relay-$kind" relay --idle-max 50ms --vfs powerloss --history "$history"
  local pid=$BG_PID log=$BG_LOG
  if [ "$kind" = transient ]; then
    wait_for 30 "$pid" "relay publishes all $LOANS after a transient error" _relay_published_all
    kill -TERM "$pid"
    wait_exit "$pid" 15 "relay after SIGTERM"
    cat "$log"
    expect_eq 0 "$BG_RC" "relay (forever, $spec) after SIGTERM: exit"
    # The one error hits the relay's first write: its loop's (a batch retried) or, when the
    # relay notes the broker's incarnation first, that note's (deferred to the first mark).
    expect_line '^\[relay\] (retried 1 batches after an I/O error|broker incarnation not noted at start \(.*SQLITE_IOERR_WRITE.*\); noted after the first mark)$' "$log"
    run check --json --history "$history"
    [ "$(json_get "$OUT" '$.valid')" = 1 ] || fail "check after the transient error: $(cat "$OUT")"
  else
    wait_exit "$pid" 30 "relay with a persistent I/O error"
    cat "$log"
    expect_eq 11 "$BG_RC" "relay (forever, $spec): exit"
    expect_line "^outbox-lab: error: .*\(SQLITE_IOERR_WRITE\): write '.*': I/O error injected by failpoint vfs.write$" "$log"
    run verify --no-kafka --json
    expect_eq "$LOANS 0" "$(json_get "$OUT" '$.outbox') $(json_get "$OUT" '$.published')" \
      "outbox, published after the persistent error"
  fi
}
forever_case transient "vfs.write=1*error"
forever_case persistent "vfs.write=error"

step "summary ($((($(_now_us) - START) / 1000000))s)"
echo "$HEADER"
printf '%s\n' "${ROWS[@]}"
echo "$((PASSED + FAILED)) cases: $FIRED fired, $PASSED passed, $FAILED failed"
finish
