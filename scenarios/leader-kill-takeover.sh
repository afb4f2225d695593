#!/usr/bin/env bash
# Issue 8, leader mode — kill -9 of the leader mid-batch; the standby takes over.
# Injects: relay-a, `relay --coordination leader --until-empty --batch-size 500 --lease 3s
#          --send-timeout 2s`, held by the failpoint relay.after_ack_before_mark=2*off->hold in its
#          third batch (rows 1001..1500 acked, not marked; with the default pipeline depth 2,
#          batch 4 was read and produced before). relay-b, a standby started while relay-a holds,
#          polls the lease. Then kill -9 of relay-a by its PID.
# Expects: relay-b stood by for relay-a (token 1) and, once relay-a's lease lapsed, took it over
#          with token 2 within lease + 2 s of the kill (measured from the kill to the start of
#          its term, which its lease line gives: until_ms - 3,000): a standby polls at most every
#          --idle-max (1 s), and one more second covers a loaded CI machine's scheduling, while a
#          standby that waited a second lease (6 s) still fails; relay-b exits 0 having marked
#          the 2,000 rows relay-a left, nothing fenced; check: valid, 0 lost, every event on the
#          topic, duplicates exactly the rows in flight at the kill (rows 1001..R with R the
#          records on the topic then, at most the two batches of the pipeline: <= 1,000).
# --postgres (issue 12, leader mode on PostgreSQL; scenarios/pg-leader-kill-takeover.sh passes
#          it): the same on a PostgreSQL outbox at $OUTBOX_PG_URL in a schema of its own (the lease
#          judged on the server's clock), plus a closing status: the lease row at token 2 and no
#          live leader. Skipped (exit 77) only when OUTBOX_PG_URL is unset; scripts/test.sh sets it.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

EVENTS=3000
BATCH=500
LEASE_MS=3000
BACKEND=sqlite
usage="usage: leader-kill-takeover.sh [--postgres]"
while [ $# -gt 0 ]; do
  case $1 in
    --postgres) BACKEND=postgres ;;
    -h | --help) echo "$usage"; FINISHED=1; exit 0 ;;
    *) die "unknown argument '$1'; $usage" ;;
  esac
  shift
done
# The SQLite writer runs at synchronous=normal to keep the setup short; PostgreSQL takes only full.
WRITE_SYNC=(--synchronous normal)
if [ "$BACKEND" = postgres ]; then
  SCENARIO=pg-leader-kill-takeover
  use_postgres
  WRITE_SYNC=()
fi

start_broker

step "reset, then write $EVENTS loans with their outbox events"
run reset
expect_rc 0 "reset"
run "${WRITE_SYNC[@]}" write "$EVENTS" --quiet
expect_rc 0 "write $EVENTS"

step "relay-a leads; HOLD after its third batch's acks, before the mark"
export OUTBOX_FAILPOINTS='relay.after_ack_before_mark=2*off->hold'
start_hold relay-a relay --coordination leader --until-empty --batch-size "$BATCH" --lease 3s \
  --send-timeout 2s --owner relay-a --json
unset OUTBOX_FAILPOINTS
pid_a=$HOLD_PID log_a=$HOLD_LOG
expect_line '^\{"report":"lease","event":"acquired","owner":"relay-a","token":1,' "$log_a"
expect_eq 2 "$(json_lines "$log_a" | jq -c "select(.report == \"batch\" and .token == 1 and .marked == $BATCH)" | grep -c .)" \
  "relay-a's batches marked before the hold"

step "relay-b starts as a standby"
start_bg relay-b relay --coordination leader --until-empty --batch-size "$BATCH" --lease 3s \
  --send-timeout 2s --owner relay-b --json
pid_b=$BG_PID log_b=$BG_LOG
wait_for 30 "$pid_b" "relay-b's standby line" _has_line '"report":"wait","on":"leader","owner":"relay-a","token":1,' "$log_b" ||
  die "relay-b never said it stands by for relay-a"
expect_no_line '"report":"lease"' "$log_b"

step "kill -9 the leader; the standby takes over within the lease + 2 s"
kill_ms=$(($(_now_us) / 1000))
kill9 "$pid_a"
wait_for $((LEASE_MS / 1000 + 10)) "$pid_b" "relay-b's takeover line" \
  _has_line '"report":"lease","event":"acquired","owner":"relay-b","token":2,' "$log_b" ||
  die "relay-b never took the lease over"
took_ms=$(json_lines "$log_b" | jq -r 'select(.report == "lease" and .event == "acquired") | .until_ms' | head -n 1)
took_ms=$((took_ms - LEASE_MS))
echo "relay-b's term began $((took_ms - kill_ms)) ms after the kill (lease ${LEASE_MS} ms)"
[ $((took_ms - kill_ms)) -le $((LEASE_MS + 2000)) ] ||
  fail "takeover $((took_ms - kill_ms)) ms after the kill, more than lease + 2 s"
expect_eq 1 "$(json_lines "$log_b" | jq -c 'select(.report == "lease" and .event == "acquired" and .previous_owner == "relay-a" and .previous_token == 1)' | grep -c .)" \
  "relay-b's takeover lines naming relay-a's term 1"
wait_exit "$pid_b" 60 "relay-b"
expect_eq 0 "$BG_RC" "exit code of relay-b"
grep -v '"report":"batch"' "$log_b" | sed 's/^/  | /'
expect_json "$log_b" ".report == \"final\" and .marked == $((EVENTS - 2 * BATCH)) and .failed == 0 and .fenced == 0 and .pending == 0" \
  "relay-b: final report, the 2,000 rows relay-a left"

step "status: relay-b released the lease at its clean exit; nothing unpublished"
run status --json
expect_rc 0 "status --json"
expect_json "$OUT" ".unpublished == 0 and .claimed == 0 and .published == $EVENTS and .leader == null and .lease_token == 2" \
  "status: all published, no live leader, the lease row at token 2"

step "check: nothing lost, duplicates only what was in flight at the kill"
run check --json
expect_rc 0 "check --json"
dups=$(jq '.duplicated | length' "$OUT")
echo "duplicated: $dups (in-flight window: $((2 * BATCH)), the held batch alone: $BATCH)"
# One writer, so ids follow event numbers; one partition keeps produce order, so what was in
# flight is rows 1001..1000+D: the held batch (acked, so all of it) and a prefix of batch 4.
expect_json "$OUT" "
  .valid and .outbox_rows == $EVENTS and .ok == $EVENTS and .lost == [] and .phantom == []
  and .atomicity == [] and .lost_after_mark == [] and .stuck == [] and .order_violations == []
  and (.duplicated | length) >= $BATCH and (.duplicated | length) <= $((2 * BATCH))
  and .kafka_records == $EVENTS + (.duplicated | length)
  and .duplicated == ([range($((2 * BATCH + 1)); $((2 * BATCH + 1)) + (.duplicated | length)) | {key: \"evt-\\(1000 + .)\", value: 2}] | from_entries)" \
  "check --json: valid, 0 lost, duplicates = the rows in flight at the kill (the held batch and a prefix of the next)"

finish
