#!/usr/bin/env bash
# Real Kafka, three nodes: kill -9 of the partition's leader while the relay drains.
# Injects: a three-node Apache Kafka 4.3.0 KRaft cluster of this scenario's own (scripts/kafka.sh
#          start --nodes 3: replication factor 3, min.insync.replicas=2; the relay produces with
#          acks=all). 20,000 loans are written; the relay drains them and is paused by the
#          failpoint relay.after_produce=4*off->1*pause->off in its fifth batch (batches 1..4 were
#          produced, batch 5 is in librdkafka's hands). While it stands there, kill -9 of the JVM
#          that leads the lab's partition (found from the cluster's metadata); then the relay is
#          released and drains on to the new leader; then the killed node restarts on its data.
# Expects: the relay ends by itself (no restart of its own), exit 0, nothing parked; a new leader
#          that is not the killed node; check: valid, lost=0, every event in Kafka. Every
#          duplicate is attributed to its cause from the history: a relay resend (the event was
#          sent more than once by the relay) or a producer-level duplicate (sent once, written
#          twice: librdkafka retried a request the dead leader had already written; librdkafka
#          issue 4953's family). The two counts are printed and must add up to the duplicates.
# Needs Java 17 and Maven (scripts/install-deps.sh --with-kafka; scripts/test.sh installs them).
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

EVENTS=20000
BATCH=1000
KAFKA=$REPO_DIR/scripts/kafka.sh
# A cluster of this scenario's own, beside the suite's one-node broker (39392) and a developer's
# (39092): ports 39592..39594, controllers 39692..39694.
export OUTBOX_KAFKA_DIR=$TMP/kafka OUTBOX_KAFKA_PORT=${OUTBOX_KAFKA_FAILOVER_PORT:-39592}
command -v java >/dev/null 2>&1 || die "Java is not installed: run scripts/install-deps.sh --with-kafka"

kafka() {
  echo "\$ scripts/kafka.sh $*" >&2
  "$KAFKA" "$@"
}

# The JVMs are stopped by PID at exit, with the rest of this scenario's processes.
track_nodes() {
  local i pid
  for i in 1 2 3; do
    pid=$(cat "$OUTBOX_KAFKA_DIR/node-$i/pid" 2>/dev/null) || continue
    _forget_pid "$pid"
    kill -0 "$pid" 2>/dev/null && PIDS+=("$pid")
  done
  return 0
}

step "start a three-node KRaft cluster (replication factor 3, min.insync.replicas=2)"
start_us=$(_now_us)
BROKER=$(kafka start --nodes 3) || die "the three-node cluster did not start"
track_nodes
echo "cluster: $BROKER, ready in $((($(_now_us) - start_us) / 1000)) ms"
kafka version
TOPIC=failover-$$-$RANDOM
kafka create-topic "$TOPIC" || die "could not create $TOPIC"
wait_until 30 "" kafka leader "$TOPIC" >/dev/null 2>&1 || die "no leader for $TOPIC"
leader=$(kafka leader "$TOPIC")
echo "leader of $TOPIC/0: node $leader"

H=$TMP/history.jsonl
step "reset, then write $EVENTS loans"
run --history "$H" reset
expect_rc 0 "reset"
run --history "$H" --synchronous normal write "$EVENTS" --quiet
expect_rc 0 "write $EVENTS"

step "the relay drains; it pauses in its fifth batch, after the produce"
export OUTBOX_FAILPOINTS='relay.after_produce=4*off->1*pause->off'
start_bg relay --history "$H" relay --until-empty --batch-size "$BATCH" --send-timeout 30s --lease 2m \
  --max-attempts 20 --backoff-max 1s --json
unset OUTBOX_FAILPOINTS
relay_pid=$BG_PID relay_log=$BG_LOG
wait_paused "$relay_pid" "$relay_log" relay.after_produce

step "kill -9 the partition's leader, node $leader, then release the relay"
killed=$(kafka kill-leader "$TOPIC") || die "could not kill the leader"
expect_eq "$leader" "$killed" "the node killed is the leader"
release "$relay_pid"
wait_exit "$relay_pid" 180 "the relay"
expect_eq 0 "$BG_RC" "the relay's exit code"
grep -v '"report":"batch"' "$relay_log" | sed 's/^/  | /'
expect_json "$relay_log" ".report == \"final\" and .pending == 0 and .parked_left == 0" \
  "the relay drained everything by itself"

new_leader=$(kafka leader "$TOPIC" 2>/dev/null || echo none)
echo "leader of $TOPIC/0 after the kill: node $new_leader"
[ "$new_leader" != "$killed" ] && [ "$new_leader" != none ] ||
  fail "the partition's leader is still node $killed (or none): no failover happened"

step "restart the killed node on its data folder"
kafka start --nodes 3 >/dev/null || fail "node $killed did not restart"
track_nodes
kafka status

step "check: nothing lost; every duplicate attributed to its cause"
run check --history "$H" --json
expect_rc 0 "check --json"
expect_json "$OUT" ".valid and .lost == [] and .phantom == [] and .ok == $EVENTS and .outbox_rows == $EVENTS" \
  "check: valid, every event in Kafka, none lost"
# check attributes each duplicate from the histories: sent more than once (a relay re-send) or
# written more often than sent (a producer retry).
producer_dups=$(jq '.history.producer_duplicates | length' "$OUT")
jq -r '.history.producer_duplicates[]' "$OUT" | sed 's/^/producer-level duplicate: /'
dups=$(jq '.duplicated | length' "$OUT")
relay_resends=$((dups - producer_dups))
echo
echo "leader failover      value"
echo "events               $EVENTS"
echo "killed node          $killed (new leader: $new_leader)"
echo "lost                 $(jq '.lost | length' "$OUT")"
echo "duplicated           $dups"
echo "  relay resend       $relay_resends"
echo "  producer-level     $producer_dups"
# Every duplicate has a send behind it in the history: a relay re-send has two or more.
jq -r 'select(.f == "send" and .type == "invoke") | .value' "$H" | sort | uniq -c |
  awk '$1 > 1 { print $2 }' | sort >"$TMP/sent-twice.txt"
jq -r '.duplicated | keys[]' "$OUT" | sort >"$TMP/duplicated.txt"
resent=$(comm -12 "$TMP/sent-twice.txt" "$TMP/duplicated.txt" | grep -c .) || true
expect_eq "$relay_resends" "$resent" "duplicates the history shows sent more than once (relay re-sends)"

finish
