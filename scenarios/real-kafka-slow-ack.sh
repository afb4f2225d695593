#!/usr/bin/env bash
# Real Kafka: the send times out, yet the record arrived (chapter 7.1, the dual-write table's third
# row: "发送超时但实际已到达 → 补发一次，下游收到重复 → 靠事件 ID 去重"). broker-slow-ack.sh shows it on
# the embedded broker with `broker-ctl rtt`; real Kafka has no such knob, so this scenario freezes
# the broker's JVM with SIGSTOP: a request on an open connection waits in the socket, unanswered.
# Injects: a one-node Kafka 4.3.0 of this scenario's own. publish 2 (delivery timeout 1500 ms)
#          marks row 1 and pauses (relay.after_mark=1*pause, its connection up); kill -STOP of
#          the broker's JVM; publish released: row 2's request reaches the frozen broker's socket
#          and its delivery times out; then kill -CONT.
# Expects: publish exits 9 with row 2's _MSG_TIMED_OUT and leaves it unpublished; the broker, once
#          thawed, stored evt-1002 anyway (check: pending, in Kafka, nothing lost, exit 15); a
#          second publish re-sends it: check valid, evt-1002 twice, nothing lost or phantom.
# Needs Java 17 and Maven (scripts/install-deps.sh --with-kafka; scripts/test.sh installs them).
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

KAFKA=$REPO_DIR/scripts/kafka.sh
export OUTBOX_KAFKA_DIR=$TMP/kafka OUTBOX_KAFKA_PORT=${OUTBOX_KAFKA_SLOW_PORT:-40192}
command -v java >/dev/null 2>&1 || die "Java is not installed: run scripts/install-deps.sh --with-kafka"

step "start a one-node Kafka 4.3.0 of this scenario's own"
echo "\$ scripts/kafka.sh start"
BROKER=$("$KAFKA" start) || die "Kafka did not start"
broker_pid=$(cat "$OUTBOX_KAFKA_DIR/node-1/pid")
PIDS+=("$broker_pid")
TOPIC=slow-ack-$$-$RANDOM
echo "broker: $BROKER (JVM $broker_pid), topic $TOPIC"

# _frozen PID: every thread of PID is stopped (state T in /proc/PID/task/*/stat; the state is the
# field after the command name, which ends at the last ')').
_frozen() {
  local stat state
  for stat in /proc/"$1"/task/*/stat; do
    state=$(sed -E 's/.*\) ([A-Za-z]).*/\1/' "$stat" 2>/dev/null) || return 1
    [ "$state" = T ] || return 1
  done
}

# _kafka_has N: the topic holds N records (kcat, to the end of the partition).
_kafka_has() { [ "$(kcat -b "$BROKER" -t "$TOPIC" -C -e -q -f '%o\n' 2>/dev/null | grep -c .)" -ge "$1" ]; }

step "reset, write 2 loans"
run reset
expect_rc 0 "reset"
run write 2
expect_rc 0 "write 2"

step "publish 2 marks row 1 and pauses (its connection up); the broker's JVM is frozen"
export OUTBOX_FAILPOINTS='relay.after_mark=1*pause'
start_bg publish-2 publish 2 --delivery-timeout-ms 1500
unset OUTBOX_FAILPOINTS
publish_pid=$BG_PID publish_log=$BG_LOG
wait_paused "$publish_pid" "$publish_log" relay.after_mark
echo "\$ kill -STOP $broker_pid"
kill -STOP "$broker_pid" || die "could not freeze the broker"
# SIGSTOP stops each of the JVM's threads as it next runs: on a busy machine one may still answer
# a request for a moment. Row 2 goes out only once every thread is stopped.
wait_until 10 "" _frozen "$broker_pid" || die "the broker's JVM $broker_pid was not stopped within 10 s"
release "$publish_pid"
wait_exit "$publish_pid" 60 "publish 2"
echo "\$ kill -CONT $broker_pid"
kill -CONT "$broker_pid"
cat "$publish_log"
expect_eq 9 "$BG_RC" "publish 2's exit status (row 2's ack never came within message.timeout.ms)"
expect_line '^\[publish\] outboxId=1 key=evt-1001 offset=0 marked=1$' "$publish_log"
expect_line '^\[publish\] outboxId=2 key=evt-1002 delivery FAILED: .*_MSG_TIMED_OUT.*; left unpublished$' "$publish_log"

step "the thawed broker stored evt-1002; the outbox has it unmarked"
wait_until 30 "" _kafka_has 2 || fail "evt-1002 never reached the broker's log"
expect_verify business=2,outbox=2,published=1,unpublished=1,kafka_records=2,kafka_distinct=2
run check --json
expect_rc 15 "check while evt-1002 is unmarked (pending: not drained yet)"
expect_json "$OUT" '.pending == ["evt-1002"] and .ok == 2 and .lost == [] and .verdict == "not-drained"' \
  "check: evt-1002 pending (unmarked) yet in Kafka, nothing lost"

step "publish 10 re-sends evt-1002: a duplicate, nothing lost"
run publish 10
expect_rc 0 "publish 10"
expect_line '^\[publish\] sent=1 marked=1 unpublished-left=0$' "$OUT"
run check --json
expect_rc 0 "check (valid)"
expect_json "$OUT" '.valid and .duplicated == {"evt-1002": 2} and .lost == [] and .phantom == []' \
  "check: valid, evt-1002 twice, nothing lost or phantom"

finish
