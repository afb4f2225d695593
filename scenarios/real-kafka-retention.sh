#!/usr/bin/env bash
# Real Kafka: records the broker no longer has are "cannot judge", never "lost".
# On the embedded broker, retention is librdkafka's fixed 5 MiB / 100,000 message sets per
# partition (check-verdicts.sh drives it past that). On Kafka it is whatever the topic says
# (time, size) and happens when the broker gets to it; DeleteRecords moves the log start at once,
# which is what a retention pass does, so this scenario uses it.
# Injects: 10 loans published by the relay and checked valid, then the partition's log start
#          moved to offset 4 (scripts/kafka.sh delete-records: Kafka's own tool), on the suite's
#          broker (ctest's real-kafka.real-kafka-retention; KAFKA_BOOTSTRAP_SERVERS and the
#          fixture's OUTBOX_KAFKA_DIR are set).
# Expects: check exits 16 (cannot judge): retention_unknown = evt-1001..evt-1004, lost = [], ok = 6;
#          verify ends with the retention line, never "lost for good".
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

[ -n "$EXTERNAL_BROKERS" ] || die "needs real Kafka: run it through scripts/with-real-kafka.sh (ctest -L real-kafka)"
start_broker

step "reset, write 10 loans, the relay publishes them; check is valid"
run reset
expect_rc 0 "reset"
run write 10
expect_rc 0 "write 10"
run relay --until-empty --quiet
expect_rc 0 "relay --until-empty"
expect_check valid=1,ok=10,lost=0,retention_unknown=0

step "the broker drops offsets 0..3 (log start 4)"
echo "\$ scripts/kafka.sh delete-records $TOPIC 0 4"
"$REPO_DIR/scripts/kafka.sh" delete-records "$TOPIC" 0 4 || die "delete-records failed"

step "check: cannot judge the 4 dropped events, none lost"
run check --json
expect_rc 16 "check after the broker dropped records"
expect_json "$OUT" '.verdict == "cannot-judge" and .lost == [] and .ok == 6 and .retention_unknown == ["evt-1001","evt-1002","evt-1003","evt-1004"]' \
  "check: the 4 dropped events cannot be judged, none lost"
run verify
expect_no_line 'lost for good' "$OUT"
expect_line 'retention' "$OUT"

finish
