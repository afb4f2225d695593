#!/usr/bin/env bash
# Kill soak: seeded random kill -9s of a writer and a relay that run at the same time.
# Injects: K SIGKILLs (default 10) while a writer writes E loans (default 1,000) and a relay
#          (batches of 10, lease 2s) publishes them concurrently. The writer is paced at one loan
#          per ~2 ms (failpoint write.after_commit=sleep(2), env OUTBOX_SOAK_WRITER_PACE_MS) so the
#          two really overlap. Each kill -9 is triggered by the victim's own progress, not by
#          time: the writer dies right after its k-th `[write] txn` line, the relay right after
#          its j-th `[relay] batch` line (counted since that process started). After each kill
#          the victim is restarted at once: the writer with the loans still missing, the relay as
#          it was. The schedule — which process, after how many of its own lines — comes from
#          bash's RANDOM seeded with the seed and is printed before anything runs; the same seed
#          replays the same schedule (where the other process is at that instant is up to the
#          scheduler).
# Expects: every kill lands (exit 137), then a final relay --until-empty drains, and check is
#          valid with 0 lost and 0 phantom and E business rows; duplicates are allowed
#          (at-least-once) and reported.
# Usage:   kill-soak.sh [--seed S] [--kills K] [--events E]   (env OUTBOX_SOAK_SEED, _KILLS,
#          _EVENTS). Default seed: a new one per run, printed first. The long run:
#          kill-soak.sh --kills 50 --events 5000   (about 30 s here; the CI default about 10 s).
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

SEED=${OUTBOX_SOAK_SEED:-}
KILLS=${OUTBOX_SOAK_KILLS:-10}
EVENTS=${OUTBOX_SOAK_EVENTS:-1000}
BATCH=10
WRITER_PACE_MS=${OUTBOX_SOAK_WRITER_PACE_MS:-2}
usage="usage: kill-soak.sh [--seed S] [--kills K] [--events E]"
while [ $# -gt 0 ]; do
  case $1 in
    --seed) SEED=${2:-} ; shift ;;
    --kills) KILLS=${2:-} ; shift ;;
    --events) EVENTS=${2:-} ; shift ;;
    -h | --help) echo "$usage"; FINISHED=1; exit 0 ;;
    *) die "unknown argument '$1'; $usage" ;;
  esac
  shift
done
# A fresh seed from the clock and PID, in bash RANDOM's seed range, unless one was given.
[ -n "$SEED" ] || SEED=$(((${EPOCHREALTIME//[!0-9]/} ^ $$) % 32768))
for value in "$SEED" "$KILLS" "$EVENTS"; do
  [[ $value =~ ^[0-9]+$ ]] || die "--seed, --kills and --events take non-negative integers; $usage"
done
echo "seed $SEED (replay: bash scenarios/kill-soak.sh --seed $SEED --kills $KILLS --events $EVENTS)"
# The relay must still have batches to print when its last kill is due: its kill points add up
# to at most half of EVENTS/BATCH batch lines, and each kill can waste one more batch.
[ "$EVENTS" -ge $((4 * BATCH * KILLS)) ] || die "--events must be at least $((4 * BATCH * KILLS)) for $KILLS kills"

# --- the schedule: nothing else may draw from RANDOM before it is made ---------------------------
RANDOM=$SEED
VICTIM=()
WRITER_KILLS=0
RELAY_KILLS=0
for ((i = 0; i < KILLS; i++)); do
  if ((RANDOM % 2 == 0)); then VICTIM+=(writer); WRITER_KILLS=$((WRITER_KILLS + 1))
  else VICTIM+=(relay); RELAY_KILLS=$((RELAY_KILLS + 1)); fi
done
# Kill points sum to at most half of each process's lines, so it cannot finish its work first.
WRITER_SPAN=$((EVENTS / (2 * (WRITER_KILLS + 1))))
RELAY_SPAN=$((EVENTS / BATCH / (2 * (RELAY_KILLS + 1))))
WRITER_AT=()
RELAY_AT=()
for victim in "${VICTIM[@]}"; do
  if [ "$victim" = writer ]; then WRITER_AT+=($((1 + RANDOM % WRITER_SPAN)))
  else RELAY_AT+=($((1 + RANDOM % RELAY_SPAN))); fi
done
echo "schedule: $KILLS kills over $EVENTS events"
w=0
r=0
for ((i = 0; i < KILLS; i++)); do
  if [ "${VICTIM[$i]}" = writer ]; then
    echo "  kill $((i + 1)): writer, right after its [write] txn line #${WRITER_AT[$w]}"; w=$((w + 1))
  else
    echo "  kill $((i + 1)): relay, right after its [relay] batch line #${RELAY_AT[$r]}"; r=$((r + 1))
  fi
done

start_broker
lab_args
RESULTS=$TMP/results.txt  # one line per kill or problem, appended by the supervisors
: >"$RESULTS"

# written: business rows so far (the writer is the only one adding them).
written() {
  "$LAB_BIN" "${LAB_ARGS[@]}" verify --no-kafka --json 2>/dev/null | jq -r .business_loan
}

# supervise NAME PATTERN KILL_POINTS: runs in the background. For each kill point k: start the
# process (its stdout through a FIFO, line-buffered by stdbuf, so each line is seen as it is
# printed), count its lines starting with PATTERN, kill -9 it by PID right after the kth, restart.
# Then one last run to completion. Reports to $RESULTS; `kill`, `ended` and `FAIL` lines.
supervise() {
  local name=$1 pattern=$2 points=$3 child='' k seen line status args envs i=0
  local fifo=$TMP/$name.fifo log=$TMP/$name.log
  trap '[ -n "$child" ] && kill -9 "$child" 2>/dev/null; exit 143' TERM
  for k in $points; do
    i=$((i + 1))
    _process_args "$name" || break
    rm -f -- "$fifo"
    mkfifo "$fifo" || { echo "FAIL $name: mkfifo $fifo" >>"$RESULTS"; return; }
    echo "--- $name start: ${args[*]} (kill after line $k)" >>"$log"
    # A simple command with &: $! is env, which execs stdbuf, which execs the lab: the lab's PID.
    env "${envs[@]}" stdbuf -oL "$LAB_BIN" "${LAB_ARGS[@]}" "${args[@]}" </dev/null >"$fifo" 2>>"$TMP/$name.err" &
    child=$!
    seen=0
    while IFS= read -r line; do
      printf '%s\n' "$line" >>"$log"
      [[ $line == "$pattern"* ]] && seen=$((seen + 1))
      if [ "$seen" -ge "$k" ]; then
        kill -9 "$child"
        break
      fi
    done <"$fifo"
    wait "$child"
    status=$?
    child=
    if [ "$seen" -ge "$k" ] && [ "$status" -eq 137 ]; then
      echo "kill $name #$i after line $k: exit 137" >>"$RESULTS"
    else
      echo "FAIL $name kill #$i: ended with exit $status after $seen of $k lines, before its kill" >>"$RESULTS"
    fi
  done
  _process_args "$name" final || return
  echo "--- $name last run: ${args[*]}" >>"$log"
  env "${envs[@]}" "$LAB_BIN" "${LAB_ARGS[@]}" "${args[@]}" </dev/null >>"$log" 2>>"$TMP/$name.err" &
  child=$!
  wait "$child"
  status=$?
  child=
  echo "ended $name last run: exit $status" >>"$RESULTS"
  [ "$status" -eq 0 ] || echo "FAIL $name last run: exit $status" >>"$RESULTS"
}

RELAY_ARGS=(relay --batch-size "$BATCH" --lease 2s --send-timeout 1s --idle-max 200ms)
# _process_args NAME [final]: the command line for the next start of NAME into `args`, its
# environment into `envs`.
_process_args() {
  envs=()
  if [ "$1" = writer ]; then
    # Paced by a failpoint that sleeps (not a crash), so the writer is still writing while the
    # relay restarts: without it, 1,000 loans are committed before the relay's first batch.
    envs=("OUTBOX_FAILPOINTS=write.after_commit=sleep($WRITER_PACE_MS)")
    local have missing
    have=$(written)
    [ -n "$have" ] || { echo "FAIL writer: cannot count business rows" >>"$RESULTS"; return 1; }
    missing=$((EVENTS - have))
    if [ "$missing" -le 0 ]; then
      [ "${2:-}" = final ] || echo "FAIL writer: all $EVENTS loans written before its kills were done" >>"$RESULTS"
      return 1
    fi
    args=(write --verbose "$missing")  # its [write] txn lines are the kill points
  elif [ "${2:-}" = final ]; then
    args=("${RELAY_ARGS[@]}" --until-empty --quiet)
  else
    args=("${RELAY_ARGS[@]}")
  fi
}

step "reset, then the writer and the relay side by side, killed on schedule"
run reset
expect_rc 0 "reset"
SOAK_START=$(_now_us)
supervise writer '[write] txn' "${WRITER_AT[*]}" 2>>"$TMP/supervise.err" &
WRITER_SUP=$!
PIDS+=("$WRITER_SUP")
supervise relay '[relay] batch' "${RELAY_AT[*]}" 2>>"$TMP/supervise.err" &
RELAY_SUP=$!
PIDS+=("$RELAY_SUP")

SOAK_TIMEOUT_S=$((30 + KILLS * 4))
for sup in "$WRITER_SUP" "$RELAY_SUP"; do
  wait_until "$SOAK_TIMEOUT_S" "supervisor $sup to finish" process_gone "$sup"
done
SOAK_S=$((($(_now_us) - SOAK_START) / 1000000))
cat "$RESULTS"
echo "(writer and relay phase: ${SOAK_S}s; logs $TMP/writer.log, $TMP/relay.log)"
while IFS= read -r line; do fail "${line#FAIL }"; done < <(grep '^FAIL ' "$RESULTS")
expect_eq "$KILLS" "$(grep -c '^kill .*: exit 137$' "$RESULTS")" "kill -9s that landed (exit 137)"
expect_eq "$WRITER_KILLS" "$(grep -c '^kill writer ' "$RESULTS")" "writer kills"
expect_eq "$RELAY_KILLS" "$(grep -c '^kill relay ' "$RESULTS")" "relay kills"

step "drain: relay --until-empty (after the lease of a killed relay's claim runs out)"
run relay --until-empty --batch-size "$BATCH" --lease 2s --send-timeout 1s --quiet
expect_rc 0 "final relay --until-empty"

step "check: nothing lost, nothing phantom"
run check --json --expect "valid=1,business_rows=$EVENTS,outbox_rows=$EVENTS,lost=0,phantom=0,atomicity=0,lost_after_mark=0,stuck=0"
expect_rc 0 "check --expect (valid, nothing lost or phantom)"
echo "seed $SEED: $KILLS kills ($WRITER_KILLS writer, $RELAY_KILLS relay) over $EVENTS events;" \
  "$(jq -r '"lost=\(.lost | length) duplicated=\(.duplicated | length)"' "$OUT")"
finish
