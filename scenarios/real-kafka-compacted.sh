#!/usr/bin/env bash
# Real Kafka: events a compacted topic removed are "cannot judge", never "lost".
# cleanup.policy=compact keeps only the last record of each key and leaves the log start at 0, so
# the offsets alone do not show that records went; check asks the topic's config
# (DescribeConfigs) and counts the offsets that hold no record as dropped. The embedded broker
# never compacts, so this runs on real Kafka only.
# Injects: a topic created with cleanup.policy=compact and segment.ms=1 (Kafka's topic tool,
#          scripts/kafka.sh create-topic --config): each relay round's first record rolls a new
#          segment, since the rounds are whole processes apart; 100 loan transactions over 50
#          loans relayed with --key aggregate-id in three rounds, so that closed segments exist
#          for the log cleaner; then a wait until the cleaner removed records (the topic read holds fewer
#          records than its end offset, polled, at most 90 s). On the suite's broker (ctest's
#          real-kafka.real-kafka-compacted).
# Expects: check exits 16 (cannot judge), lost = [], names the compacted partition, and every
#          event is either ok or unjudgeable; verify never says "lost for good".
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

[ -n "$EXTERNAL_BROKERS" ] || die "needs real Kafka: run it through scripts/with-real-kafka.sh (ctest -L real-kafka)"
start_broker

step "a compacted topic (cleanup.policy=compact, segments of 1 ms)"
echo "\$ scripts/kafka.sh create-topic $TOPIC 1 --config cleanup.policy=compact ..."
"$REPO_DIR/scripts/kafka.sh" create-topic "$TOPIC" 1 --config cleanup.policy=compact \
  --config segment.ms=1 --config min.cleanable.dirty.ratio=0.01 \
  --config delete.retention.ms=100 || die "create-topic failed"

step "100 transactions over 50 loans, keyed by aggregate id, in three rounds"
run reset
expect_rc 0 "reset"
for round in 1 2 3; do
  run write $((round == 3 ? 2 : 49)) --workload 50 --quiet
  run relay --until-empty --quiet --key aggregate-id
  expect_rc 0 "relay round $round"
done

step "wait until the log cleaner removed records"
compacted() {
  run check --json
  [ "$(jq -r '[.partitions[].compacted] | add // 0' "$OUT" 2>/dev/null)" -gt 0 ] 2>/dev/null
}
wait_until 90 "the log cleaner never compacted $TOPIC" compacted

step "check: the compacted events cannot be judged, none lost"
run check --json
expect_rc 16 "check on a compacted topic"
expect_json "$OUT" '.verdict == "cannot-judge" and .lost == [] and .lost_after_mark == [] and .lost_beyond_retention == 0 and .ok + (.retention_unknown | length) == 100' \
  "check --json: every event ok or unjudgeable"
run check
expect_line '^\[check\] compacted topic \(cleanup.policy=compact\): partition 0 holds no record at [0-9]+ of its offsets' "$OUT"
expect_no_line 'INVALID' "$OUT"
run verify
expect_no_line 'lost for good' "$OUT"

finish
