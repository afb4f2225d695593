#!/usr/bin/env bash
# Chapter 7.1, "发送超时 / Kafka 不可用" — the broker goes down under a running relay, then comes back.
# Injects: `broker-ctl down` on the embedded broker before the relay starts, with 2,000
#          unpublished events; the relay (`--until-empty --send-timeout 1s --lease 5s
#          --backoff-base 100ms --backoff-max 1s --max-attempts 1000`) runs against the dead
#          broker; after its first failed batch, `broker-ctl up`.
# Expects: while down, every delivery times out and nothing is marked: the relay prints a batch
#          with failed>0, marked=0 and retried=0 (an outage counts no attempt), names the outage
#          in its own line, status shows published=0 and the relay leading, `parked` no parked
#          and no failing row (the rows stay pending, attempts 0). After up, the same relay, without a restart, retries and exits 0 with
#          every row marked; check is valid: 0 lost, 0 phantom, 0 lost-after-mark, all 2,000
#          events in Kafka, and exactly 2,000 records: nothing was written to the topic while the
#          broker was down, so nothing acked-but-unmarked existed to be re-sent.
# Always uses its own embedded broker, even with KAFKA_BOOTSTRAP_SERVERS set: the fault goes
# through the embedded broker's control socket (lib.sh's start_broker has no --control).
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

EVENTS=2000


start_control_broker

step "reset, then write $EVENTS loans with their outbox events"
run reset
expect_rc 0 "reset"
run --synchronous normal write "$EVENTS" --quiet
expect_rc 0 "write $EVENTS"

step "the broker goes down"
broker_ctl down

step "a relay against the dead broker: deliveries time out, rows back off"
start_bg relay relay --until-empty --send-timeout 1s --lease 5s --backoff-base 100ms \
  --backoff-max 1s --max-attempts 1000
relay_pid=$BG_PID relay_log=$BG_LOG
wait_for 30 "$relay_pid" "a failed batch in the relay's output" \
  _has_line '^\[relay\] batch .* failed=[1-9][0-9]* ' "$relay_log"
sed 's/^/  | /' "$relay_log"
expect_no_line '^\[relay\] batch .* acked=[1-9]' "$relay_log"
expect_no_line '^\[relay\] batch .* marked=[1-9]' "$relay_log"
expect_line '^\[relay\] batch token=[0-9]+ claimed=([0-9]+) acked=0 failed=[1-9][0-9]* marked=0 retried=0 parked=0 fenced=0$' "$relay_log"
expect_line '^\[relay\] broker outage since .*, 2000 rows waiting; no attempt counted, none parked; next try in ' "$relay_log"

step "status while down: nothing marked without an ack, failed rows in backoff, none parked"
run status --json
expect_rc 0 "status --json"
expect_json "$OUT" ".published == 0 and .parked == 0 and .unpublished == $EVENTS and .leader.token == 1" \
  "status while the broker is down: nothing marked or parked, the relay leads"
# An outage counts no attempt: no row is parked, and none is failing (attempts > 0).
run parked --json
expect_rc 0 "parked --json"
expect_json "$OUT" '.parked == 0 and .failing == 0' "parked while the broker is down: none parked or failing"
kill -0 "$relay_pid" 2>/dev/null || fail "the relay exited while the broker was down"

step "the broker comes back; the same relay finishes the job"
broker_ctl up
wait_exit "$relay_pid" 40 "relay after broker-ctl up"
sed 's/^/  | /' "$relay_log"
expect_eq 0 "$BG_RC" "exit code of the relay"
expect_line "^\[relay\] done: batches=[0-9]+ acked=$EVENTS marked=$EVENTS failed=[1-9][0-9]* parked=0 fenced=0 pending=0\$" "$relay_log"
expect_no_line '^outbox-lab: error:' "$relay_log"

step "check: every event published and in Kafka, once"
expect_check "valid=1,outbox_rows=$EVENTS,ok=$EVENTS,kafka_records=$EVENTS,duplicated=0,lost=0,phantom=0,atomicity=0,lost_after_mark=0,stuck=0"
run status --json
expect_rc 0 "status --json"
expect_line "\"unpublished\":0,.*\"parked\":0,\"claimed\":0,\"published\":$EVENTS," "$OUT"

finish
