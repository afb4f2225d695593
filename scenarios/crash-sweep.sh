#!/usr/bin/env bash
# Crash sweep: every failpoint x every hit count, instead of a sample (like ninja's
# BuildLogTest.Truncate, which tries every truncation length).
# Injects: for each failpoint listed by `failpoints --json` and each hit count N (1 and 3; with
#          --long or OUTBOX_SWEEP_LONG=1 also 2, 5 and 10), a SIGKILL of the lab process itself the
#          Nth time it reaches that point (OUTBOX_FAILPOINTS='NAME=<N-1>*off->kill'); a point that
#          `failpoints --json` marks "once" (the chapter's holds, reached once per process) only
#          at hit 1, the one count that can fire there. A new point on the write, relay, consume
#          or purge path is swept without editing this file; one elsewhere never fires, and the
#          sweep fails until a workload step reaches it. The workload, all of it under that
#          failpoint and stopped at the first step killed, is sized from N so that every cell
#          fires: write L loans, L = max(40, 7(N+1)) (so the relay and purge run N+1 batches);
#          for the publish.* points, the chapter's publish-hold 3; relay --until-empty in
#          batches of 7 (lease 2s, so a restart can take over a dead relay's claim); the
#          idempotent consumer (consume --dedupe); then, after recovery and the check, purge
#          --older-than 0s in batches of 7. Recovery runs with no failpoint:
#          write the loans still missing (the writer numbers after MAX(outbox.id), and a loan
#          killed before its commit left nothing), relay --until-empty, consume again.
# Expects: per run, `check --json` valid with 0 lost and 0 phantom (duplicates allowed:
#          at-least-once); the consumer applied exactly 40 effects, one per event id; a purge
#          killed in its Nth batch kept its first N-1 batches and rolled the Nth back (L-7(N-1)
#          rows left, none unpublished), and a second purge removes the rest. Every cell must
#          fire: exit 137 AND the failpoint's own `[failpoint] NAME KILL` line on stderr (a kill
#          from anywhere else is no evidence); a cell that did not fire FAILS (the workload no
#          longer reaches the point). Prints the matrix `failpoint x hit -> verdict, step killed,
#          lost, duplicated (ids), phantom` and `N passed, N failed of F cells that fired; K did
#          not fire`: passes and failures count only cells that fired. Each failing cell leaves
#          its HTML report (`report: FILE` in its log): in --report DIR, else
#          <build>/artifacts/failures/crash-sweep-<failpoint>-<hit>.html.
# OUTBOX_SWEEP_ONLY=ERE sweeps only the failpoints whose names match (for debugging one point).
# --exactly-once: every relay.* point (relay.txn_before_commit too) with relay --exactly-once, on
# real Kafka only ($KAFKA_BOOTSTRAP_SERVERS; exit 77, skipped, without it: the embedded broker
# writes no transaction markers, docs/exactly-once.md); each cell's check reads read_committed with
# --exactly-once, so any duplicate fails it (duplicated must be 0, as lost and phantom). Each cell
# runs twice: crash kind kill (the kill -9 alone) and power (every lab process of the cell on the
# power-loss shim, OUTBOX_VFS=powerloss, at synchronous=normal, or $OUTBOX_SWEEP_POWER_SYNC; after
# the kill, `power-cut` undoes every write no fsync made durable: at normal, the relay's marks
# since the last checkpoint, several batches' worth; killed-in reads `relay+cut`). A power cell
# also checks with --history --synchronous-used LEVEL: undone must be 0 too (the writer's commits
# were checkpointed when it closed the database, before the relay ran).
# --postgres (issue 12, crash kinds on PostgreSQL; scenarios/pg-crash-sweep.sh passes it): the
# same sweep with the outbox on the PostgreSQL server at $OUTBOX_PG_URL, in a schema of its own
# (lib.sh use_postgres; exit 77, skipped, without OUTBOX_PG_URL), named pg-crash-sweep. A kill -9
# of the client there is the server's to clean up: it rolls back the dead session's open
# transaction. The purge phase and the purge.* points run only if `purge` runs on that backend:
# exit 18 (not on PostgreSQL yet) takes them out of the sweep, and the summary line names them;
# any other failure of that first purge fails the sweep.
# --postgres --source wal: the relay.wal.* points only, with the WAL relay (relay --source wal,
# docs/wal-relay.md) as the relay of the crash phase and of recovery; scenarios/pg-wal-crash-sweep.sh
# passes it. Each cell drops the slot and its publication after the reset and creates them again
# with a WAL relay that has nothing to send, before the loans are written (a slot streams only
# what commits after it). No purge phase: the WAL relay marks no row, so purge (published rows
# only) would find nothing to remove. Expects, besides every cell firing, 0 lost and 0 phantom:
# duplicates only from the batch killed before its confirm, so at most --batch-size (7) per cell
# (at relay.wal.after_receive, the batch before, when the kill beats its confirm message).
# The check runs before the purge: `check` judges Kafka against the outbox table only, so a purged
# (or archived) row's record would count as a phantom and its loan as an atomicity violation.
# Purge never touches Kafka, so the check before it is the run's judgement of the Kafka side.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

HITS=(1 3)
BACKEND=sqlite
EXACTLY_ONCE=0
SOURCE=poll
usage="usage: crash-sweep.sh [--long] [--postgres [--source wal]] [--exactly-once]   (--long: hit counts 1 2 3 5 10; env OUTBOX_SWEEP_LONG=1)"
[ "${OUTBOX_SWEEP_LONG:-0}" = 1 ] && HITS=(1 2 3 5 10)
while [ $# -gt 0 ]; do
  case $1 in
    --long) HITS=(1 2 3 5 10) ;;
    --postgres) BACKEND=postgres ;;
    --exactly-once) EXACTLY_ONCE=1 ;;
    --source)
      [ "${2:-}" = wal ] || die "--source takes 'wal'; $usage"
      SOURCE=wal
      shift
      ;;
    -h | --help) echo "$usage"; FINISHED=1; exit 0 ;;
    *) die "unknown argument '$1'; $usage" ;;
  esac
  shift
done

BATCH=7
RELAY_ARGS=(--until-empty --batch-size "$BATCH" --lease 2s --send-timeout 1s --quiet)
if [ "$SOURCE" = wal ]; then
  [ "$BACKEND" = postgres ] && [ "$EXACTLY_ONCE" = 0 ] ||
    die "--source wal needs --postgres and no --exactly-once; $usage"
  RELAY_ARGS=(--source wal --until-empty --batch-size "$BATCH" --send-timeout 1s --quiet)
fi
CHECK_ARGS=(check --json)
if [ "$EXACTLY_ONCE" = 1 ]; then
  if [ -z "$EXTERNAL_BROKERS" ]; then
    echo "SKIP: --exactly-once needs real Kafka (KAFKA_BOOTSTRAP_SERVERS): the embedded broker writes no transaction markers"
    FINISHED=1
    exit 77
  fi
  RELAY_ARGS+=(--exactly-once --transaction-timeout 10s)
  CHECK_ARGS+=(--exactly-once --isolation read_committed)
  KINDS=(kill power)
  POWER_SYNC=${OUTBOX_SWEEP_POWER_SYNC:-normal}
  # The power-loss shim is SQLite's: a PostgreSQL server's own crash is pg-server-crash.sh's.
  [ "$BACKEND" = postgres ] && KINDS=(kill)
else
  KINDS=(kill)
fi
command -v sqlite3 >/dev/null 2>&1 || die "sqlite3 is needed (the consumer's effects)"
if [ "$BACKEND" = postgres ]; then
  SCENARIO=pg-crash-sweep
  [ "$SOURCE" = wal ] && SCENARIO=pg-wal-crash-sweep
  use_postgres  # every cell resets the tables of this one schema
  PG_DB=$DB
fi

start_broker
TOPIC_BASE=$TOPIC

step "the failpoints to sweep, from the binary itself"
run failpoints --json
expect_rc 0 "failpoints --json"
mapfile -t POINTS < <(jq -r '.[].name' "$OUT")
declare -A ONCE=()
while IFS= read -r point; do ONCE[$point]=1; done < <(jq -r '.[] | select(.once) | .name' "$OUT")
# The vfs.* points fire only under --vfs powerloss: io-error-sweep.sh and power-loss.sh sweep them.
mapfile -t POINTS < <(printf '%s\n' "${POINTS[@]}" | grep -v '^vfs\.')
# relay.wal.* are reached only by relay --source wal on PostgreSQL: swept with --source wal, and
# only they are.
if [ "$SOURCE" = wal ]; then
  mapfile -t POINTS < <(printf '%s\n' "${POINTS[@]}" | grep '^relay\.wal\.')
else
  mapfile -t POINTS < <(printf '%s\n' "${POINTS[@]}" | grep -v '^relay\.wal\.')
fi
# relay.txn_* are reached only by relay --exactly-once; that sweep runs the relay's points only.
if [ "$EXACTLY_ONCE" = 1 ]; then
  mapfile -t POINTS < <(printf '%s\n' "${POINTS[@]}" | grep '^relay\.')
else
  mapfile -t POINTS < <(printf '%s\n' "${POINTS[@]}" | grep -v '^relay\.txn_')
fi
# Whether purge runs on this backend: asked of the binary, so the purge cells come back by
# themselves once it does.
SWEEP_PURGE=1
NOT_SWEPT=
if [ "$SOURCE" = wal ]; then
  SWEEP_PURGE=0
elif [ "$BACKEND" = postgres ]; then
  step "does purge run on PostgreSQL?"
  run reset
  expect_rc 0 "reset"
  run purge --older-than 0s
  if [ "$RC" -eq 18 ]; then
    SWEEP_PURGE=0
    NOT_SWEPT=$(printf '%s\n' "${POINTS[@]}" | grep '^purge\.' | paste -sd ' ')
    mapfile -t POINTS < <(printf '%s\n' "${POINTS[@]}" | grep -v '^purge\.')
    echo "purge exits 18 here: no purge phase, and not swept: ${NOT_SWEPT:-none}"
  else
    expect_rc 0 "purge --older-than 0s of an empty outbox"
  fi
fi
[ "${#POINTS[@]}" -gt 0 ] || die "failpoints --json listed no failpoint"
if [ -n "${OUTBOX_SWEEP_ONLY:-}" ]; then
  mapfile -t POINTS < <(printf '%s\n' "${POINTS[@]}" | grep -E -- "$OUTBOX_SWEEP_ONLY")
  echo "OUTBOX_SWEEP_ONLY=$OUTBOX_SWEEP_ONLY: only ${POINTS[*]:-none}"
fi
echo "sweeping ${#POINTS[@]} failpoints x hits ${HITS[*]}"

# wal_slot_free: drop the slot and publication of an earlier cell (the walsender of a killed WAL
# relay lets go of its slot a moment after the kill).
wal_slot_free() {
  [ -n "${PG_WAL_SLOT:-}" ] || return 0
  wait_until 10 "slot $PG_WAL_SLOT released" _wal_slot_inactive
  psql "$PG_BASE_URL" -v ON_ERROR_STOP=1 -qc "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '$PG_WAL_SLOT'; DROP PUBLICATION IF EXISTS $PG_WAL_SLOT" >/dev/null ||
    case_fail "could not drop slot $PG_WAL_SLOT"
}

# json_get FILE FILTER: the value jq's FILTER selects; json_count FILE FILTER: the length of the
# array or object there.
json_get() { jq -r "$2" "$1"; }
json_count() { jq -r "$2 | length" "$1"; }

CASE_FAILURES=()
# case_fail REASON: a broken expectation of the current run.
case_fail() { CASE_FAILURES+=("$1"); }

# under_failpoint STEP ARGS...: run a workload step with the failpoint armed. Sets FIRED to STEP
# when the failpoint killed it: exit 137 with the point's own KILL line on stderr. A kill without
# that line, or any other non-zero exit, is a failure of the run.
under_failpoint() {
  local what=$1
  shift
  OUTBOX_FAILPOINTS=$SPEC run "$@"
  if [ "$RC" -eq 137 ] && grep -q -x -F "[failpoint] $POINT KILL" "$ERR"; then
    FIRED=$what
  elif [ "$RC" -eq 137 ]; then
    case_fail "$what under $SPEC: killed (137) without the line '[failpoint] $POINT KILL'"
  elif [ "$RC" -ne 0 ]; then
    case_fail "$what under $SPEC: exit $RC"
    STEP_ERROR=${STEP_ERROR:-"$what exited $RC"}
  fi
}

# purge_phase N: purge under the failpoint (killed in its Nth batch if the point is purge's), then
# a purge without it; the outbox ends empty, the loans all kept.
purge_phase() {
  local n=$1
  echo "-- purge: OUTBOX_FAILPOINTS='$SPEC'"
  local fired_before=$FIRED
  under_failpoint purge purge --older-than 0s --batch-size "$BATCH"
  if [ -z "$fired_before" ] && [ "$FIRED" = purge ]; then
    local kept want=$((LOANS - BATCH * (n - 1)))
    run verify --no-kafka --json
    kept="$(json_get "$OUT" '.outbox') $(json_get "$OUT" '.unpublished')"
    [ "$kept" = "$want 0" ] ||
      case_fail "purge killed in batch $n: outbox, unpublished = $kept, expected $want 0"
  fi
  run purge --older-than 0s --batch-size "$BATCH"
  [ "$RC" -eq 0 ] || case_fail "purge after the kill: exit $RC"
  run verify --no-kafka --json
  [ "$(json_get "$OUT" '.business_loan') $(json_get "$OUT" '.outbox') $(json_get "$OUT" '.unpublished')" = "$LOANS 0 0" ] ||
    case_fail "after purge: $(cat "$OUT"), expected business_loan=$LOANS outbox=0 unpublished=0"
}

# sweep_case FAILPOINT N [KIND]: one run (KIND kill, the default, or power: see --exactly-once
# above); appends a row to the matrix.
sweep_case() {
  local point=$1 n=$2 kind=${3:-kill}
  local suffix=
  [ "$kind" = power ] && suffix=-power
  local cell=$point-$n$suffix
  POINT=$point
  LOANS=$((BATCH * (n + 1) > 40 ? BATCH * (n + 1) : 40))
  DB=${PG_DB:-$TMP/$cell.db}
  TOPIC=$TOPIC_BASE.$point.$n$suffix
  local check_args=("${CHECK_ARGS[@]}")
  if [ "$kind" = power ]; then
    export OUTBOX_VFS=powerloss  # every process of the cell: see docs/power-loss.md
    LAB_SYNCHRONOUS=$POWER_SYNC
    check_args+=(--history "$TMP/$cell.history" --synchronous-used "$POWER_SYNC")
  fi
  SPEC="$point=$((n - 1))*off->kill"
  FIRED=
  STEP_ERROR=  # the first workload step under the failpoint that failed with an error
  CASE_FAILURES=()
  local effects=$TMP/$cell.effects.db
  local consume_args=(consume --dedupe --group sweep --effects-db "$effects")
  # consume.mid_prune is reached only while pruning (--retain): in its cells the consumer prunes
  # every processed_event row older than 1 ms, 5 rows a transaction, after consuming.
  [ "$point" = consume.mid_prune ] && consume_args+=(--retain 1ms --prune-batch-size 5)
  local start reported=
  start=$(_now_us)
  # Every step of the cell records its history, for the cell's report should it fail.
  export OUTBOX_HISTORY=$TMP/$cell.history

  run reset
  [ "$RC" -eq 0 ] || case_fail "reset: exit $RC"
  if [ "$SOURCE" = wal ]; then
    # A fresh slot per cell, made before the loans: a slot streams only what commits after it.
    wal_slot_free
    run relay "${RELAY_ARGS[@]}"
    [ "$RC" -eq 0 ] || case_fail "relay --source wal creating the slot: exit $RC"
    PG_WAL_SLOT=$(sed -n 's/^\[relay\] wal: slot \([a-z0-9_]*\) (created).*/\1/p' "$OUT" | head -n 1)
    [ -n "$PG_WAL_SLOT" ] || case_fail "the first WAL relay did not create its slot: $(cat "$OUT")"
  fi

  echo "-- crash phase: OUTBOX_FAILPOINTS='$SPEC'"
  under_failpoint write write "$LOANS" --quiet
  # publish-hold holds unless its point is configured: it runs only in that point's cells.
  [ -z "$FIRED" ] && [[ $point == publish.* ]] && under_failpoint publish-hold publish-hold 3
  [ -z "$FIRED" ] && under_failpoint relay relay "${RELAY_ARGS[@]}"
  [ -z "$FIRED" ] && under_failpoint consume "${consume_args[@]}"

  if [ "$kind" = power ] && [ -n "$FIRED" ]; then
    echo "-- power cut: every write no fsync made durable is undone"
    run power-cut
    [ "$RC" -eq 0 ] || case_fail "power-cut: exit $RC"
    run verify --no-kafka  # what the cut left marked: the recovery marks the rest, sends nothing
  fi

  echo "-- recovery, no failpoint"
  local missing=$LOANS
  run verify --no-kafka --json
  [ "$RC" -eq 0 ] && missing=$((LOANS - $(json_get "$OUT" '.business_loan')))
  if [ "$missing" -gt 0 ]; then
    run write "$missing" --quiet
    [ "$RC" -eq 0 ] || case_fail "recovery write $missing: exit $RC"
  fi
  run relay "${RELAY_ARGS[@]}"
  [ "$RC" -eq 0 ] || case_fail "recovery relay: exit $RC"
  run "${consume_args[@]}"
  [ "$RC" -eq 0 ] || case_fail "recovery consume: exit $RC"

  run "${check_args[@]}"
  local check_out=$OUT lost='?' dup='?' phantom='?' valid='?'
  # check's verdicts: 0 valid, 1 invalid, 15 not drained yet, 16 cannot judge; any other code: it
  # could not check (the error's own code from the README's table, e.g. 6 no database, 8 no broker).
  if [ "$RC" -eq 0 ] || [ "$RC" -eq 1 ] || [ "$RC" -eq 15 ] || [ "$RC" -eq 16 ]; then
    valid=$(json_get "$check_out" '.valid')
    lost=$(json_count "$check_out" '.lost')
    dup=$(json_count "$check_out" '.duplicated')
    phantom=$(json_count "$check_out" '.phantom')
    [ "$valid" = true ] || case_fail "check: $(json_get "$check_out" '.verdict'): $(cat "$check_out")"
    [ "$lost" = 0 ] || case_fail "check: $lost lost"
    [ "$phantom" = 0 ] || case_fail "check: $phantom phantom"
    [ "$EXACTLY_ONCE" = 0 ] || [ "$dup" = 0 ] || case_fail "check: $dup duplicated read_committed under --exactly-once"
    [ "$kind" = kill ] || [ "$(json_count "$check_out" '.undone')" = 0 ] ||
      case_fail "check: $(json_count "$check_out" '.undone') commits undone by the power cut at synchronous=$POWER_SYNC"
    if [ "$SOURCE" = wal ]; then
      # At most one batch: the one killed before its confirm, or at relay.wal.after_receive the
      # one before it, whose confirm (a message to the walsender, which no reply acknowledges)
      # the kill can beat (1 run in about 4 on the loaded 2-core machine: 7 duplicates).
      [ "$dup" -le "$BATCH" ] || case_fail "check: $dup duplicated, more than one unconfirmed batch of $BATCH"
    fi
    [ "$(json_get "$check_out" '.business_rows')" = "$LOANS" ] ||
      case_fail "check: business rows $(json_get "$check_out" '.business_rows'), expected $LOANS"
  else
    case_fail "check: exit $RC (could not check)"
  fi
  local effects_seen
  effects_seen=$(sqlite3 "$effects" "SELECT COUNT(*) || '/' || COUNT(DISTINCT event_id) FROM loan_effect" 2>&1)
  [ "$effects_seen" = "$LOANS/$LOANS" ] ||
    case_fail "consumer effects (rows/distinct) $effects_seen, expected $LOANS/$LOANS"
  # A failing cell's report shows the run as check judged it, before the purge empties the outbox.
  [ "${#CASE_FAILURES[@]}" -gt 0 ] && { cell_report "$cell" "$OUTBOX_HISTORY"; reported=1; }

  [ "$SWEEP_PURGE" = 1 ] && purge_phase "$n"

  if [ -z "$FIRED" ] && [ -n "$STEP_ERROR" ]; then
    case_fail "the failpoint never fired: $STEP_ERROR before it got there (above)"
  elif [ -z "$FIRED" ]; then
    case_fail "the failpoint never fired: the workload of $LOANS loans did not reach hit $n"
  fi
  [ "${#CASE_FAILURES[@]}" -gt 0 ] && [ -z "$reported" ] && cell_report "$cell" "$OUTBOX_HISTORY"
  unset OUTBOX_HISTORY OUTBOX_VFS LAB_SYNCHRONOUS
  local verdict=PASS
  [ "${#CASE_FAILURES[@]}" -eq 0 ] || verdict=FAIL
  CASE_MS=$((($(_now_us) - start) / 1000))
  local killed_in=not-hit
  [ -z "$STEP_ERROR" ] || killed_in=error
  [ -z "$FIRED" ] || killed_in=$FIRED${suffix:++cut}
  CASE_ROW=$(printf '%-28s %4s  %-4s %-14s %4s %10s %7s %6s' "$point" "$n" "$verdict" \
    "$killed_in" "$lost" "$dup" "$phantom" "$((CASE_MS / 1000)).$((CASE_MS % 1000 / 100))s")
}

step "sweep: ${#POINTS[@]} failpoints x ${#HITS[@]} hit counts"
HEADER=$(printf '%-28s %4s  %-4s %-14s %4s %10s %7s %6s' failpoint hit verdict killed-in lost duplicated phantom time)
echo "$HEADER"
ROWS=()
PASSED=0       # cells that fired and met every expectation
FAILED=0       # cells that fired and broke one
NOT_FIRED=0    # cells whose failpoint never fired: failures of the sweep itself
SWEEP_START=$(_now_us)
for point in "${POINTS[@]}"; do
  for kind in "${KINDS[@]}"; do
  for n in "${HITS[@]}"; do
    # A once point is reached once per process: only hit 1 can fire there.
    [ -n "${ONCE[$point]:-}" ] && [ "$n" -gt 1 ] && continue
    log=$TMP/$point-$n-$kind.log
    sweep_case "$point" "$n" "$kind" >"$log" 2>&1
    ROWS+=("$CASE_ROW")
    echo "$CASE_ROW"
    if [ -z "$FIRED" ]; then
      NOT_FIRED=$((NOT_FIRED + 1))
    elif [ "${#CASE_FAILURES[@]}" -eq 0 ]; then
      PASSED=$((PASSED + 1))
    else
      FAILED=$((FAILED + 1))
    fi
    if [ "${#CASE_FAILURES[@]}" -gt 0 ]; then
      for reason in "${CASE_FAILURES[@]}"; do fail "$point x $n: $reason"; done
      sed 's/^/    | /' "$log"
    fi
  done
  done
done
SWEEP_S=$((($(_now_us) - SWEEP_START) / 1000000))

step "matrix (${SWEEP_S}s)"
echo "$HEADER"
printf '%s\n' "${ROWS[@]}"
echo "$PASSED passed, $FAILED failed of $((PASSED + FAILED)) cells that fired; $NOT_FIRED did not fire${NOT_SWEPT:+; not swept (purge exits 18 on PostgreSQL): $NOT_SWEPT}"
finish
