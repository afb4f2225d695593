#!/usr/bin/env bash
# Real Kafka, one node: kill -9 of the broker's JVM mid-relay, then a restart from its data folder.
# Injects: a one-node Apache Kafka 4.3.0 of this scenario's own (scripts/kafka.sh, its own folder
#          and ports), 5,000 loans, a relay paused by relay.after_produce=2*off->1*pause->off in
#          its third batch (batches 1 and 2 acknowledged and marked). kill -9 of the broker's JVM by
#          its PID, the relay released while the broker is down, then the broker restarted on the
#          same data folder (what Kafka itself does after a crash: it recovers its log segments).
# Expects: the 2,000 records acknowledged before the crash are still in the partition after the
#          restart (offsets 0..1999: the embedded broker, which keeps records in memory, would
#          have lost them); the relay rides out the outage without a restart of its own, exit 0,
#          nothing parked, nothing pending; check: valid, lost=0, every event in Kafka.
# Needs Java 17 and Maven (scripts/install-deps.sh --with-kafka; scripts/test.sh installs them).
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

EVENTS=5000
BATCH=1000
KAFKA=$REPO_DIR/scripts/kafka.sh
# Ports 39792 and 39892: apart from the suite's broker (39392), the failover cluster (39592..) and
# a developer's (39092).
export OUTBOX_KAFKA_DIR=$TMP/kafka OUTBOX_KAFKA_PORT=${OUTBOX_KAFKA_CRASH_PORT:-39792}
command -v java >/dev/null 2>&1 || die "Java is not installed: run scripts/install-deps.sh --with-kafka"

kafka() {
  echo "\$ scripts/kafka.sh $*" >&2
  "$KAFKA" "$@"
}

track_node() {
  local pid
  pid=$(cat "$OUTBOX_KAFKA_DIR/node-1/pid" 2>/dev/null) || return 0
  _forget_pid "$pid"
  kill -0 "$pid" 2>/dev/null && PIDS+=("$pid")
  return 0
}

# low_watermark..high_watermark of partition 0, as the broker reports them (kcat -Q is not enough:
# it gives one offset); read with the lab's own consumer, which also counts this run's records.
partition_extent() {
  kcat -b "$BROKER" -t "$TOPIC" -C -e -q -f '%o\n' 2>/dev/null | awk 'NR == 1 { lo = $1 } { hi = $1 } END { print NR, lo, hi }'
}

step "start a one-node Kafka 4.3.0 of this scenario's own"
start_us=$(_now_us)
BROKER=$(kafka start) || die "Kafka did not start"
track_node
echo "broker: $BROKER, ready in $((($(_now_us) - start_us) / 1000)) ms; $(kafka version)"
TOPIC=crash-$$-$RANDOM

step "reset, then write $EVENTS loans"
run reset
expect_rc 0 "reset"
run --synchronous normal write "$EVENTS" --quiet
expect_rc 0 "write $EVENTS"

step "the relay sends two batches, then pauses in its third, after the produce"
export OUTBOX_FAILPOINTS='relay.after_produce=2*off->1*pause->off'
start_bg relay relay --until-empty --batch-size "$BATCH" --pipeline 1 --send-timeout 60s --lease 2m \
  --max-attempts 50 --backoff-max 1s --json
unset OUTBOX_FAILPOINTS
relay_pid=$BG_PID relay_log=$BG_LOG
wait_paused "$relay_pid" "$relay_log" relay.after_produce
expect_eq 2 "$(json_lines "$relay_log" | jq -c "select(.report == \"batch\" and .marked == $BATCH)" | grep -c .)" \
  "batches acknowledged and marked before the crash"
read -r before _ _ <<<"$(partition_extent)"
echo "records in the partition before the crash: $before"
[ "$before" -ge $((2 * BATCH)) ] || fail "only $before records before the crash, expected at least $((2 * BATCH))"

step "kill -9 the broker's JVM, release the relay while the broker is down"
pid=$(cat "$OUTBOX_KAFKA_DIR/node-1/pid")
kafka kill 1
_forget_pid "$pid"
release "$relay_pid"

step "restart the broker on its data folder"
start_us=$(_now_us)
kafka start >/dev/null || die "Kafka did not restart on its data folder"
track_node
echo "restarted in $((($(_now_us) - start_us) / 1000)) ms"

step "the relay carries on by itself"
wait_exit "$relay_pid" 180 "the relay"
expect_eq 0 "$BG_RC" "the relay's exit code"
grep -v '"report":"batch"' "$relay_log" | sed 's/^/  | /'
expect_json "$relay_log" ".report == \"final\" and .pending == 0 and .parked_left == 0 and .acked == $EVENTS" \
  "the relay's final report: every row acknowledged, none pending or parked"

step "the records acknowledged before the crash survived it"
read -r count lo hi <<<"$(partition_extent)"
echo "partition 0 after the restart: $count records, offsets $lo..$hi"
expect_eq 0 "$lo" "the partition's first offset (nothing acknowledged was dropped)"
[ "$count" -ge "$EVENTS" ] || fail "$count records after the restart, fewer than the $EVENTS events"
kcat -b "$BROKER" -t "$TOPIC" -C -e -q -o 0 -c $((2 * BATCH)) -f '%k\n' 2>/dev/null >"$TMP/first.txt"
expect_eq "evt-1001" "$(head -n 1 "$TMP/first.txt")" "the first record's key"
expect_eq "evt-$((1000 + 2 * BATCH))" "$(tail -n 1 "$TMP/first.txt")" "record $((2 * BATCH - 1))'s key"

step "check: valid, nothing lost"
run check --json
expect_rc 0 "check --json"
expect_json "$OUT" ".valid and .lost == [] and .phantom == [] and .ok == $EVENTS" "check: valid, every event in Kafka"
echo "duplicated: $(jq '.duplicated | length' "$OUT") (records sent again after the outage: at-least-once)"

finish
