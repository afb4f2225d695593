#!/usr/bin/env bash
# Kill soak: seeded kill -9s of a writer and one or two relays that run at the same time, each
# kill classified afterwards by the window it landed in; optionally with power cuts between.
# Injects: K SIGKILLs (default 10) while a writer writes E loans (default 1,000) and R relays
#          (--relays, default 1; 2 = two relays competing in claims mode; batches of 10, lease
#          2s) publish them concurrently. The writer is paced at one loan per ~2 ms (failpoint
#          write.after_commit=sleep(2), env OUTBOX_SOAK_WRITER_PACE_MS) so they really overlap.
#          Each kill has one of three triggers, drawn from the seed:
#            line     kill -9 right after the victim's k-th own line (`[write] txn` / `[relay]
#                     batch`, counted since that start);
#            instant  after that k-th line, wait a random delay D (microseconds, uniform in
#                     [0, BATCH x pace) = [0, 20 ms), the time a batch's worth of loans takes to
#                     be written), then kill -9: wherever the victim is at that instant;
#            pause    (relay kills only) the relay is started with
#                     relay.after_ack_before_mark=N*off->pause (N in 0..2 from the seed) and
#                     killed while it stands there: every delivery report of its batch is in,
#                     nothing is marked. This steers a share of the kills into the window the
#                     chapter is about; line and instant kills stay where they fall.
#          --instant-share P (default 50) is the percentage of line/instant kills that are
#          instant; --pause-share P (default 20) the percentage of relay kills that pause (at
#          least one when P > 0 and there is a relay kill, so every run hits the ack-mark
#          window). The same seed draws the same schedule (victims, lines, triggers, delays) and
#          prints the same schedule hash; where the other processes are at that instant is up to
#          the scheduler.
#          Every lab process records its phases in the history (relay: claim, produce, acked,
#          marking, mark, idle; writer: begin, commit; src/lab/chapter/history.h). After the run each
#          kill is classified by the last phase its victim recorded (marking and begin by the
#          outcome too: see window() below), and a table of kills per window is printed. One relay
#          runs the default coordination, leader mode (its "claim" phase is the page read); two
#          relays run --coordination claims, the mode in which they share the work.
#          --power-cut-every K (issue 10): after every K-th landed kill, the power goes out: every
#          lab process on the database gets kill -9 by PID, then `outbox-lab power-cut` returns
#          each file to its last-synced content, then everything restarts. Every process runs
#          through the power-loss shim (OUTBOX_VFS=powerloss) at synchronous=full, so a cut may
#          only undo what no one was told had committed. A process the cut killed restarts with
#          the same scheduled kill still ahead of it. Cuts are serialised with the restarts by a
#          flock: supervisors hold it shared while their process runs, the cutter takes it
#          exclusive (every process dead) for power-cut.
# Expects: the same seed draws the same schedule in a second bash; every kill lands (exit 137;
#          a pause kill's victim stood at its PAUSE line), every pause kill's last phase is
#          acked, at least one kill lands between ack and mark, no settle is half applied; a
#          final relay --until-empty drains, and check --history is valid with 0 lost, 0
#          phantom, E business rows (up to one more per writer kill: a killed commit that
#          surfaced after the next writer counted) and duplicated > 0, where the duplicated
#          ids are exactly the rows a killed relay acknowledged and did not mark, plus at most
#          rows a killed relay had in flight (sent, no delivery report), left while marking,
#          or a fenced settle explains. A failing run prints its seed and the replay command.
#          With power cuts also: floor(kills / K) cuts ran, check --synchronous-used full
#          finds 0 undone commits, 0 undone phantoms and no corruption, and the cut processes'
#          acknowledged, unmarked and in-flight rows join the explained duplicates.
# --exactly-once: every relay runs relay --exactly-once (one relay, leader mode: claims are refused
#          with it), on real Kafka only (KAFKA_BOOTSTRAP_SERVERS; skipped, exit 77, without: the
#          embedded broker writes no transaction markers, docs/exactly-once.md). The check reads
#          read_committed with --exactly-once and expects duplicated=0 besides lost=0: a relay
#          killed between the commit and the mark leaves ids its successor's recovery marks, and
#          one killed before the commit leaves a transaction that read_committed never sees.
# --source wal: the relay is the WAL relay (relay --source wal, docs/wal-relay.md) on PostgreSQL
#          (OUTBOX_PG_URL, a schema of its own; skipped, exit 77, without it; scenarios/
#          pg-wal-kill-soak.sh): one relay, no power cuts, no --exactly-once. Its kill line is
#          `[relay] wal: batch`, a pause kill stands at relay.wal.after_ack_before_confirm (the
#          batch acknowledged, its LSN not confirmed), and a relay restarts once the killed one's
#          walsender has let go of the slot. The WAL relay records no phases, so a relay kill's
#          window is told by its trigger: a pause kill is between ack and confirm. Expects: every
#          kill lands, at least one between ack and confirm, check --history valid with 0 lost and
#          0 phantom, duplicated > 0, and every duplicated id one that a killed WAL relay had sent
#          (the records sent after its last confirm are streamed and sent again).
# Usage:   kill-soak.sh [--seed S] [--kills K] [--events E] [--relays 1|2] [--instant-share P]
#          [--pause-share P] [--power-cut-every K] [--exactly-once] [--source wal]
#          [--until-fail N] [--schedule-only]
#          (env OUTBOX_SOAK_SEED, _KILLS, _EVENTS, _RELAYS). --schedule-only prints the schedule
#          and exits.
#          Default seed: a new one per run, printed first. The long run:
#            kill-soak.sh --kills 50 --events 5000 --relays 2
#          --until-fail N runs seeds S, S+1, ... (S the seed, given or fresh) one after another
#          until one fails or N have passed, and prints the first failing seed's replay command.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

SEED=${OUTBOX_SOAK_SEED:-}
KILLS=${OUTBOX_SOAK_KILLS:-10}
EVENTS=${OUTBOX_SOAK_EVENTS:-1000}
RELAYS=${OUTBOX_SOAK_RELAYS:-1}
INSTANT_SHARE=50
PAUSE_SHARE=20
UNTIL_FAIL=
SCHEDULE_ONLY=
CUT_EVERY=0
EXACTLY_ONCE=0
SOURCE=poll
SOURCE_ARGS=()
BATCH=10
WRITER_PACE_MS=${OUTBOX_SOAK_WRITER_PACE_MS:-2}
usage="usage: kill-soak.sh [--seed S] [--kills K] [--events E] [--relays 1|2] [--instant-share P] [--pause-share P] [--power-cut-every K] [--exactly-once] [--source wal] [--until-fail N] [--schedule-only]"
while [ $# -gt 0 ]; do
  case $1 in
    --seed) SEED=${2:-} ; shift ;;
    --kills) KILLS=${2:-} ; shift ;;
    --events) EVENTS=${2:-} ; shift ;;
    --relays) RELAYS=${2:-} ; shift ;;
    --instant-share) INSTANT_SHARE=${2:-} ; shift ;;
    --pause-share) PAUSE_SHARE=${2:-} ; shift ;;
    --until-fail) UNTIL_FAIL=${2:-} ; shift ;;
    --power-cut-every) CUT_EVERY=${2:-} ; shift ;;
    --schedule-only) SCHEDULE_ONLY=1 ;;
    --exactly-once) EXACTLY_ONCE=1 ;;
    --source)
      [ "${2:-}" = wal ] || die "--source takes 'wal'; $usage"
      SOURCE=wal
      shift ;;
    -h | --help) echo "$usage"; FINISHED=1; exit 0 ;;
    *) die "unknown argument '$1'; $usage" ;;
  esac
  shift
done
# A fresh seed from the clock and PID, in bash RANDOM's seed range, unless one was given.
[ -n "$SEED" ] || SEED=$(((${EPOCHREALTIME//[!0-9]/} ^ $$) % 32768))
for value in "$SEED" "$KILLS" "$EVENTS" "$RELAYS" "$INSTANT_SHARE" "$PAUSE_SHARE" "$CUT_EVERY" ${UNTIL_FAIL:+"$UNTIL_FAIL"}; do
  [[ $value =~ ^[0-9]+$ ]] || die "options take non-negative integers; $usage"
done
[ "$RELAYS" -eq 1 ] || [ "$RELAYS" -eq 2 ] || die "--relays takes 1 or 2; $usage"
{ [ "$INSTANT_SHARE" -le 100 ] && [ "$PAUSE_SHARE" -le 100 ]; } || die "shares are percentages (0..100)"
[ "$KILLS" -ge 1 ] || die "--kills must be at least 1: a soak without kills tests no window"
CUT_ARGS=()
[ "$CUT_EVERY" -eq 0 ] || CUT_ARGS=(--power-cut-every "$CUT_EVERY")
[ "$EXACTLY_ONCE" = 0 ] || CUT_ARGS+=(--exactly-once)
if [ "$SOURCE" = wal ]; then
  [ "$RELAYS" -eq 1 ] && [ "$CUT_EVERY" -eq 0 ] && [ "$EXACTLY_ONCE" = 0 ] ||
    die "--source wal runs one WAL relay (a slot has one reader), without power cuts (PostgreSQL) or --exactly-once; $usage"
  CUT_ARGS+=(--source wal)
  SOURCE_ARGS=(--source wal)
  SCENARIO=pg-wal-kill-soak
fi
if [ "$EXACTLY_ONCE" = 1 ]; then
  [ "$RELAYS" -eq 1 ] || die "--exactly-once runs one relay (leader mode): --relays 2 would need claims, which it refuses"
  if [ -z "$SCHEDULE_ONLY" ] && [ -z "$EXTERNAL_BROKERS" ]; then
    echo "SKIP: --exactly-once needs real Kafka (KAFKA_BOOTSTRAP_SERVERS): the embedded broker writes no transaction markers"
    FINISHED=1
    exit 77
  fi
fi
REPLAY="bash scenarios/kill-soak.sh --seed $SEED --kills $KILLS --events $EVENTS --relays $RELAYS --instant-share $INSTANT_SHARE --pause-share $PAUSE_SHARE${CUT_ARGS[*]:+ ${CUT_ARGS[*]}}"

# --- --until-fail N: this script once per seed, until one fails --------------------------------
if [ -n "$UNTIL_FAIL" ]; then
  step "until-fail: up to $UNTIL_FAIL seeds from $SEED"
  for ((n = 0; n < UNTIL_FAIL; n++)); do
    s=$(((SEED + n) % 32768))
    log=$TMP/seed-$s.log
    start=$(_now_us)
    # lib.sh unset KAFKA_BOOTSTRAP_SERVERS: each seed runs on the same broker.
    KAFKA_BOOTSTRAP_SERVERS=$EXTERNAL_BROKERS bash "$0" --seed "$s" --kills "$KILLS" --events "$EVENTS" --relays "$RELAYS" \
      --instant-share "$INSTANT_SHARE" --pause-share "$PAUSE_SHARE" "${CUT_ARGS[@]}" >"$log" 2>&1
    rc=$?
    echo "seed $s: $(tail -n 1 "$log") ($((($(_now_us) - start) / 1000000))s)"
    grep -h -e '^duplicated [0-9]*:' -e '^seed [0-9]*: [0-9]* kills' "$log" | sed 's/^/    /'
    grep -h '^  window ' "$log" | sed 's/^/    /'
    # Kills whose window the outcome decided (see window() below).
    grep -h -e '-> last phase marking' -e '-> last phase begin, but' "$log" | sed 's/^/    /'
    if [ "$rc" -ne 0 ]; then
      sed 's/^/  | /' "$log" | tail -n 60
      fail "first failing seed $s after $n passing; replay: bash scenarios/kill-soak.sh --seed $s --kills $KILLS --events $EVENTS --relays $RELAYS --instant-share $INSTANT_SHARE --pause-share $PAUSE_SHARE${CUT_ARGS[*]:+ ${CUT_ARGS[*]}}"
      finish
    fi
  done
  echo "all $UNTIL_FAIL seeds from $SEED passed; kills per window over all of them:"
  printf '  %-37s %5s %8s %6s %6s\n' window line instant pause all
  # Sum each window's columns over the seeds' tables (the name is every field but the last 4).
  cat "$TMP"/seed-*.log | awk '/^  window / && $NF ~ /^[0-9]+$/ {
      name = $2; for (i = 3; i <= NF - 4; i++) name = name " " $i
      if (!(name in all)) order[++n] = name
      line[name] += $(NF - 3); instant[name] += $(NF - 2); pause[name] += $(NF - 1); all[name] += $NF }
    END { for (i = 1; i <= n; i++) printf "  window %-30s %5d %8d %6d %6d\n", order[i], line[order[i]], instant[order[i]], pause[order[i]], all[order[i]] }'
  finish
fi

echo "seed $SEED (replay: $REPLAY)"

# --- the schedule: nothing else may draw from RANDOM before it is made ---------------------------
RANDOM=$SEED
DELAY_MAX_US=$((BATCH * WRITER_PACE_MS * 1000))
VICTIM=()   # writer, relay1, relay2
TRIGGER=()  # line, instant, pause
DELAY_US=() # instant: microseconds after the line; pause: N (pause at the N+1st hit)
AT=()       # line and instant: the victim's own line number since its start
declare -A KILLS_OF=([writer]=0 [relay1]=0 [relay2]=0)
for ((i = 0; i < KILLS; i++)); do
  if ((RANDOM % 2 == 0)); then victim=writer; else victim=relay$((1 + RANDOM % RELAYS)); fi
  VICTIM+=("$victim")
  KILLS_OF[$victim]=$((KILLS_OF[$victim] + 1))
done
# Every run needs a relay kill to reach the ack-mark window: a seeded writer kill becomes one.
if [ $((KILLS_OF[relay1] + KILLS_OF[relay2])) -eq 0 ]; then
  i=$((RANDOM % KILLS))
  VICTIM[i]=relay1
  KILLS_OF[writer]=$((KILLS_OF[writer] - 1))
  KILLS_OF[relay1]=1
fi
pauses=0
for ((i = 0; i < KILLS; i++)); do
  if [ "${VICTIM[i]}" != writer ] && ((RANDOM % 100 < PAUSE_SHARE)); then
    TRIGGER+=(pause); pauses=$((pauses + 1))
  elif ((RANDOM % 100 < INSTANT_SHARE)); then TRIGGER+=(instant)
  else TRIGGER+=(line); fi
done
if [ "$PAUSE_SHARE" -gt 0 ] && [ "$pauses" -eq 0 ]; then
  relay_kills=()
  for ((i = 0; i < KILLS; i++)); do [ "${VICTIM[i]}" = writer ] || relay_kills+=("$i"); done
  TRIGGER[${relay_kills[RANDOM % ${#relay_kills[@]}]}]=pause
fi
# Kill points sum to at most half of each process's lines, so it cannot finish its work first
# (a relay's batches hold at most BATCH rows; two relays share them).
for ((i = 0; i < KILLS; i++)); do
  victim=${VICTIM[i]}
  if [ "$victim" = writer ]; then span=$((EVENTS / (2 * (KILLS_OF[writer] + 1))))
  else span=$((EVENTS / BATCH / RELAYS / (2 * (KILLS_OF[$victim] + 1)))); fi
  [ "$span" -ge 1 ] || die "--events $EVENTS is too few for $KILLS kills"
  AT+=($((1 + RANDOM % span)))
  case ${TRIGGER[i]} in
    instant) DELAY_US+=($((((RANDOM << 15) | RANDOM) % DELAY_MAX_US))) ;;
    pause) DELAY_US+=($((RANDOM % 3))) ;;
    *) DELAY_US+=(0) ;;
  esac
done
SCHEDULE=$TMP/schedule.txt
PAUSE_POINT=relay.after_ack_before_mark
[ "$SOURCE" = wal ] && PAUSE_POINT=relay.wal.after_ack_before_confirm
for ((i = 0; i < KILLS; i++)); do
  case ${TRIGGER[i]} in
    line) what="right after its own line #${AT[i]}" ;;
    instant) what="${DELAY_US[i]} us after its own line #${AT[i]}" ;;
    pause) what="standing at $PAUSE_POINT (pause after ${DELAY_US[i]} passes)" ;;
  esac
  printf '  kill %d: %s, %s: %s\n' $((i + 1)) "${VICTIM[i]}" "${TRIGGER[i]}" "$what"
done >"$SCHEDULE"
echo "schedule: $KILLS kills over $EVENTS events, $RELAYS relay(s), instant share $INSTANT_SHARE%," \
  "pause share $PAUSE_SHARE%, delays in [0, $DELAY_MAX_US) us; hash $(sha256sum <"$SCHEDULE" | cut -c1-16)"
cat "$SCHEDULE"
if [ -n "$SCHEDULE_ONLY" ]; then FINISHED=1; exit 0; fi
# The same seed must replay the same schedule: draw it again in a fresh bash and compare.
if ! diff -q <(bash "$0" --seed "$SEED" --kills "$KILLS" --events "$EVENTS" --relays "$RELAYS" \
  --instant-share "$INSTANT_SHARE" --pause-share "$PAUSE_SHARE" "${SOURCE_ARGS[@]}" --schedule-only 2>&1 |
  sed -n 's/^  kill /  kill /p') "$SCHEDULE" >/dev/null; then
  fail "seed $SEED drew a different schedule in a second bash: it would not replay"
  finish
fi

[ "$SOURCE" = wal ] && use_postgres
start_broker
lab_args
RESULTS=$TMP/results.txt  # one line per kill or problem, appended by the supervisors
: >"$RESULTS"
# Every lab process appends its records (and phase marks) here; a report's history wins.
export OUTBOX_HISTORY=${OUTBOX_HISTORY:-$TMP/history.jsonl}
HISTORY=$OUTBOX_HISTORY

# written: business rows so far (the writer is the only one adding them).
written() {
  "$LAB_BIN" "${LAB_ARGS[@]}" verify --no-kafka --json 2>/dev/null | jq -r .business_loan
}

# _us_text US: microseconds as seconds for read -t (e.g. 0.012345).
_us_text() { printf '%d.%06d' $(($1 / 1000000)) $(($1 % 1000000)); }

# Power cuts (--power-cut-every): a supervisor holds $CUT_LOCK shared from before it counts the
# business rows for a start until its process has been reaped, and does not start while
# $CUT_PENDING exists; the cutter kills the processes named in $TMP/*.child and takes the lock
# exclusive, so power-cut runs with no lab process on the database.
CUT_LOCK=$TMP/power.lock
CUT_PENDING=$TMP/power.pending
CUT_KILLED=$TMP/power.killed  # PIDs the cutter sent kill -9, one a line
: >"$CUT_KILLED"
# _run_lock: (power cuts only) wait out a pending cut, then hold the lock shared on LOCK_FD.
_run_lock() {
  [ "$CUT_EVERY" -gt 0 ] || return 0
  while :; do
    while [ -e "$CUT_PENDING" ]; do sleep 0.005; done  # polls the cutter's flag (a condition)
    exec {LOCK_FD}>"$CUT_LOCK"
    flock -s "$LOCK_FD"
    [ -e "$CUT_PENDING" ] || return 0
    exec {LOCK_FD}>&-
  done
}
# _run_unlock NAME: the process was reaped; forget its PID and let a cut proceed.
_run_unlock() {
  [ "$CUT_EVERY" -gt 0 ] || return 0
  rm -f -- "$TMP/$1.child"
  exec {LOCK_FD}>&-
}
# _was_cut PID: the cutter killed PID.
_was_cut() { [ "$CUT_EVERY" -gt 0 ] && grep -qx "$1" "$CUT_KILLED"; }

# supervise NAME PATTERN: runs in the background. For each kill of NAME in the schedule: start
# the process (its stdout, and for a pause kill its stderr, through a FIFO line-buffered by
# stdbuf, so each line is seen as it is printed), kill -9 it by PID on its trigger, restart. A
# process a power cut killed first is restarted for the same kill. Then one last run to
# completion. Reports to $RESULTS: `kill`, `cut`, `ended` and `FAIL` lines.
supervise() {
  local name=$1 pattern=$2 child='' k seen line status args envs i fd trigger left wanted landed
  local fifo=$TMP/$name.fifo log=$TMP/$name.log LOCK_FD
  trap '[ -n "$child" ] && kill -9 "$child" 2>/dev/null; exit 143' TERM
  for ((i = 0; i < KILLS; i++)); do
    [ "${VICTIM[i]}" = "$name" ] || continue
    trigger=${TRIGGER[i]}
    k=${AT[i]}
    _run_lock
    # Only the writer has no next start (all its loans written): it says why in $RESULTS.
    _process_args "$name" "" "$i" || { _run_unlock "$name"; break; }
    rm -f -- "$fifo"
    mkfifo "$fifo" || { echo "FAIL $name: mkfifo $fifo" >>"$RESULTS"; return; }
    echo "--- $name start: ${args[*]} (kill $((i + 1)): $trigger)" >>"$log"
    wanted=$pattern
    [ "$trigger" = pause ] && { wanted="[failpoint] $PAUSE_POINT PAUSE"; k=1; }
    # A simple command with &: $! is env, which execs stdbuf, which execs the lab: the lab's PID.
    if [ "$trigger" = pause ]; then
      env "${envs[@]}" stdbuf -oL "$LAB_BIN" "${LAB_ARGS[@]}" "${args[@]}" </dev/null >"$fifo" 2>&1 &
    else
      env "${envs[@]}" stdbuf -oL "$LAB_BIN" "${LAB_ARGS[@]}" "${args[@]}" </dev/null >"$fifo" 2>>"$TMP/$name.err" &
    fi
    child=$!
    [ "$CUT_EVERY" -eq 0 ] || echo "$child" >"$TMP/$name.child"
    exec {fd}<"$fifo"
    seen=0
    landed=1
    while IFS= read -r -u "$fd" line; do
      printf '%s\n' "$line" >>"$log"
      [[ $line == "$wanted"* ]] && seen=$((seen + 1))
      [ "$seen" -ge "$k" ] && break
    done
    [ "$seen" -ge "$k" ] || landed=0
    if [ "$landed" -eq 1 ] && [ "$trigger" = instant ]; then
      # The random instant: keep draining the victim's output until DELAY_US[i] have passed.
      local deadline=$((${EPOCHREALTIME/./} + DELAY_US[i]))
      while left=$((deadline - ${EPOCHREALTIME/./})); [ "$left" -gt 0 ]; do
        if IFS= read -r -t "$(_us_text "$left")" -u "$fd" line; then
          printf '%s\n' "$line" >>"$log"
        elif [ $? -le 128 ]; then
          landed=0  # end of output: the victim ended before its instant
          break
        fi
      done
    fi
    [ "$landed" -eq 1 ] && kill -9 "$child"
    exec {fd}<&-
    wait "$child"
    status=$?
    _run_unlock "$name"
    if [ "$landed" -eq 1 ] && [ "$status" -eq 137 ]; then
      echo "kill $((i + 1)) $name pid=$child trigger=$trigger: exit 137" >>"$RESULTS"
    elif [ "$status" -eq 137 ] && _was_cut "$child"; then
      echo "cut $name pid=$child before kill $((i + 1)): restarting for it" >>"$RESULTS"
      i=$((i - 1))  # the same scheduled kill again, on the restarted process
    else
      echo "FAIL $name kill $((i + 1)) ($trigger): ended with exit $status after $seen of $k lines, before its kill" >>"$RESULTS"
    fi
    child=
  done
  while :; do
    _run_lock
    _process_args "$name" final || { _run_unlock "$name"; return; }
    echo "--- $name last run: ${args[*]}" >>"$log"
    env "${envs[@]}" "$LAB_BIN" "${LAB_ARGS[@]}" "${args[@]}" </dev/null >>"$log" 2>>"$TMP/$name.err" &
    child=$!
    [ "$CUT_EVERY" -eq 0 ] || echo "$child" >"$TMP/$name.child"
    wait "$child"
    status=$?
    _run_unlock "$name"
    [ "$status" -eq 137 ] && _was_cut "$child" || break
    echo "cut $name pid=$child in its last run: restarting it" >>"$RESULTS"
  done
  child=
  echo "ended $name last run: exit $status" >>"$RESULTS"
  [ "$status" -eq 0 ] || echo "FAIL $name last run: exit $status" >>"$RESULTS"
}

# cutter: (power cuts only) runs in the background until $TMP/soak.done exists. After every
# CUT_EVERY-th landed kill: flag the cut, kill -9 every running lab process by PID until the lock
# can be taken exclusive, run power-cut, print what it undid to $RESULTS as a `cut N:` line.
cutter() {
  local cuts=0 landed pid fd file
  while [ ! -e "$TMP/soak.done" ]; do
    landed=$(grep -c '^kill .*: exit 137$' "$RESULTS")
    if [ "$landed" -lt $(((cuts + 1) * CUT_EVERY)) ]; then
      sleep 0.02  # polls the results file for the next landed kill (a condition)
      continue
    fi
    cuts=$((cuts + 1))
    : >"$CUT_PENDING"
    exec {fd}>"$CUT_LOCK"
    while :; do
      for file in "$TMP"/*.child; do
        [ -e "$file" ] || continue
        pid=$(cat "$file" 2>/dev/null) || continue
        [ -n "$pid" ] || continue
        grep -qx "$pid" "$CUT_KILLED" || echo "$pid" >>"$CUT_KILLED"
        kill -9 "$pid" 2>/dev/null
      done
      flock -x -w 0.05 "$fd" && break
    done
    "$LAB_BIN" "${LAB_ARGS[@]}" power-cut >"$TMP/power-cut-$cuts.out" 2>&1
    echo "cut $cuts: after kill $landed, power-cut exit $? $(tail -n 1 "$TMP/power-cut-$cuts.out")" >>"$RESULTS"
    rm -f -- "$CUT_PENDING"
    exec {fd}>&-
  done
}

# --pipeline 1: a victim's last phase then describes its one batch in flight; with the default
# two, the last phase would be the newer batch's while the older one may sit between ack and mark.
RELAY_ARGS=(relay --batch-size "$BATCH" --lease 2s --send-timeout 1s --idle-max 200ms --pipeline 1)
# Two relays compete for rows only in claims mode; in leader mode one would stand by, and a pause
# kill aimed at it would wait for an ack it never gets. One relay runs the default, leader mode.
[ "$RELAYS" -eq 1 ] || RELAY_ARGS+=(--coordination claims)
# The WAL relay: no lease, no pipeline (a batch is confirmed before the next is read).
[ "$SOURCE" = wal ] && RELAY_ARGS=(relay --source wal --batch-size "$BATCH" --send-timeout 1s --idle-max 200ms)
# Transactions: a killed relay's open one is aborted by its successor's init_transactions (the same
# transactional.id); 10 s bounds it should a relay not come back.
EOS_ARGS=()
[ "$EXACTLY_ONCE" = 0 ] || EOS_ARGS=(--exactly-once --transaction-timeout 10s)
RELAY_ARGS+=("${EOS_ARGS[@]}")
# _process_args NAME [final] [KILL]: the command line for the next start of NAME into `args`,
# its environment into `envs`.
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
  elif [ "$SOURCE" = wal ] && ! wait_until 10 "" _wal_slot_inactive >/dev/null 2>&1; then
    # A killed WAL relay's walsender lets go of the slot a moment after the kill; a relay started
    # before that is refused (exit 24).
    echo "FAIL $1: the slot $PG_WAL_SLOT still active 10 s after the last relay ended" >>"$RESULTS"
    return 1
  elif [ "${2:-}" = final ]; then
    args=("${RELAY_ARGS[@]}" --until-empty --quiet)
  else
    args=("${RELAY_ARGS[@]}")
    if [ "${TRIGGER[$3]}" = pause ]; then
      local skip=${DELAY_US[$3]} passes=''
      [ "$skip" -eq 0 ] || passes="$skip*off->"
      envs=("OUTBOX_FAILPOINTS=$PAUSE_POINT=${passes}pause")
    fi
  fi
  return 0
}

if [ "$CUT_EVERY" -gt 0 ]; then
  command -v flock >/dev/null 2>&1 || die "flock (util-linux) is needed for --power-cut-every"
  # Every lab process, the checks' too, goes through the power-loss shim at full: a process on
  # the database without it would make its syncs durable behind the side log's back.
  export OUTBOX_VFS=powerloss
  step "power cuts: after every $CUT_EVERY kills (synchronous=full, the power-loss shim)"
fi
step "reset, then the writer and $RELAYS relay(s) side by side, killed on schedule"
run reset
expect_rc 0 "reset"
if [ "$EXACTLY_ONCE" = 1 ]; then
  # The cluster's first transactional producer makes Kafka create __transaction_state (50
  # partitions): on a fresh Kafka 4.3.0, a soak's first relay ended with exit 8 (broker
  # unavailable) at that moment. A relay on the empty outbox first, so the soak's relays meet a ready coordinator.
  step "exactly-once: one relay on the empty outbox first (transaction coordinator, state topic)"
  for attempt in 1 2 3; do
    RUN_TIMEOUT_S=60 run "${RELAY_ARGS[@]}" --until-empty
    [ "$RC" -eq 0 ] && break
    echo "(attempt $attempt: exit $RC; again)"
  done
  expect_rc 0 "relay --exactly-once on the empty outbox"
fi
if [ "$SOURCE" = wal ]; then
  step "the WAL relay creates its slot on the empty outbox (a slot streams what commits after it)"
  run relay --source wal --until-empty
  expect_rc 0 "relay --source wal --until-empty on the empty outbox"
  PG_WAL_SLOT=$(sed -n 's/^\[relay\] wal: slot \([a-z0-9_]*\) (created).*/\1/p' "$OUT" | head -n 1)
  [ -n "$PG_WAL_SLOT" ] || die "the first WAL relay did not create its slot: $(cat "$OUT")"
  wait_until 10 "the slot released" _wal_slot_inactive
fi
SOAK_START=$(_now_us)
SUPS=()
if [ "$CUT_EVERY" -gt 0 ]; then
  cutter 2>>"$TMP/supervise.err" &
  CUTTER=$!
  PIDS+=("$CUTTER")
fi
RELAY_LINE='[relay] batch'
[ "$SOURCE" = wal ] && RELAY_LINE='[relay] wal: batch'
supervise writer '[write] txn' 2>>"$TMP/supervise.err" &
SUPS+=($!)
for ((r = 1; r <= RELAYS; r++)); do
  supervise "relay$r" "$RELAY_LINE" 2>>"$TMP/supervise.err" &
  SUPS+=($!)
done
PIDS+=("${SUPS[@]}")

SOAK_TIMEOUT_S=$((30 + KILLS * 4 + (CUT_EVERY > 0 ? KILLS / CUT_EVERY * 5 : 0)))
for sup in "${SUPS[@]}"; do
  wait_until "$SOAK_TIMEOUT_S" "supervisor $sup to finish" process_gone "$sup"
  if ! process_gone "$sup"; then  # what a hang needs to be understood (seen once, under load)
    echo "(the supervisors' errors)"; tail -n 20 "$TMP/supervise.err" 2>/dev/null
    echo "(the kills so far)"; tail -n 20 "$RESULTS" 2>/dev/null
    echo "(this run's processes)"; pgrep -af -- "$TMP" || true
  fi
done
if [ "$CUT_EVERY" -gt 0 ]; then
  : >"$TMP/soak.done"
  wait_until 30 "the power cutter to finish" process_gone "$CUTTER"
fi
SOAK_S=$((($(_now_us) - SOAK_START) / 1000000))
cat "$RESULTS"
echo "(writer and relay phase: ${SOAK_S}s; logs $TMP/writer.log, $TMP/relay1.log)"
while IFS= read -r line; do fail "${line#FAIL }"; done < <(grep '^FAIL ' "$RESULTS")
expect_eq "$KILLS" "$(grep -c '^kill .*: exit 137$' "$RESULTS")" "kill -9s that landed (exit 137)"
for victim in writer relay1 relay2; do
  expect_eq "${KILLS_OF[$victim]}" "$(grep -c "^kill [0-9]* $victim " "$RESULTS")" "$victim kills"
done
if [ "$CUT_EVERY" -gt 0 ]; then
  expect_eq $((KILLS / CUT_EVERY)) "$(grep -c '^cut [0-9]*: .*power-cut exit 0 ' "$RESULTS")" \
    "power cuts that ran (power-cut exit 0)"
fi

if [ "$SOURCE" = wal ]; then
  step "drain: relay --source wal --until-empty (once the slot is free)"
  wait_until 10 "the slot released" _wal_slot_inactive
  run relay --source wal --until-empty --batch-size "$BATCH" --send-timeout 1s --quiet
  expect_rc 0 "final relay --source wal --until-empty"
else
  step "drain: relay --until-empty (after the lease of a killed relay's claim runs out)"
  run relay --until-empty --batch-size "$BATCH" --lease 2s --send-timeout 1s --quiet "${EOS_ARGS[@]}"
  expect_rc 0 "final relay --until-empty"
fi

# The loans written, counted now that no process has the database open. Each writer start wrote
# EVENTS minus the loans it counted; that count can miss the commit its killed predecessor had in
# flight, which surfaces later: SQLite's commit is in the -wal before the -shm index points at it,
# so readers do not see it while another process keeps the index, until every connection has
# ended uncleanly and the next one rebuilds the index from the -wal (measured: a writer killed at
# the -wal's sync, a reader holding the index, both counts after it); PostgreSQL's server may
# finish a COMMIT whose client was killed after the count. The next writer then writes one loan
# more, so each writer kill may add one.
FINAL_LOANS=$(written)
if ! [[ "$FINAL_LOANS" =~ ^[0-9]+$ ]] || [ "$FINAL_LOANS" -lt "$EVENTS" ] ||
  [ "$FINAL_LOANS" -gt $((EVENTS + KILLS_OF[writer])) ]; then
  fail "loans written: '$FINAL_LOANS', expected $EVENTS to $((EVENTS + KILLS_OF[writer])) ($EVENTS, plus at most one surfaced commit per writer kill)"
elif [ "$FINAL_LOANS" -gt "$EVENTS" ]; then
  echo "loans written: $FINAL_LOANS: $((FINAL_LOANS - EVENTS)) commit(s) left in flight by a killed writer surfaced after the next writer counted the loans"
fi

CHECK_EOS=()
EXPECT_EOS=
if [ "$EXACTLY_ONCE" = 1 ]; then
  CHECK_EOS=(--exactly-once --isolation read_committed)
  EXPECT_EOS=,duplicated=0
fi
step "check: nothing lost, nothing phantom${EXPECT_EOS:+, nothing duplicated (read_committed)}"
if [ "$SOURCE" = wal ]; then
  # PostgreSQL: no power cut, so no --synchronous-used; the slot tells check what is published.
  run check --json --history "$HISTORY" --expect "valid=1,business_rows=$FINAL_LOANS,outbox_rows=$FINAL_LOANS,lost=0,phantom=0,atomicity=0,stuck=0"
else
  run check --json --history "$HISTORY" --synchronous-used full "${CHECK_EOS[@]}" --expect "valid=1,business_rows=$FINAL_LOANS,outbox_rows=$FINAL_LOANS,lost=0,phantom=0,atomicity=0,lost_after_mark=0,stuck=0,undone=0,undone_phantom=0$EXPECT_EOS"
fi
expect_rc 0 "check --expect (valid, nothing lost, phantom or undone)"
[ "$(jq -r '.corrupt // "" | tostring' "$OUT")" = "" ] || fail "check found corruption: $(jq -c .corrupt "$OUT")"
CHECK_JSON=$TMP/check.json
cp "$OUT" "$CHECK_JSON"

step "where each kill landed: the last phase its victim recorded"
# kill NUMBER VICTIM PID TRIGGER, one a line, in kill order.
KILLED=$TMP/killed.txt
sed -n 's/^kill \([0-9]*\) \([a-z0-9]*\) pid=\([0-9]*\) trigger=\([a-z]*\): exit 137$/\1 \2 \3 \4/p' "$RESULTS" |
  sort -n >"$KILLED"
# Per killed PID: its last phase, the rows it acknowledged and did not mark, the rows it sent
# with no delivery report (in flight), the event of a transaction it left open (writer); from the
# history, one pass. SENT: every event any relay sent (the drain sends every committed row).
# OK_TXN: every event a writer was told committed.
# The processes a power cut killed join the victims (their rows explain duplicates too), not the
# window table.
KILLED_PIDS=$( { cut -d' ' -f3 "$KILLED"; sed -n 's/^cut [a-z0-9]* pid=\([0-9]*\) .*/\1/p' "$RESULTS"; } |
  jq -R -s -c 'split("\n") | map(select(. != "") | tonumber)')
VICTIMS=$TMP/victims.json
jq -R -s -c --argjson killed "$KILLED_PIDS" '
  [split("\n")[] | fromjson? | select(.process as $p | $killed | index($p))]
  | group_by(.process)
  | map(. as $ops | {
      key: (.[0].process | tostring),
      value: {
        last: ([$ops[] | select(.f == "phase") | .value] | last),
        acked_unmarked: (([$ops[] | select(.f == "send" and .type == "ok") | .value]
                          - [$ops[] | select(.f == "mark" and .type == "ok") | .value]) | unique),
        in_flight: (([$ops[] | select(.f == "send" and .type == "invoke") | .value]
                     - [$ops[] | select(.f == "send" and (.type == "ok" or .type == "fail")) | .value]
                     - [$ops[] | select(.f == "mark" and .type == "ok") | .value]) | unique),
        open_txn: (([$ops[] | select(.f == "txn" and .type == "invoke") | .value]
                    - [$ops[] | select(.f == "txn" and .type != "invoke") | .value]) | last)}})
  | from_entries' "$HISTORY" >"$VICTIMS" || fail "cannot read the history $HISTORY"
SENT=$TMP/sent.json
jq -R -s -c '[split("\n")[] | fromjson? | select(.f == "send") | .value] | unique' "$HISTORY" >"$SENT" ||
  fail "cannot read the history $HISTORY"
OK_TXN=$TMP/ok-txn.json
jq -R -s -c '[split("\n")[] | fromjson? | select(.f == "txn" and .type == "ok") | .value] | unique' \
  "$HISTORY" >"$OK_TXN" || fail "cannot read the history $HISTORY"
DUPS=$(jq -c '.duplicated | keys' "$CHECK_JSON")

# window VICTIM PID: the window name, then (for the per-kill line) how it was told.
# A phase is recorded just before or after the step it names, so two last phases do not say on
# their own which side of a commit the kill fell, and the outcome decides:
#   writer "begin": its open transaction E committed iff a relay sent E and no later writer was
#     told it committed E (the next writer reuses the index of a transaction that did not commit);
#   relay "marking" (SettleBatch running, or its mark records being written): the settle is one
#     transaction, so its acknowledged and unmarked rows were re-sent (duplicated) all or none:
#     all = it had not committed (between ack and mark), none = it had (after mark).
window() {
  local victim=$1 pid=$2 trigger=${3:-} last txn rows dup
  last=$(jq -r --arg p "$pid" '.[$p].last // "none"' "$VICTIMS")
  # The WAL relay records no phases: its pause kills stood between ack and confirm.
  if [ "$SOURCE" = wal ] && [ "$victim" != writer ]; then
    if [ "$trigger" = pause ]; then echo "relay between ack and confirm|paused at $PAUSE_POINT"
    else echo "relay streaming (no phases)|$trigger"; fi
    return
  fi
  case $victim:$last in
    writer:begin)
      txn=$(jq -r --arg p "$pid" '.[$p].open_txn // ""' "$VICTIMS")
      if [ -n "$txn" ] && jq -e --arg e "$txn" 'index($e) != null' "$SENT" >/dev/null &&
        jq -e --arg e "$txn" 'index($e) == null' "$OK_TXN" >/dev/null; then
        echo "writer after commit|begin, but $txn committed (killed before its records)"
      else
        echo "writer before commit|begin${txn:+, $txn not committed}"
      fi ;;
    writer:commit) echo "writer after commit|commit" ;;
    writer:*) echo "writer starting (no phase yet)|$last" ;;
    *:claim) echo "relay after claim|claim" ;;
    *:produce) echo "relay after produce|produce" ;;
    *:acked) echo "relay between ack and mark|acked" ;;
    *:marking)
      read -r rows dup < <(jq -r --arg p "$pid" --argjson dup "$DUPS" \
        '(.[$p].acked_unmarked // []) as $a | "\($a | length) \($a - ($a - $dup) | length)"' "$VICTIMS")
      if [ "$rows" -gt 0 ] && [ "$dup" -eq "$rows" ]; then
        echo "relay between ack and mark|marking, settle not committed ($rows rows re-sent)"
      elif [ "$dup" -eq 0 ]; then
        echo "relay after mark|marking, settle committed ($rows rows not re-sent)"
      else
        echo "relay settle half applied|marking, $dup of $rows rows re-sent"
      fi ;;
    *:mark) echo "relay after mark|mark" ;;
    *) echo "relay idle|$last" ;;
  esac
}
declare -A COUNT=()
ACK_MARK_ROWS=()   # rows the ack-mark kills left acknowledged and unmarked
while read -r n victim pid trigger; do
  IFS='|' read -r w how < <(window "$victim" "$pid" "$trigger")
  COUNT["$w|$trigger"]=$((${COUNT["$w|$trigger"]:-0} + 1))
  COUNT["$w|all"]=$((${COUNT["$w|all"]:-0} + 1))
  left=$(jq -r --arg p "$pid" '(.[$p].acked_unmarked // []) | length' "$VICTIMS")
  echo "  kill $n: $victim pid $pid, $trigger -> last phase $how: $w (acked and unmarked: $left)"
  if [ "$w" = "relay between ack and mark" ] || [ "$w" = "relay between ack and confirm" ]; then
    mapfile -t -O "${#ACK_MARK_ROWS[@]}" ACK_MARK_ROWS < <(jq -r --arg p "$pid" '.[$p].acked_unmarked[]' "$VICTIMS")
  fi
  [ "$w" != "relay settle half applied" ] ||
    fail "kill $n: a settle is one transaction, yet only part of the rows it left acknowledged and unmarked were re-sent ($how)"
  [ "$trigger" != pause ] || [ "$how" = acked ] || [ "$SOURCE" = wal ] ||
    fail "kill $n paused at relay.after_ack_before_mark but its last phase is '$how'"
done <"$KILLED"
printf '  %-37s %5s %8s %6s %6s\n' window line instant pause all
WINDOWS=("relay idle" "relay after claim" "relay after produce" "relay between ack and mark"
  "relay after mark" "relay settle half applied")
[ "$SOURCE" = wal ] && WINDOWS=("relay streaming (no phases)" "relay between ack and confirm")
for w in "writer starting (no phase yet)" "writer before commit" "writer after commit" "${WINDOWS[@]}"; do
  printf '  window %-30s %5d %8d %6d %6d\n' "$w" "${COUNT["$w|line"]:-0}" "${COUNT["$w|instant"]:-0}" \
    "${COUNT["$w|pause"]:-0}" "${COUNT["$w|all"]:-0}"
done
ACK_MARK_KILLS=$((${COUNT["relay between ack and mark|all"]:-0} + ${COUNT["relay between ack and confirm|all"]:-0}))
[ "$ACK_MARK_KILLS" -ge 1 ] || fail "no kill landed between ack and mark (seed $SEED)"

if [ "$SOURCE" = wal ]; then
  step "duplicates: only ids a killed WAL relay had sent (streamed again after its last confirm)"
  # The WAL relay writes no mark, so its history cannot say which of a victim's acknowledged
  # records were confirmed: every duplicate must be among the ids the killed relays sent, and the
  # ack-confirm kills left a batch acknowledged and unconfirmed, so there is at least one.
  jq -n -r --argjson v "$(cat "$VICTIMS")" --argjson dup "$DUPS" --slurpfile sent_by <(
    jq -R -s -c --argjson killed "$KILLED_PIDS" '[split("\n")[] | fromjson? | select(.f == "send" and .type == "invoke" and (.process as $p | $killed | index($p))) | .value] | unique' "$HISTORY") '
    $sent_by[0] as $s
    | "duplicated \($dup | length): sent by a killed WAL relay \($dup - ($dup - $s) | length), unexplained \($dup - $s | length)",
      "unexplained: \($dup - $s | .[:10] | join(" "))"' >"$TMP/dups.txt"
  cat "$TMP/dups.txt"
  DUP_COUNT=$(jq 'length' <<<"$DUPS")
  [ "$DUP_COUNT" -gt 0 ] || fail "duplicated=0: the ack-confirm kill left nothing to send again (seed $SEED)"
  grep -q 'unexplained 0$' "$TMP/dups.txt" || fail "duplicates no killed WAL relay sent: $(sed -n 's/^unexplained: //p' "$TMP/dups.txt")"
  ACK_MARK_UNIQUE=$(printf '%s\n' "${ACK_MARK_ROWS[@]}" | sort -u | grep -c .)
  echo "ack-confirm kills: $ACK_MARK_KILLS, rows the paused relays had acknowledged: $ACK_MARK_UNIQUE"
  echo "seed $SEED: $KILLS kills (writer ${KILLS_OF[writer]}, relay1 ${KILLS_OF[relay1]}) over $EVENTS events in ${SOAK_S}s, --source wal; ack-confirm kills $ACK_MARK_KILLS;" \
    "$(jq -r '"lost=\(.lost | length) duplicated=\(.duplicated | length) phantom=\(.phantom | length)"' "$CHECK_JSON")"
  [ "${#FAILURES[@]}" -eq 0 ] || echo "failing seed $SEED; replay: $REPLAY"
  finish
fi

if [ "$EXACTLY_ONCE" = 1 ]; then
  # What at-least-once would have duplicated: the rows the killed relays left committed and
  # unmarked. Their successors' recovery marked them instead (check above: duplicated=0).
  ACK_MARK_UNIQUE=$(printf '%s\n' "${ACK_MARK_ROWS[@]}" | sort -u | grep -c .)
  [ "$ACK_MARK_UNIQUE" -ge 1 ] || fail "the ack-mark kills left no committed row unmarked (seed $SEED)"
  echo "ack-mark kills: $ACK_MARK_KILLS, rows they left committed and unmarked: $ACK_MARK_UNIQUE (at-least-once would send them again; recovery marked them)"
  echo "seed $SEED: $KILLS kills (writer ${KILLS_OF[writer]}, relay1 ${KILLS_OF[relay1]}) over $EVENTS events in ${SOAK_S}s, --exactly-once; ack-mark kills $ACK_MARK_KILLS;" \
    "$(jq -r '"lost=\(.lost | length) duplicated=\(.duplicated | length) phantom=\(.phantom | length)"' "$CHECK_JSON") (read_committed)"
  [ "${#FAILURES[@]}" -eq 0 ] || echo "failing seed $SEED; replay: $REPLAY"
  finish
fi

step "duplicates: exactly the rows the killed relays left acknowledged and unmarked"
# Every row a killed relay acknowledged and did not mark is re-sent after its lease: duplicated,
# unless the relay was killed while marking (its settle may have committed: all or none, checked
# above). A row it had sent with no delivery report yet (in flight) may have reached the broker: it
# may be duplicated. A fenced settle (check's own explanation) may duplicate too. Nothing else may.
jq -n -r --argjson v "$(cat "$VICTIMS")" --argjson dup "$DUPS" \
  --argjson fenced "$(jq -c '.history.fenced_duplicates // []' "$CHECK_JSON")" '
  ([$v[] | select(.last != "marking") | .acked_unmarked[]] | unique) as $acked
  | ([$v[] | select(.last == "marking") | .acked_unmarked[]] | unique) as $marking
  | ([$v[] | .in_flight[]] | unique) as $flight
  | "duplicated \($dup | length): acked and unmarked by a killed relay \($acked | length)"
    + " (not duplicated: \($acked - $dup | length)),"
    + " killed while marking \($dup - $acked | map(select(. as $d | $marking | index($d))) | length) of \($marking | length),"
    + " in flight at a kill \($dup - $acked - $marking | map(select(. as $d | $flight | index($d))) | length),"
    + " fenced \($dup - $acked - $marking - $flight | map(select(. as $d | $fenced | index($d))) | length),"
    + " unexplained \($dup - $acked - $marking - $flight - $fenced | length)",
    "unexplained: \($dup - $acked - $marking - $flight - $fenced | .[:10] | join(" "))",
    "acked_not_duplicated: \($acked - $dup | .[:10] | join(" "))"' >"$TMP/dups.txt"
cat "$TMP/dups.txt"
DUP_COUNT=$(jq 'length' <<<"$DUPS")
[ "$DUP_COUNT" -gt 0 ] || fail "duplicated=0: no kill left an acknowledged row unmarked (seed $SEED)"
grep -q 'unexplained 0$' "$TMP/dups.txt" || fail "duplicates no kill explains: $(sed -n 's/^unexplained: //p' "$TMP/dups.txt")"
grep -q '(not duplicated: 0)' "$TMP/dups.txt" ||
  fail "rows a killed relay acknowledged and left unmarked, not duplicated: $(sed -n 's/^acked_not_duplicated: //p' "$TMP/dups.txt")"
ACK_MARK_UNIQUE=$(printf '%s\n' "${ACK_MARK_ROWS[@]}" | sort -u | grep -c .)
[ "$ACK_MARK_UNIQUE" -ge 1 ] || fail "the ack-mark kills left no acknowledged row unmarked (seed $SEED)"
echo "ack-mark kills: $ACK_MARK_KILLS, rows they left acknowledged and unmarked: $ACK_MARK_UNIQUE"

echo "seed $SEED: $KILLS kills (writer ${KILLS_OF[writer]}, relay1 ${KILLS_OF[relay1]}, relay2 ${KILLS_OF[relay2]})" \
  "over $EVENTS events in ${SOAK_S}s; ack-mark kills $ACK_MARK_KILLS;" \
  "${CUT_ARGS[*]:+power cuts $(grep -c '^cut [0-9]*: ' "$RESULTS"), processes cut $(grep -c '^cut [a-z]' "$RESULTS");}" \
  "$(jq -r '"lost=\(.lost | length) duplicated=\(.duplicated | length) phantom=\(.phantom | length)"' "$CHECK_JSON")"
if [ "${#FAILURES[@]}" -gt 0 ]; then
  echo "failing seed $SEED; replay: $REPLAY"
  cell_report "seed-$SEED" "$OUTBOX_HISTORY"  # the failing run's HTML report (issue 11)
fi
finish
