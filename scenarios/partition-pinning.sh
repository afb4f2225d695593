#!/usr/bin/env bash
# The key->partition mapping is pinned: a relay that would send an aggregate's later events to
# another partition refuses to start, check names the aggregates that did land on two
# partitions, and the outbox refuses an empty aggregate id.
# Injects: an embedded broker whose topic has 8 partitions; 100 loan transactions over 50 loans
#          (--workload 50) relayed with --key aggregate-id (the default partitioner,
#          consistent_random); 100 more, then a relay with -X partitioner=murmur2_random; an
#          INSERT with aggregate_id '' from sqlite3, as an outside writer would.
# Expects: the second relay exits 21 with one line naming both partitioners and the flag, and
#          sends nothing; with --allow-partitioner-change it says the mapping changed and
#          publishes; check stays valid (nothing lost) but reports order hazards (aggregates on
#          two partitions, keyed by aggregate id) in text, in --json and as --expect
#          order_hazards; a relay back on consistent_random is refused again (murmur2_random is
#          now recorded). The empty aggregate id is refused by the schema's trigger. A relay whose
#          first send creates its topic records the topic's partition count after its first mark.
#          A relay that starts while the broker is down (broker-ctl down) and a count is recorded
#          prints a waiting line and sends nothing until the broker answers, then compares:
#          exit 21 for a changed count; SIGTERM while it waits is exit 8; a slow broker (1.5 s
#          round trips) gets longer tries and the relay drains.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

step "an embedded broker with 8 partitions"
if [ -n "$EXTERNAL_BROKERS" ]; then
  echo "SKIP $SCENARIO: needs the embedded broker's --partitions 8"
  FINISHED=1
  exit 77
fi
start_bg broker broker --partitions 8 --addr-file "$TMP/broker8.addr"
wait_for 15 "$BG_PID" "embedded broker with 8 partitions" _nonempty "$TMP/broker8.addr" ||
  die "the embedded broker did not start: $(cat "$BG_LOG")"
BROKER=$(head -n 1 "$TMP/broker8.addr")
RELAY=(relay --until-empty --key aggregate-id --quiet)

step "100 transactions over 50 loans, relayed keyed by aggregate id (consistent_random)"
run reset
expect_rc 0 "reset"
run write 100 --workload 50
expect_rc 0 "write 100"
run "${RELAY[@]}"
expect_rc 0 "relay on consistent_random"
expect_line '^\[relay\] done: .* marked=100 ' "$OUT"
run check --expect valid=1,order_hazards=0
expect_rc 0 "check before the switch"

step "100 more; a relay with -X partitioner=murmur2_random is refused"
run write 100 --workload 50
expect_rc 0 "write 100 more"
run -X partitioner=murmur2_random "${RELAY[@]}"
expect_rc 21 "relay with another partitioner"
expect_error_line "relay with another partitioner"
expect_line "^outbox-lab: error: topic '$TOPIC' was published with partitioner=consistent_random partitions=8 and this relay would use partitioner=murmur2_random partitions=8 \(partitioner consistent_random -> murmur2_random\): .* pass --allow-partitioner-change" "$ERR"
run status --json
expect_json "$OUT" '.pending == 100' "the refused relay sent nothing"

step "told to, it publishes; check names the aggregates on two partitions"
run -X partitioner=murmur2_random "${RELAY[@]}" --allow-partitioner-change
expect_rc 0 "relay --allow-partitioner-change"
expect_line "^\[relay\] partition mapping changed on topic '$TOPIC' \(partitioner consistent_random -> murmur2_random\)" "$OUT"
expect_line '^\[relay\] done: .* marked=100 ' "$OUT"
run check
expect_rc 0 "check after the switch (valid: nothing lost)"
expect_line '^\[check\] order hazards=[1-9][0-9]*: aggregates on more than one partition, .*keyed by aggregate id, so the key->partition mapping changed' "$OUT"
HAZARDS=$(sed -n 's/^\[check\] order hazards=\([0-9]*\):.*/\1/p' "$OUT")
echo "(order hazards: $HAZARDS of 50 aggregates)"
run check --json
expect_json "$OUT" ".valid == true and (.order_hazards | length) == $HAZARDS and all(.order_hazards[]; (.partitions | length) >= 2 and .keyed_by_aggregate)" "check --json lists the hazards"
run check --expect order_hazards=0
expect_rc 1 "check --expect order_hazards=0 after the switch"
expect_line "MISMATCH order_hazards" "$OUT"

step "murmur2_random is recorded now: back on the default partitioner is refused too"
run write 1
run "${RELAY[@]}"
expect_rc 21 "relay back on consistent_random"
expect_line "partitioner murmur2_random -> consistent_random" "$ERR"

step "an outside writer's empty aggregate id is refused by the outbox"
echo "\$ sqlite3 outbox.db \"INSERT INTO outbox(..., aggregate_id, ...) VALUES (..., '', ...)\""
if sqlite3 "$DB" "INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at) VALUES ('evt-empty', '', 'LoanCreated', '{}', 1764547200000)" 2>"$TMP/sqlite.err"; then
  fail "an INSERT with an empty aggregate_id was accepted"
fi
cat "$TMP/sqlite.err"
expect_line "outbox.aggregate_id must not be empty" "$TMP/sqlite.err"

step "a topic the relay's own first send creates: its partition count is recorded after the mark"
# At start the topic does not exist (count unknown, 0); noted only at the next start, the count
# would be the one after a change made meanwhile, and that change would go unseen.
NEW_TOPIC=$TOPIC-created-by-relay
run write 4
TOPIC_BEFORE=$TOPIC
TOPIC=$NEW_TOPIC
run "${RELAY[@]}"
expect_rc 0 "relay onto a topic its first send creates"
TOPIC=$TOPIC_BEFORE
count=$(sqlite3 "$DB" "SELECT partitions FROM outbox_partitioning WHERE topic = '$NEW_TOPIC'")
echo "(outbox_partitioning: $NEW_TOPIC has $count partitions recorded)"
[ "${count:-0}" -ge 1 ] || fail "no partition count recorded for $NEW_TOPIC after the relay's first mark: '$count'"

step "a broker that does not answer at the start: the relay waits for the count before any send"
# A broker with a control socket (4 partitions); the count recorded as 2, as if the topic had
# been altered since: the relay must compare it before it sends, not after the broker answers.
TOPIC=$TOPIC_BEFORE-waits
start_control_broker --partitions 4
DB=$TMP/waits.db
run reset
run write 10 --workload 50 --quiet
expect_rc 0 "write 10"
run "${RELAY[@]}"
expect_rc 0 "relay recording 4 partitions"
sqlite3 "$DB" "UPDATE outbox_partitioning SET partitions = 2" || die "sqlite3 could not update"
run write 5 --workload 50 --quiet
broker_ctl down
start_bg waits relay --until-empty --key aggregate-id
wait_for 20 "$BG_PID" "the relay's waiting line" _has_line "^\[relay\] waiting for the broker to give the partition count of topic '$TOPIC' (2 recorded)" "$BG_LOG" ||
  die "the relay did not wait for the count: $(cat "$BG_LOG")"
broker_ctl up
wait_exit "$BG_PID" 30 "the waiting relay"
cat "$BG_LOG"
expect_eq 21 "$BG_RC" "the relay's exit once the broker answers with 4 partitions"
expect_line "partitions 2 -> 4" "$BG_LOG"
expect_eq 5 "$(sqlite3 "$DB" "SELECT COUNT(*) FROM outbox WHERE published = 0")" "rows left unsent"
# Stopped while it waits: exit 8, nothing sent.
broker_ctl down
start_bg waits-stop relay --until-empty --key aggregate-id
wait_for 20 "$BG_PID" "the relay's waiting line" _has_line "^\[relay\] waiting for the broker" "$BG_LOG" ||
  die "the relay did not wait for the count: $(cat "$BG_LOG")"
kill -TERM "$BG_PID"
wait_exit "$BG_PID" 15 "the relay stopped while waiting"
cat "$BG_LOG"
expect_eq 8 "$BG_RC" "the exit of a relay stopped while the broker did not answer"
expect_line "relay stopped while the broker at .* did not give the partition count of topic '$TOPIC' .*; nothing was sent" "$BG_LOG"
expect_eq 5 "$(sqlite3 "$DB" "SELECT COUNT(*) FROM outbox WHERE published = 0")" "rows left unsent"
# A slow broker (1.5 s a round trip) answers a longer try: the relay compares and sends.
broker_ctl up
sqlite3 "$DB" "UPDATE outbox_partitioning SET partitions = 4" || die "sqlite3 could not update"
broker_ctl rtt 1500
RUN_TIMEOUT_S=120 run relay --until-empty --key aggregate-id --quiet
expect_rc 0 "relay on a slow broker with the count recorded"
expect_eq 0 "$(sqlite3 "$DB" "SELECT COUNT(*) FROM outbox WHERE published = 0")" "rows left unsent"

finish
