#!/usr/bin/env bash
# Chapter 7.1, "Kafka 的幂等生产者不能消除这 3 条重复": producer idempotence does not survive a restart.
# Injects: the chapter's two kill -9s — write-hold 5 killed before publishing, publish-hold 3
#          killed after the broker acknowledged 3 sends and before any mark — then publish 10; run
#          twice, each on its own database and its own broker: with -X enable.idempotence=true on
#          every producer, and without. Both runs add -X debug=eos so librdkafka reports the
#          producer id (PID) it gets from the broker.
# Expects: the same outcome either way: kafka_records=8, kafka_distinct=5, evt-1001..1003 twice.
#          With idempotence, publish-hold and publish each acquire a producer id, and they differ:
#          the re-sends come from a new producer session with fresh sequence numbers, so the
#          broker has nothing to deduplicate them against. Without it no producer id is acquired.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

# producer_ids FILE: the producer ids librdkafka acquired, one per line ("Acquired PID{Id:N,...").
producer_ids() { grep -o 'Acquired PID{Id:[0-9]*' "$1" | sed 's/.*Id://'; }

# chapter_run NAME PROPERTY...: the chapter's experiment on its own database and broker.
chapter_run() {
  local name=$1
  shift
  local x_args=() property
  for property in "$@" debug=eos log_level=7; do x_args+=(-X "$property"); done

  step "$name: its own broker and database"
  TMP=$TMP/$name start_broker_in_subdir "$name"
  DB=$TMP/$name.db
  run reset
  expect_rc 0 "$name: reset"

  step "$name: write-hold 5, kill -9 before publishing"
  start_hold "$name-write" write-hold 5
  kill9 "$HOLD_PID"
  expect_verify business=5,outbox=5,published=0,unpublished=5,kafka_records=0

  step "$name: publish-hold 3 ${x_args[*]}, kill -9 after the acks, before the marks"
  start_hold "$name-publish-hold" publish-hold 3 "${x_args[@]}"
  expect_count 3 '^\[send\] outboxId=[1-3] key=evt-100[1-3] ' "$HOLD_LOG"
  kill9 "$HOLD_PID"
  local first_pids
  first_pids=$(producer_ids "$HOLD_LOG" | paste -s -d ' ')

  step "$name: publish 10 ${x_args[*]}"
  run publish 10 "${x_args[@]}"
  expect_rc 0 "$name: publish 10"
  expect_line '^\[publish\] sent=5 marked=5 unpublished-left=0$' "$OUT"
  local second_pids
  second_pids=$(producer_ids "$ERR" | paste -s -d ' ')

  step "$name: reconciliation"
  echo "producer ids: publish-hold '${first_pids}', publish '${second_pids}'"
  if [ "$name" = idempotent ]; then
    if [ -z "$first_pids" ] || [ -z "$second_pids" ]; then
      fail "$name: no producer id acquired (is enable.idempotence in effect?)"
    fi
    [ "$first_pids" != "$second_pids" ] ||
      fail "$name: publish-hold and publish share producer id $first_pids"
  else
    expect_eq "" "$first_pids$second_pids" "$name: producer ids without idempotence"
  fi
  expect_verify business=5,outbox=5,published=5,unpublished=0,kafka_records=8,kafka_distinct=5,kafka_duplicates=3,kafka_missing=0
  expect_line '^\[verify\] duplicate evt-1001 x2 \(expected: at-least-once\)$' "$OUT"
  expect_line '^\[verify\] duplicate evt-1002 x2 \(expected: at-least-once\)$' "$OUT"
  expect_line '^\[verify\] duplicate evt-1003 x2 \(expected: at-least-once\)$' "$OUT"
}

# start_broker_in_subdir NAME: lib's start_broker with its files in $TMP (here, a subdirectory),
# so that each run gets its own broker (with KAFKA_BOOTSTRAP_SERVERS: its own topic).
start_broker_in_subdir() {
  mkdir -p "$TMP" || die "mkdir $TMP"
  start_broker
}

chapter_run idempotent enable.idempotence=true
chapter_run plain enable.idempotence=false

finish
