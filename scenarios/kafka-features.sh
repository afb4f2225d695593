#!/usr/bin/env bash
# Which protocol features librdkafka (Debian 12's 2.0.2) enables against the broker it talks to.
# Kafka 4.0 removed old protocol versions (KIP-896), and librdkafka before 2.8.0 decides some
# features from exactly those versions (librdkafka issue 4948): against Kafka 4.x it disables
# MsgVer1 (Fetch v2 is gone) and ThrottleTime. The lab needs what MsgVer2 brings (record headers:
# event_id, event_type, outbox_id, run_id), IdempotentProducer (the idempotent-producer
# experiment), LZ4 and ZSTD (opt-in compression) and BrokerBalancedConsumer (consume's group).
# Injects: one publish with -X debug=feature, on the embedded broker, or on real Kafka when
#          KAFKA_BOOTSTRAP_SERVERS is set (ctest's real-kafka.kafka-features).
# Expects: those features enabled, headers on the records kcat reads back; prints librdkafka's
#          whole enabled/disabled list for the docs (docs/real-kafka.md).
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

start_broker

step "reset, write 3 loans, publish them with -X debug=feature"
run reset
expect_rc 0 "reset"
run write 3
expect_rc 0 "write 3"
# Run directly, not with `run`: librdkafka's debug log is long; only its feature lines matter.
lab_args
echo "\$ outbox-lab publish 10 -X debug=feature -X log_level=7"
"$LAB_BIN" "${LAB_ARGS[@]}" publish 10 -X debug=feature -X log_level=7 </dev/null >"$TMP/publish.out" 2>"$TMP/publish.err"
expect_eq 0 "$?" "publish 10's exit code"
cat "$TMP/publish.out"
grep -o -E '(Enabling|Disabling) feature [A-Za-z0-9]+' "$TMP/publish.err" | sort -u >"$TMP/features.txt"
echo "librdkafka $(grep -m 1 -o 'librdkafka v[0-9.]*' "$TMP/publish.err" | sed 's/librdkafka //') against $BROKER:"
sed 's/^/  /' "$TMP/features.txt"
for feature in MsgVer2 IdempotentProducer LZ4 ZSTD BrokerBalancedConsumer BrokerGroupCoordinator ApiVersion; do
  expect_line "^Enabling feature $feature\$" "$TMP/features.txt"
done

step "the records carry their headers (MsgVer2), read back by kcat"
kcat -b "$BROKER" -t "$TOPIC" -C -e -q -f '%k %h\n' >"$TMP/kcat.out" 2>"$TMP/kcat.err" || fail "kcat could not read $TOPIC"
cat "$TMP/kcat.out"
expect_count 3 '^evt-100[1-3] event_id=evt-100[1-3],event_type=LoanCreated,outbox_id=[1-3],run_id=' "$TMP/kcat.out"

finish
