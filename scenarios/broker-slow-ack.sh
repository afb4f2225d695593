#!/usr/bin/env bash
# Broker acks slower than message.timeout.ms (chapter 7.1, the dual-write table's third row:
# "发送超时但实际已到达 → 补发一次，下游收到重复 → 靠事件 ID 去重").
# Injects: `broker-ctl rtt 3000` (every broker response 3 s late) against the chapter's relay with
#          --delivery-timeout-ms 1500 (message.timeout.ms), twice:
#          (1) on a fresh producer: `publish 1`, started with the RTT already in place;
#          (2) on a producer whose connection is up: `publish 2` marks row 1 and then pauses
#              (failpoint relay.after_mark=1*pause); the RTT is applied while it stands there, and
#              only then is it released (SIGUSR1) to send row 2.
# Expects: (1) exit 9, row 1 unpublished, and NO record in Kafka: with librdkafka 2.0.2 and the
#          mock broker, a new connection's ApiVersion and Metadata replies are 3 s late too, so the
#          message times out in the client's queue before any ProduceRequest leaves (measured:
#          kafka_records=0; the send after `rtt 0` lands at offset 0 of its partition).
#          (2) row 1 published; row 2's send fails with _MSG_TIMED_OUT (exit 9) and stays
#          unpublished, yet the broker stored it: Kafka holds evt-1002 while the outbox does not
#          mark it (check: pending=[evt-1002], nothing lost, exit 15). After `rtt 0`, `publish 10` re-sends it:
#          check valid, duplicated = {evt-1002: 2}, 0 lost, 0 phantom.
# Always uses the embedded broker, even with KAFKA_BOOTSTRAP_SERVERS: faults need its control socket.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"


start_control_broker

step "reset, write 2 loans"
run reset
expect_rc 0 "reset"
run write 2
expect_rc 0 "write 2"

step "(1) RTT 3000 ms, then the chapter's relay on a fresh producer with a 1500 ms delivery timeout"
broker_ctl rtt 3000
run publish 1 --delivery-timeout-ms 1500
expect_rc 9 "publish 1 under a 3 s RTT"
expect_line '^\[publish\] outboxId=1 key=evt-1001 delivery FAILED: .*_MSG_TIMED_OUT.*; left unpublished$' "$OUT"
expect_line '^\[publish\] sent=0 marked=0 failed=1 unpublished-left=2$' "$OUT"
expect_error_line "publish 1 under a 3 s RTT"
broker_ctl rtt 0
expect_verify business=2,outbox=2,published=0,unpublished=2,kafka_records=0
echo "(the record never left the client: a new connection's first replies were 3 s late too)"

step "(2) the same RTT, applied while publish 2 is paused after marking row 1 (connection up)"
echo "(OUTBOX_FAILPOINTS='relay.after_mark=1*pause')"
export OUTBOX_FAILPOINTS='relay.after_mark=1*pause'
start_bg publish-2 publish 2 --delivery-timeout-ms 1500
unset OUTBOX_FAILPOINTS
PUBLISH_PID=$BG_PID PUBLISH_LOG=$BG_LOG
wait_paused "$PUBLISH_PID" "$PUBLISH_LOG" relay.after_mark
broker_ctl rtt 3000
release "$PUBLISH_PID"
wait_exit "$PUBLISH_PID" 30 "publish 2"
cat "$PUBLISH_LOG"
expect_eq 9 "$BG_RC" "publish 2 exit status (row 2's ack came after message.timeout.ms)"
expect_line '^\[publish\] outboxId=1 key=evt-1001 offset=0 marked=1$' "$PUBLISH_LOG"  # (1) stored nothing
expect_line '^\[publish\] outboxId=2 key=evt-1002 delivery FAILED: .*_MSG_TIMED_OUT.*; left unpublished$' "$PUBLISH_LOG"
broker_ctl rtt 0

step "the broker stored evt-1002, the outbox does not have it marked"
expect_verify business=2,outbox=2,published=1,unpublished=1,kafka_records=2,kafka_distinct=2
run check --json
expect_rc 15 "check while evt-1002 is unmarked (pending: not drained yet)"
expect_json "$OUT" '.pending == ["evt-1002"] and .stuck == ["evt-1002"] and .ok == 2 and .lost == [] and .verdict == "not-drained"' \
  "check: evt-1002 pending (unmarked) yet in Kafka, nothing lost"

step "publish 10 re-sends evt-1002: a duplicate, nothing lost"
run publish 10
expect_rc 0 "publish 10"
expect_line '^\[publish\] outboxId=2 key=evt-1002 offset=[0-9]+ marked=1$' "$OUT"
expect_line '^\[publish\] sent=1 marked=1 unpublished-left=0$' "$OUT"
run check --json
expect_rc 0 "check (valid)"
expect_json "$OUT" '.valid and .duplicated == {"evt-1002": 2} and .lost == [] and .phantom == []' \
  "check: valid, evt-1002 twice, nothing lost or phantom"
expect_verify business=2,outbox=2,published=2,unpublished=0,kafka_records=3,kafka_distinct=2,kafka_duplicates=1

finish
