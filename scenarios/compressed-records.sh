#!/usr/bin/env bash
# Records from other producers, whatever their compression: the lab's reader (consume, verify,
# check) decompresses gzip, snappy, lz4 and zstd batches written by kcat.
# Injects: 200 events relayed with the lab's defaults (uncompressed), then the same 200 events
#          produced again by kcat, another service's producer, 50 per codec, one kcat -P -z CODEC
#          call each (key = event id, value = payload, header run_id of this database, as a
#          second relay would send them). kcat's own debug line proves each batch went out
#          compressed with that codec: librdkafka sends a batch uncompressed when compressing
#          does not make it smaller, and its line then says "uncompressed" (seen with 1 record).
# Expects: consume prints all 400 records, byte for byte the relay's 200 and then kcat's 200;
#          verify counts 400 records of 200 distinct events, 200 duplicates, none missing; check
#          is valid with ok=200 duplicated=200 lost=0 phantom=0.
# With KAFKA_BOOTSTRAP_SERVERS the same runs on that Kafka (a topic of its own); with more than
# one partition, records are compared in any order.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

EVENTS=200
PER_CODEC=50
CODECS=(gzip snappy lz4 zstd)

command -v kcat >/dev/null 2>&1 || die "kcat not installed (scripts/install-deps.sh installs it)"
start_broker

step "write $EVENTS loans; the relay publishes them uncompressed (the default)"
run reset
expect_rc 0 "reset"
run write "$EVENTS" --quiet
expect_rc 0 "write $EVENTS"
run relay --until-empty --json
expect_rc 0 "relay --until-empty"
expect_eq "$EVENTS" "$(relay_final "$OUT" marked)" "rows the relay marked"
run_id=$(sqlite3 "$DB" 'SELECT run_id FROM outbox_run')
[ -n "$run_id" ] || die "no run_id in $DB"

step "kcat produces the same events again, $PER_CODEC per codec: ${CODECS[*]}"
first=1
for codec in "${CODECS[@]}"; do
  input=$TMP/kcat-$codec.txt
  sqlite3 -separator $'\t' "$DB" \
    "SELECT event_id, payload FROM outbox WHERE id BETWEEN $first AND $((first + PER_CODEC - 1)) ORDER BY id" >"$input"
  echo "\$ kcat -b $BROKER -t $TOPIC -P -K '\\t' -z $codec -H run_id=$run_id -H event_type=LoanCreated -d msg -l $(basename "$input")  # outbox ids $first..$((first + PER_CODEC - 1))"
  if ! timeout 60 kcat -b "$BROKER" -t "$TOPIC" -P -K $'\t' -z "$codec" -H "run_id=$run_id" \
    -H event_type=LoanCreated -X linger.ms=100 -d msg -l "$input" 2>"$TMP/kcat-$codec.err"; then
    sed 's/^/  (kcat) /' "$TMP/kcat-$codec.err"
    fail "kcat -P -z $codec failed"
  fi
  # librdkafka's debug line for the produce request names the codec the batch was sent with.
  grep -E 'Produce MessageSet with' "$TMP/kcat-$codec.err" | sed 's/^.*: Produce/  (kcat) Produce/'
  expect_line "Produce MessageSet with $PER_CODEC message\\(s\\) \\([0-9]+ bytes, .*, $codec\\)\$" "$TMP/kcat-$codec.err"
  first=$((first + PER_CODEC))
done

step "consume: all $((2 * EVENTS)) records, byte for byte"
run consume
expect_rc 0 "consume"
sqlite3 -separator , "$DB" "SELECT event_id, payload FROM outbox ORDER BY id" >"$TMP/once.txt"
cat "$TMP/once.txt" "$TMP/once.txt" >"$TMP/expected.txt"
consumed=$OUT
if [ -n "$EXTERNAL_BROKERS" ] && [ "$(kcat -b "$BROKER" -L -t "$TOPIC" 2>/dev/null | grep -c 'partition [0-9]*,')" -gt 1 ]; then
  echo "note: $TOPIC has several partitions: records compared in any order"
  sort -o "$TMP/expected.txt" "$TMP/expected.txt"
  sort "$OUT" >"$TMP/consumed-sorted.txt"
  consumed=$TMP/consumed-sorted.txt
fi
if diff -u "$TMP/expected.txt" "$consumed" >"$TMP/consume.diff"; then
  echo "(consume printed the $((2 * EVENTS)) expected lines: the relay's $EVENTS, then kcat's $EVENTS)"
else
  head -n 40 "$TMP/consume.diff" | sed 's/^/  /'
  fail "consume differs from the relay's and kcat's records (diff above)"
fi

step "verify and check accept the compressed records"
expect_verify business=$EVENTS,outbox=$EVENTS,published=$EVENTS,unpublished=0,kafka_records=$((2 * EVENTS)),kafka_distinct=$EVENTS,kafka_duplicates=$EVENTS,kafka_missing=0,kafka_unexpected=0
run check
expect_rc 0 "check"
expect_line "^\\[check\\] ok=$EVENTS lost=0 duplicated=$EVENTS phantom=0 " "$OUT"
expect_line '^\[check\] valid$' "$OUT"

finish
