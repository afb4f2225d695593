#!/usr/bin/env bash
# Broker down while relaying (chapter 7.1, 发送超时: "超时留给下轮"; the relay must not mark what
# Kafka never acknowledged).
# Injects: `broker-ctl down` on the embedded broker (librdkafka's mock: rd_kafka_mock_broker_set_down)
#          (1) before a relay starts: relay --once against a dead broker; (2) while a relay runs,
#          after its first batch was acknowledged, with 10 more loans written meanwhile.
# Expects: (1) the batch fails (failed=5 marked=0 retried=0: an outage counts no attempt), nothing
#          is marked, and the relay says it ended during the outage: published=0, unpublished=5.
#          (2) every batch while down reports acked=0 marked=0, published stays at 5 with 10
#          unpublished, nothing is parked; after `broker-ctl up` the same relay process drains
#          everything by itself, and marked equals acked over its whole life. check: valid,
#          15 rows, 0 lost, 0 lost-after-mark, 0 stuck.
# Always uses the embedded broker, even with KAFKA_BOOTSTRAP_SERVERS: faults need its control socket.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

# The relay's retry settings: quick backoff, and never parked while the broker is away. librdkafka
# waits up to reconnect.backoff.max.ms (10 s by default) before it tries a lost broker again; 500 ms
# keeps the run short without changing what is tested.
RETRY_ARGS=(--batch-size 5 --lease 4s --send-timeout 1s --backoff-base 100ms --backoff-max 500ms
  --max-attempts 1000 --idle-max 200ms -X reconnect.backoff.max.ms=500)

# shellcheck disable=SC2317  # called through wait_for
_lines_at_least() { [ "$(grep -E -c -- "$2" "$3")" -ge "$1" ]; }
# shellcheck disable=SC2317  # called through wait_for
_drained() {
  "$LAB_BIN" "${LAB_ARGS[@]}" status --json 2>/dev/null | grep -q '"unpublished":0,'
}

start_control_broker

step "reset, write 5 loans, take the broker down"
run reset
expect_rc 0 "reset"
run write 5 --quiet
expect_rc 0 "write 5"
broker_ctl down

step "(1) a relay started while the broker is down: one batch, nothing acknowledged"
run relay --once "${RETRY_ARGS[@]}"
expect_rc 0 "relay --once"
expect_line '^\[relay\] batch token=[0-9]+ claimed=5 acked=0 failed=5 marked=0 retried=0 parked=0 ' "$OUT"
expect_line '^\[relay\] ended during a broker outage since .*, 5 rows waiting: none parked' "$OUT"
run verify --no-kafka --expect business=5,outbox=5,published=0,unpublished=5
expect_rc 0 "nothing marked while the broker is down"

step "broker up; a long-running relay publishes the 5 (after their backoff)"
broker_ctl up
lab_args
RELAY_LOG=$TMP/relay.log
echo "\$ outbox-lab relay ${RETRY_ARGS[*]} &"
: >"$RELAY_LOG"  # emptied by us, not by the child: see lib.sh start_hold
"$LAB_BIN" "${LAB_ARGS[@]}" relay "${RETRY_ARGS[@]}" </dev/null >>"$RELAY_LOG" 2>&1 &
RELAY_PID=$!
PIDS+=("$RELAY_PID")
wait_for 20 "$RELAY_PID" "relay publishes the first 5" _has_line ' acked=5 failed=0 marked=5 ' "$RELAY_LOG" ||
  die "the relay did not publish the first 5 loans"
cat "$RELAY_LOG"
run verify --no-kafka --expect published=5,unpublished=0
expect_rc 0 "the first 5 published"

step "(2) broker down under the running relay; 10 more loans arrive"
broker_ctl down
LINES_BEFORE=$(grep -c '^\[relay\] batch ' "$RELAY_LOG")
LOG_LINES_BEFORE=$(wc -l <"$RELAY_LOG")  # every line, the relay's "waiting" lines too
run write 10 --quiet
expect_rc 0 "write 10"
# Two failed rounds for the new rows: each batch of 5 has failed at least once, one of them twice.
wait_for 30 "$RELAY_PID" "three failed batches while down" \
  _lines_at_least $((LINES_BEFORE + 3)) '^\[relay\] batch .* acked=0 failed=[1-9]' "$RELAY_LOG" || true
tail -n +$((LOG_LINES_BEFORE + 1)) "$RELAY_LOG" >"$TMP/while-down.log"
cat "$TMP/while-down.log"
expect_no_line 'acked=[1-9]' "$TMP/while-down.log"
expect_no_line 'marked=[1-9]' "$TMP/while-down.log"
expect_no_line 'parked=[1-9]' "$TMP/while-down.log"
run verify --no-kafka --expect business=15,outbox=15,published=5,unpublished=10
expect_rc 0 "published unchanged while the broker is down"
run status
expect_line '^\[status\] unpublished=10 .* parked=0 ' "$OUT"

step "broker up: the same relay drains by itself"
broker_ctl up
wait_for 30 "$RELAY_PID" "relay drains after broker-ctl up" _drained || true
run verify --no-kafka --expect business=15,outbox=15,published=15,unpublished=0
expect_rc 0 "all published after the broker came back"
echo "\$ kill -TERM $RELAY_PID"
kill -TERM "$RELAY_PID"
wait "$RELAY_PID"
expect_eq 0 "$?" "relay exit status on SIGTERM"
tail -n +$((LOG_LINES_BEFORE + 1 + $(wc -l <"$TMP/while-down.log"))) "$RELAY_LOG"
expect_line '^\[relay\] stopped on signal: ' "$RELAY_LOG"
# Over the relay's whole life: every marked row was acknowledged first.
sum_field() { grep '^\[relay\] batch ' "$RELAY_LOG" | grep -o " $1=[0-9]*" | awk -F= '{ s += $2 } END { print s + 0 }'; }
acked=$(sum_field acked)
marked=$(sum_field marked)
expect_eq "$acked" "$marked" "rows marked vs rows acknowledged by the long-running relay"
expect_eq 15 "$marked" "rows the long-running relay marked"

step "check"
run check
expect_rc 0 "check (valid)"
expect_line '^\[check\] business=15 outbox=15 ' "$OUT"
expect_line '^\[check\] ok=15 lost=0 duplicated=[0-9]+ phantom=0 atomicity=0 lost-after-mark=0 stuck=0 ' "$OUT"

finish
