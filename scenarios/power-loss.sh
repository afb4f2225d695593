#!/usr/bin/env bash
# Power loss: the chapter's missing fourth experiment (issue 10). kill -9 tests the order of
# commits, sends and marks; a power cut also tests what `synchronous` made durable.
# Injects: per cell, synchronous S x crash point P x crash kind K. Every workload process runs
#          with --vfs powerloss --synchronous S --history H, a relay (forever, batches of 5) first,
#          then `write 20`; the crash instant is a failpoint `hold` of the process at P, and then
#          every lab process on the database gets kill -9 by PID:
#            write.after_commit           the writer, after its 10th commit
#            relay.after_ack_before_mark  the relay, its first batch acknowledged, not marked
#            relay.after_mark             the relay, its first batch marked
#            purge.mid_batch              purge --archive (batches of 7) after everything was
#                                         published, in its second batch (archived rows still
#                                         count for check, so a purge is no phantom)
#            random                       the writer of a 200-loan burst, at its Kth xWrite
#                                         (vfs.write=K-1*off->hold, K seeded: SEED=... replays)
#          K=power then runs `power-cut` (every unsynced write lost); K=kill does not.
#          Recovery: relay --until-empty without failpoints, then check --history H
#          --synchronous-used S.
# Expects: at full, and for every kill -9, 0 lost, 0 undone, 0 phantom, 0 corrupt. At normal and
#          off, check valid with undone commits and their phantom events allowed, still 0 lost
#          (no event whose transaction survived is missing) and 0 corrupt. The weak settings must
#          really show the effect: some power-cut cell below full has undone > 0 and some has
#          phantom > 0, else the lesson stopped working and the scenario fails.
# The whole 3 x 5 x 2 matrix takes about 50 s on 2 loaded cores, so CI runs all of it.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

case ${1:-} in
  "") ;;
  -h | --help) echo "usage: power-loss.sh   (SEED=N replays the random crash instants)"; FINISHED=1; exit 0 ;;
  *) die "unknown argument '$1'; usage: power-loss.sh" ;;
esac

SEED=${SEED:-$RANDOM}
RANDOM=$SEED
echo "SEED=$SEED (random crash instants replay with SEED=$SEED)"
LOANS=20
# Short leases: the recovery relay takes over a killed relay's claim after 2 s, not 30.
RELAY_ARGS=(--batch-size 5 --lease 2s --send-timeout 1s --idle-max 50ms --quiet)
SYNCS=(off normal full)
POINTS=(write.after_commit relay.after_ack_before_mark relay.after_mark purge.mid_batch random)
KINDS=(power kill)
command -v sqlite3 >/dev/null 2>&1 || die "sqlite3 is needed to read check --json"

json_get() { sqlite3 :memory: "SELECT json_extract(readfile('$1'), '$2')"; }
json_count() { sqlite3 :memory: "SELECT count(*) FROM json_each(readfile('$1'), '$2')"; }

start_broker
TOPIC_BASE=$TOPIC

CASE_FAILURES=()
case_fail() { CASE_FAILURES+=("$1"); }

# _all_published: the relay published all LOANS rows (a poll condition for wait_for). Through the
# shim at the cell's level too: a process on the database without it would make its own syncs
# (a checkpoint at close) durable behind the side log's back. grep reads to the end (no -q):
# verify prints its closing line after the counts, and a grep that quit at the first line would
# kill it with SIGPIPE, which pipefail counts as a miss.
_all_published() {
  "$LAB_BIN" --db "$DB" --vfs powerloss --synchronous "$CELL_SYNC" verify --no-kafka 2>/dev/null |
    grep "outbox=$LOANS published=$LOANS " >/dev/null
}

# _hold_or_exited PID LOG: the HOLD line is there, or PID failed kill -0 twice in a row.
_hold_or_exited() {
  _has_line 'HOLD' "$2" && return 0
  if kill -0 "$1" 2>/dev/null; then _hold_gone=0; else _hold_gone=$((_hold_gone + 1)); fi
  [ "$_hold_gone" -ge 2 ]
}

# hold_bg NAME ARGS...: the lab in the background until its own HOLD line; adds it to `live`. A
# miss fails the cell, never the whole script: lib.sh's die would exit inside the cell's
# redirected output, and its reason would vanish with the cell's log.
hold_bg() {
  local name=$1
  shift
  start_bg "$name" "$@"
  # Waits on the process's own HOLD line with the scripts' one bounded loop; the process counts as
  # exited only when kill -0 fails twice in a row.
  local begin why='not within 30 s'
  begin=$(_now_us)
  _hold_gone=0
  wait_until 30 "" _hold_or_exited "$BG_PID" "$BG_LOG" || true
  [ "$_hold_gone" -ge 2 ] && why='it exited first'
  if _has_line 'HOLD' "$BG_LOG"; then
    cat "$BG_LOG"
    live+=("$BG_PID")
    return 0
  fi
  case_fail "'$*' never reached its HOLD point ($why, after $((($(_now_us) - begin) / 1000)) ms): $(tail -n 3 "$BG_LOG" | tr '\n' ' ')"
  if kill -0 "$BG_PID" 2>/dev/null; then live+=("$BG_PID"); else wait_exit "$BG_PID" 5 "$name"; fi
  return 1
}

# cell S P K: one run; sets CELL_ROW and the counters.
cell() {
  local sync=$1 point=$2 kind=$3
  CELL_SYNC=$sync
  DB=$TMP/$sync-$point-$kind.db
  TOPIC=$TOPIC_BASE.$sync.$point.$kind
  local history=$TMP/$sync-$point-$kind.history
  local w=(--synchronous "$sync" --vfs powerloss --history "$history")
  local live=() relay_spec= writer_spec= loans=$LOANS start
  start=$(_now_us)
  CASE_FAILURES=()
  U_LOST='?' U_UNDONE='?' U_PHANTOM='?' U_DUP='?' U_CORRUPT='?' U_VALID='?' U_UNDONE_PHANTOM='?'

  run reset  # without the shim: the schema is durable
  [ "$RC" -eq 0 ] || case_fail "reset: exit $RC"

  case $point in
    write.after_commit) writer_spec="write.after_commit=9*off->hold" ;;
    relay.*) relay_spec="$point=hold" ;;
    random)
      loans=200
      writer_spec="vfs.write=$((30 + RANDOM % 370))*off->hold"
      ;;
  esac
  echo "-- workload: relay ${relay_spec:+($relay_spec) }then write $loans ${writer_spec:+($writer_spec)}"
  if [ -n "$relay_spec" ]; then
    OUTBOX_FAILPOINTS=$relay_spec start_bg relay relay "${RELAY_ARGS[@]}" "${w[@]}"
  else
    start_bg relay relay "${RELAY_ARGS[@]}" "${w[@]}"
  fi
  local relay_pid=$BG_PID relay_log=$BG_LOG
  live+=("$relay_pid")
  if [ -n "$writer_spec" ]; then
    OUTBOX_FAILPOINTS=$writer_spec hold_bg writer write "$loans" --quiet "${w[@]}"
  else
    run write "$loans" --quiet "${w[@]}"
    [ "$RC" -eq 0 ] || case_fail "write: exit $RC"
  fi
  case $point in
    relay.*)
      wait_for 30 "$relay_pid" "relay HOLD at $point" _has_line 'HOLD' "$relay_log" ||
        case_fail "relay never reached $point"
      ;;
    purge.mid_batch)
      wait_for 30 "$relay_pid" "relay published all $LOANS" _all_published ||
        case_fail "relay did not publish all $LOANS"
      OUTBOX_FAILPOINTS="purge.mid_batch=1*off->hold" hold_bg purge purge --older-than 0s \
        --archive --batch-size 7 "${w[@]}"
      ;;
  esac

  echo "-- crash: kill -9 every lab process on the database${kind/power/, then power-cut}"
  local pid
  for pid in "${live[@]}"; do kill9 "$pid"; done
  U_CUT='-'
  if [ "$kind" = power ]; then
    run power-cut
    [ "$RC" -eq 0 ] || case_fail "power-cut: exit $RC"
    U_CUT=$(sed -n 's/.*commits-lost=\([0-9]*\).*/\1/p' "$OUT")
  fi

  echo "-- recovery: relay to the end, then check"
  run relay --until-empty "${RELAY_ARGS[@]}" --history "$history"
  [ "$RC" -eq 0 ] || case_fail "recovery relay: exit $RC"
  run check --json --history "$history" --synchronous-used "$sync"
  # check's verdicts: 0 valid, 1 invalid, 15 not drained yet, 16 cannot judge; any other code: it
  # could not check (the error's own code from the README's table, e.g. 6 no database, 8 no broker).
  if [ "$RC" -eq 0 ] || [ "$RC" -eq 1 ] || [ "$RC" -eq 15 ] || [ "$RC" -eq 16 ]; then
    U_VALID=$(json_get "$OUT" '$.valid')
    U_LOST=$(json_count "$OUT" '$.lost')
    U_UNDONE=$(json_count "$OUT" '$.undone')
    U_PHANTOM=$(json_count "$OUT" '$.phantom')
    U_UNDONE_PHANTOM=$(json_count "$OUT" '$.undone_phantom')
    U_DUP=$(json_count "$OUT" '$.duplicated')
    U_CORRUPT=0
    [ -n "$(json_get "$OUT" '$.corrupt')" ] && U_CORRUPT=1
    [ "$U_VALID" = 1 ] || case_fail "check $(json_get "$OUT" '$.verdict'): $(cat "$OUT")"
    [ "$U_LOST" = 0 ] || case_fail "$U_LOST lost: an event whose transaction survived is missing"
    [ "$U_CORRUPT" = 0 ] || case_fail "corrupt: $(json_get "$OUT" '$.corrupt')"
    if [ "$sync" = full ] || [ "$kind" = kill ]; then
      [ "$U_UNDONE" = 0 ] || case_fail "$U_UNDONE commits undone at $sync by a $kind"
      [ "$U_PHANTOM" = 0 ] || case_fail "$U_PHANTOM phantom events at $sync by a $kind"
    fi
  else
    case_fail "check: exit $RC (could not check): $(cat "$ERR")"
  fi
  CELL_MS=$((($(_now_us) - start) / 1000))
}

step "matrix: synchronous x crash point x crash kind"
HEADER=$(printf '%-7s %-28s %-6s %5s %7s %8s %11s %8s %12s %-7s %6s' sync point kind lost undone \
  phantom duplicated corrupt commits-cut verdict time)
echo "$HEADER"
ROWS=()
PASSED=0
FAILED=0
SHOWN_UNDONE=0
SHOWN_PHANTOM=0
START=$(_now_us)
for sync in "${SYNCS[@]}"; do
  for point in "${POINTS[@]}"; do
    for kind in "${KINDS[@]}"; do
      log=$TMP/$sync-$point-$kind.log
      cell "$sync" "$point" "$kind" >"$log" 2>&1
      verdict=PASS
      [ "${#CASE_FAILURES[@]}" -eq 0 ] || verdict=FAIL
      row=$(printf '%-7s %-28s %-6s %5s %7s %8s %11s %8s %12s %-7s %6s' "$sync" "$point" "$kind" \
        "$U_LOST" "$U_UNDONE" "$U_PHANTOM" "$U_DUP" "$U_CORRUPT" "$U_CUT" "$verdict" \
        "$((CELL_MS / 1000)).$((CELL_MS % 1000 / 100))s")
      ROWS+=("$row")
      echo "$row"
      if [ "$sync" != full ] && [ "$kind" = power ]; then
        [ "$U_UNDONE" != '?' ] && [ "$U_UNDONE" -gt 0 ] && SHOWN_UNDONE=$((SHOWN_UNDONE + 1))
        [ "$U_UNDONE_PHANTOM" != '?' ] && [ "$U_UNDONE_PHANTOM" -gt 0 ] && SHOWN_PHANTOM=$((SHOWN_PHANTOM + 1))
      fi
      if [ "$verdict" = PASS ]; then
        PASSED=$((PASSED + 1))
      else
        FAILED=$((FAILED + 1))
        for reason in "${CASE_FAILURES[@]}"; do fail "$sync x $point x $kind: $reason"; done
        sed 's/^/    | /' "$log"
      fi
    done
  done
done
[ "$SHOWN_UNDONE" -gt 0 ] ||
  fail "no power cut below full undid a commit: the synchronous lesson no longer shows"
[ "$SHOWN_PHANTOM" -gt 0 ] ||
  fail "no power cut below full left a phantom event: the outbox's weak-durability failure no longer shows"

step "matrix ($((($(_now_us) - START) / 1000000))s, SEED=$SEED)"
echo "$HEADER"
printf '%s\n' "${ROWS[@]}"
echo "$PASSED passed, $FAILED failed; below full, cells with commits undone: $SHOWN_UNDONE, with phantom events: $SHOWN_PHANTOM"
finish
