#!/usr/bin/env bash
# Broker outages never park rows (chapter 7.1, 发送超时 / Kafka 不可用), and status names them.
# Injects: on the embedded broker, through broker-ctl, while relays run with --max-attempts 1 (one
#          counted attempt would park a row): (A) the broker down under a running leader relay;
#          (B) the broker down under a claims relay --until-empty; on SQLite also (C) all 3
#          brokers of a 3-broker cluster down under a relay --until-empty, and (D) 40 produce
#          requests failed with REQUEST_TIMED_OUT (Kafka error 7). Each case on a fresh reset,
#          200 loans (A, B: round robin over 50 loans, so an aggregate has 4 events) or 50 (C, D).
# Expects: while the brokers are away, the relay says so in its own line ("broker outage since
#          <UTC>: <cause>, N rows waiting; no attempt counted, none parked; next try in ...") and
#          tries again with backoff (a second such line); status names the outage, its start and
#          the rows waiting, `status --json` has .outage, `metrics` has outbox_broker_outage{...} 1,
#          `parked` lists no parked and no failing row. Once the brokers are back the relay says
#          "broker outage over", status no longer names it (metrics: outbox_broker_outage 0), every
#          row is published, none parked, and check is valid: every event in Kafka, 0 lost, 0
#          order violations (per-aggregate order held across the retries).
# With OUTAGE_BACKEND=postgres (pg-relay-outage.sh) cases A and B run on PostgreSQL.
# Always uses the embedded broker, even with KAFKA_BOOTSTRAP_SERVERS: faults need its control
# socket (real-kafka-broker-crash.sh takes a real Kafka node down).
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [ "${OUTAGE_BACKEND:-sqlite}" = postgres ]; then
  SCENARIO=pg-relay-outage
  use_postgres
fi

# One counted attempt parks a row; short timeouts and backoffs keep each case to seconds.
RELAY_ARGS=(--key aggregate-id --max-attempts 1 --delivery-timeout 1s --lease 5s
  --backoff-base 100ms --backoff-max 400ms --idle-max 200ms -X reconnect.backoff.max.ms=200)
OUTAGE_LINE='^\[relay\] broker outage since 20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z: '
STATUS_LINE='^\[status\] broker outage since 20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z: '

# shellcheck disable=SC2317  # called through wait_for
_drained() { "$LAB_BIN" "${LAB_ARGS[@]}" status --json 2>/dev/null | grep -q '"pending":0,'; }

# while_down ROWS CAUSE_RE LOG PID: the relay's own outage lines (two tries), then status,
# metrics and parked name the outage and show nothing parked or failing.
while_down() {
  local rows=$1 cause=$2 log=$3 pid=$4
  wait_for 30 "$pid" "the relay's outage line" \
    _has_lines 1 "${OUTAGE_LINE}${cause}, $rows rows waiting; no attempt counted, none parked; next try in " "$log" ||
    sed 's/^/  | /' "$log"
  wait_for 30 "$pid" "a second try during the outage" _has_lines 2 "$OUTAGE_LINE" "$log"
  grep -E "$OUTAGE_LINE" "$log" | head -n 3 | sed 's/^/  | /'
  expect_no_line '^\[relay\] batch .* parked=[1-9]' "$log"
  run status
  expect_rc 0 "status during the outage"
  expect_line "${STATUS_LINE}${cause}, $rows rows waiting; noted by relay-" "$OUT"
  expect_line "^\[status\] unpublished=$rows pending=$rows .* parked=0 " "$OUT"
  run status --json
  expect_json "$OUT" ".outage.rows_waiting == $rows and (.outage.since | test(\"Z$\")) and .parked == 0" \
    "status --json names the outage"
  run metrics
  expect_line '^outbox_broker_outage\{cause="[^"]+",since="[0-9T:-]+Z"\} 1$' "$OUT"
  run parked --json
  expect_json "$OUT" '.parked == 0 and .failing == 0' "parked during the outage: no parked or failing row"
}

# after_up ROWS: nothing parked, the outage gone from status and metrics, check valid.
after_up() {
  local rows=$1
  run status
  expect_no_line 'broker outage' "$OUT"
  expect_line "^\[status\] unpublished=0 pending=0 .* parked=0 .* published=$rows " "$OUT"
  run metrics
  expect_line '^outbox_broker_outage 0$' "$OUT"
  expect_check "valid=1,outbox_rows=$rows,ok=$rows,lost=0,phantom=0,atomicity=0,lost_after_mark=0,stuck=0,order_violations=0"
}

start_control_broker

step "A: the broker goes down under a running leader relay; 200 loans arrive"
run reset
expect_rc 0 "reset"
start_bg relay-a relay "${RELAY_ARGS[@]}" --coordination leader
relay_pid=$BG_PID relay_log=$BG_LOG
wait_for 30 "$relay_pid" "the relay leads" _has_line '^\[relay\] leader: acquired' "$relay_log"
broker_ctl down
run write 200 --workload 50 --quiet
expect_rc 0 "write 200"
while_down 200 'all brokers down \(_ALL_BROKERS_DOWN\)' "$relay_log" "$relay_pid"

step "A: the broker comes back; the same relay sends every row"
broker_ctl up
wait_for 30 "$relay_pid" "the relay's outage-over line" \
  _has_lines 1 '^\[relay\] broker outage over: delivering again after [0-9.]+ s \(it began ' "$relay_log"
lab_args
wait_for 30 "$relay_pid" "the relay drains the outbox" _drained
echo "\$ kill -TERM $relay_pid"
kill -TERM "$relay_pid"
wait_exit "$relay_pid" 20 "relay after SIGTERM"
expect_eq 0 "$BG_RC" "the relay's exit code"
grep -v '^\[relay\] batch ' "$relay_log" | sed 's/^/  | /'
expect_line '^\[relay\] stopped on signal: batches=[0-9]+ acked=200 marked=200 failed=[1-9][0-9]* parked=0 fenced=0 pending=0$' "$relay_log"
after_up 200

step "B: the broker down under a claims relay --until-empty"
run reset
expect_rc 0 "reset"
run write 200 --workload 50 --quiet
expect_rc 0 "write 200"
broker_ctl down
start_bg relay-b relay --until-empty "${RELAY_ARGS[@]}" --coordination claims
relay_pid=$BG_PID relay_log=$BG_LOG
while_down 200 'all brokers down \(_ALL_BROKERS_DOWN\)' "$relay_log" "$relay_pid"
kill -0 "$relay_pid" 2>/dev/null || fail "relay --until-empty exited during the outage"

step "B: the broker comes back; relay --until-empty finishes"
broker_ctl up
wait_exit "$relay_pid" 60 "relay --until-empty after broker-ctl up"
expect_eq 0 "$BG_RC" "the relay's exit code"
grep -v '^\[relay\] batch ' "$relay_log" | sed 's/^/  | /'
expect_line '^\[relay\] broker outage over: ' "$relay_log"
expect_line '^\[relay\] done: batches=[0-9]+ acked=200 marked=200 failed=[1-9][0-9]* parked=0 fenced=0 pending=0$' "$relay_log"
after_up 200

if [ "${OUTAGE_BACKEND:-sqlite}" != postgres ]; then
  step "C: all 3 brokers of a 3-broker cluster down under a relay --until-empty"
  _stop_pid "$BROKER_PID"
  _forget_pid "$BROKER_PID"
  start_control_broker --broker-count 3 --partitions 3
  run reset
  expect_rc 0 "reset"
  run write 50 --quiet
  expect_rc 0 "write 50"
  for b in 1 2 3; do broker_ctl down $b; done
  start_bg relay-c relay --until-empty "${RELAY_ARGS[@]}"
  relay_pid=$BG_PID relay_log=$BG_LOG
  while_down 50 'all brokers down \(_ALL_BROKERS_DOWN\)' "$relay_log" "$relay_pid"
  for b in 1 2 3; do broker_ctl up $b; done
  wait_exit "$relay_pid" 60 "relay --until-empty after the brokers came back"
  expect_eq 0 "$BG_RC" "the relay's exit code"
  grep -v '^\[relay\] batch ' "$relay_log" | sed 's/^/  | /'
  expect_line '^\[relay\] done: batches=[0-9]+ acked=50 marked=50 failed=[1-9][0-9]* parked=0 fenced=0 pending=0$' "$relay_log"
  after_up 50

  step "D: 40 produce requests fail with REQUEST_TIMED_OUT"
  run reset
  expect_rc 0 "reset"
  run write 50 --quiet
  expect_rc 0 "write 50"
  broker_ctl errors produce 40 7
  start_bg relay-d relay --until-empty "${RELAY_ARGS[@]}"
  relay_pid=$BG_PID relay_log=$BG_LOG
  wait_exit "$relay_pid" 60 "relay --until-empty through the request timeouts"
  expect_eq 0 "$BG_RC" "the relay's exit code"
  grep -v '^\[relay\] batch ' "$relay_log" | sed 's/^/  | /'
  # librdkafka retries REQUEST_TIMED_OUT itself until the delivery timeout: _MSG_TIMED_OUT.
  expect_line "${OUTAGE_LINE}Local: Message timed out \(_MSG_TIMED_OUT\), [0-9]+ rows waiting; no attempt counted" "$relay_log"
  expect_line '^\[relay\] broker outage over: ' "$relay_log"
  expect_line '^\[relay\] done: batches=[0-9]+ acked=50 marked=50 failed=[1-9][0-9]* parked=0 fenced=0 pending=0$' "$relay_log"
  after_up 50
fi

finish
