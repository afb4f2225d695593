#!/usr/bin/env bash
# Chapter 7.1's run read back by Kafka clients that are not the lab: a record format that only
# librdkafka reads would pass every other scenario (the lab and kcat are both librdkafka).
# Injects: the chapter's two crashes, as outbox-crash.sh: kill -9 of write-hold 5 before any
#          publish, kill -9 of publish-hold 3 after three acks and before their marks, then
#          publish 10. Before any send, the application's columns of three rows are set as an
#          application could have written them: evt-1001 and evt-1004 carry app headers (a W3C
#          traceparent; a tenant "acmé", UTF-8 beyond ASCII), evt-1004's payload is UTF-8 beyond
#          ASCII (中文, é), evt-1005's payload is not UTF-8 (bytes ff fe c3 28 00 0a).
#          The producers run with the lab's defaults: no -X, so uncompressed records.
# Expects: three readers each read the topic and print every record as partition, offset, key,
#          value and headers, bytes as hex: kafkajs 2.2.4 (npm, pinned in
#          tools/kafkajs-reader/package-lock.json; JavaScript, no librdkafka), Kafka 4.3.0's own
#          Java console consumer (the Maven artifacts of scripts/kafka.sh, the broker's own; on
#          real Kafka only: it cannot speak to librdkafka 2.0.2's mock, see below), and
#          confluent-kafka-python (Debian; it wraps librdkafka, so weaker evidence). Each output
#          equals, byte for byte, the 8 records the database predicts: offsets 0..7 keyed evt-1001,
#          1002, 1003, 1001, 1002, 1003, 1004, 1005; 5 distinct event ids, evt-1001..1003 twice;
#          headers event_id, event_type, outbox_id, run_id (the database's), then the row's app
#          headers in their column's order; values as stored. verify agrees. Then the relay's
#          batches of 50 (the chapter's publish sends one short record per batch, left uncompressed):
#          kafkajs reads all 50 with the defaults, and stops at the first batch of the opt-in
#          -X compression.type=lz4 with "KafkaJSNotImplemented: LZ4 compression not implemented".
# With KAFKA_BOOTSTRAP_SERVERS the same runs on that Kafka (a topic of its own); with more than
# one partition, records are compared in any order, without partition and offset.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

KAFKAJS_DIR=$REPO_DIR/tools/kafkajs-reader
PYTHON=/usr/bin/python3  # Debian's, where python3-confluent-kafka is installed
TRACEPARENT=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01

command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 ||
  die "node and npm are not installed (scripts/install-deps.sh installs nodejs)"
[ -z "$EXTERNAL_BROKERS" ] || command -v java >/dev/null 2>&1 ||
  die "java is not installed (scripts/install-deps.sh --with-kafka)"
"$PYTHON" -c 'import confluent_kafka' 2>/dev/null ||
  die "$PYTHON cannot import confluent_kafka (scripts/install-deps.sh installs python3-confluent-kafka)"

# hex BYTES: lowercase hex of the argument's bytes, as the readers print them.
hex() { printf '%s' "$1" | od -An -v -tx1 | tr -d ' \n'; }

start_broker

step "kafkajs 2.2.4 from npm (npm ci once; offline when tools/kafkajs-reader/node_modules has it)"
# Under a lock: ctest runs this scenario on both brokers at once, and two `npm ci` in one folder
# would delete each other's node_modules.
exec 9>"$KAFKAJS_DIR/.install.lock"
flock -w 300 9 || die "no lock on $KAFKAJS_DIR/.install.lock within 300 s"
installed=$(cd "$KAFKAJS_DIR" && node -p 'require("kafkajs/package.json").version' 2>/dev/null) || installed=
if [ "$installed" != 2.2.4 ]; then
  echo "\$ (cd tools/kafkajs-reader && npm ci)"
  (cd "$KAFKAJS_DIR" && timeout 300 npm ci --no-audit --no-fund) >"$TMP/npm.log" 2>&1 ||
    { sed 's/^/  (npm) /' "$TMP/npm.log"; die "npm ci in $KAFKAJS_DIR failed (log above)"; }
fi
installed=$(cd "$KAFKAJS_DIR" && node -p 'require("kafkajs/package.json").version')
exec 9>&-
expect_eq 2.2.4 "$installed" "kafkajs version in $KAFKAJS_DIR/node_modules"

step "the chapter's run: write 5, kill -9; app columns of evt-1001, 1004, 1005; publish-hold 3, kill -9; publish 10"
run reset
expect_rc 0 "reset"
start_hold write write-hold 5
kill9 "$HOLD_PID"
echo "\$ sqlite3 $DB  # app headers on evt-1001 and evt-1004; payloads of evt-1004 (UTF-8) and evt-1005 (not UTF-8)"
sqlite3 -bail "$DB" <<SQL || die "sqlite3 could not set the rows' application columns"
UPDATE outbox SET headers = '{"traceparent":"$TRACEPARENT","tenant":"acmé"}'
  WHERE event_id IN ('evt-1001', 'evt-1004');
UPDATE outbox SET payload = '{"eventId":"evt-1004","loanId":"L-1004","note":"中文 é"}'
  WHERE event_id = 'evt-1004';
UPDATE outbox SET payload = CAST(X'FFFEC328000A' AS TEXT) WHERE event_id = 'evt-1005';
SQL
start_hold publish-hold publish-hold 3
kill9 "$HOLD_PID"
run publish 10
expect_rc 0 "publish 10"
expect_line '^\[publish\] sent=5 marked=5 unpublished-left=0$' "$OUT"
expect_verify business=5,outbox=5,published=5,unpublished=0,kafka_records=8,kafka_distinct=5,kafka_duplicates=3,kafka_missing=0,kafka_unexpected=0

step "the 8 records the database predicts"
run_id=$(sqlite3 "$DB" 'SELECT run_id FROM outbox_run')
[ -n "$run_id" ] || die "no run_id in $DB"
app_headers=$(jq -n -c --arg t "$(hex "$TRACEPARENT")" --arg a "$(hex 'acmé')" '[["traceparent", $t], ["tenant", $a]]')
offset=0
for id in 1 2 3 1 2 3 4 5; do
  IFS='|' read -r event_id event_type payload_hex has_headers < <(sqlite3 "$DB" \
    "SELECT event_id, event_type, lower(hex(payload)), headers IS NOT NULL FROM outbox WHERE id = $id")
  extra='[]'
  [ "$has_headers" = 1 ] && extra=$app_headers
  jq -n -c --argjson offset "$offset" --arg key "$(hex "$event_id")" --arg value "$payload_hex" \
    --arg e "$(hex "$event_id")" --arg t "$(hex "$event_type")" --arg o "$(hex "$id")" \
    --arg r "$(hex "$run_id")" --argjson extra "$extra" \
    '{partition: 0, offset: $offset, key: $key, value: $value,
      headers: ([["event_id", $e], ["event_type", $t], ["outbox_id", $o], ["run_id", $r]] + $extra)}'
  offset=$((offset + 1))
done >"$TMP/expected.jsonl"
cat "$TMP/expected.jsonl"
expect_eq fffec328000a "$(sed -n 8p "$TMP/expected.jsonl" | jq -r .value)" \
  "evt-1005's payload in the database"

# check_reader NAME FILE: FILE (one JSON line per record, bytes as hex) holds exactly the expected
# records; in offset order on one partition, else in any order without partition and offset.
check_reader() {
  local name=$1 file=$2 normalized=$TMP/$1.normalized expected=$TMP/expected.jsonl
  jq -c '{partition, offset: (.offset | tonumber), key, value, headers}' "$file" >"$normalized" ||
    { fail "$name: output is not JSON lines"; return; }
  if [ -n "$(jq -r 'select(.partition != 0) | .partition' "$normalized")" ]; then
    echo "note: $TOPIC has several partitions: $name's records compared in any order"
    jq -c 'del(.partition, .offset)' "$TMP/expected.jsonl" | sort >"$TMP/$name.expected-sorted"
    expected=$TMP/$name.expected-sorted
    jq -c 'del(.partition, .offset)' "$TMP/$name.normalized" | sort >"$TMP/$name.sorted"
    normalized=$TMP/$name.sorted
  fi
  expect_eq 8 "$(grep -c . "$normalized")" "$name: records read"
  expect_eq 5 "$(jq -r '.headers[] | select(.[0] == "event_id") | .[1]' "$normalized" | sort -u | grep -c .)" \
    "$name: distinct event_id header values"
  expect_eq "6576742d31303031 6576742d31303032 6576742d31303033" \
    "$(jq -r .key "$normalized" | sort | uniq -d | paste -s -d ' ')" "$name: keys read twice (evt-1001, 1002, 1003)"
  if diff -u "$expected" "$normalized" >"$TMP/$name.diff"; then
    echo "$name: the 8 records equal the database's, byte for byte"
  else
    sed 's/^/  /' "$TMP/$name.diff"
    fail "$name read other records than the database predicts (diff above)"
  fi
}

step "kafkajs 2.2.4 (JavaScript, no librdkafka) reads the topic"
echo "\$ node tools/kafkajs-reader/read.js --brokers $BROKER --topic $TOPIC --count 8"
if timeout 90 node "$KAFKAJS_DIR/read.js" --brokers "$BROKER" --topic "$TOPIC" --count 8 \
  --timeout-ms 60000 >"$TMP/kafkajs.jsonl" 2>"$TMP/kafkajs.err"; then
  cat "$TMP/kafkajs.jsonl"
  check_reader kafkajs "$TMP/kafkajs.jsonl"
else
  cat "$TMP/kafkajs.jsonl"
  sed 's/^/  (kafkajs) /' "$TMP/kafkajs.err"
  fail "kafkajs could not read the 8 records of $TOPIC (stderr above)"
fi

step "Kafka 4.3.0's Java console consumer (the broker's own Maven artifacts) reads the topic"
if [ -z "$EXTERNAL_BROKERS" ]; then
  # Measured: ApiVersions from the mock lists Metadata v0..2; Kafka 4.0 dropped Metadata below v4
  # (KIP-896), so the Java client finds no usable node and times out.
  echo "not on the embedded broker: Kafka 4.3.0's Java client needs Metadata v4 or later (KIP-896)"
  echo "and librdkafka 2.0.2's mock offers v0..2; ctest's real-kafka.foreign-readers runs this step"
  echo "(by hand: KAFKA_BOOTSTRAP_SERVERS=\$(scripts/kafka.sh start) bash scenarios/foreign-readers.sh)"
else
  # Raw bytes out (no deserializer), fields split by bytes no record holds; to-json.py turns them
  # into the readers' JSON lines. The same console consumer, with its default separators, is the
  # chapter's kafka-console-consumer.
  java_args=(--bootstrap-server "$BROKER" --topic "$TOPIC" --from-beginning --max-messages 8
    --timeout-ms 60000 --formatter-property print.partition=true
    --formatter-property print.offset=true --formatter-property print.headers=true
    --formatter-property print.key=true --formatter-property key.separator=$'\x1f'
    --formatter-property line.separator=$'\x1c' --formatter-property headers.separator=$'\x1e')
  echo "\$ scripts/kafka.sh console-consumer --bootstrap-server $BROKER --topic $TOPIC --from-beginning --max-messages 8 --formatter-property print.key=true --formatter-property print.headers=true ..."
  if timeout 120 "$REPO_DIR/scripts/kafka.sh" console-consumer "${java_args[@]}" \
    >"$TMP/java.raw" 2>"$TMP/java.err" &&
    "$PYTHON" "$REPO_DIR/tools/console-consumer/to-json.py" <"$TMP/java.raw" >"$TMP/java.jsonl" 2>>"$TMP/java.err"; then
    # As the console consumer prints it with its default separators (tab, ',', newline); bytes
    # that are not UTF-8 and control bytes shown as \xNN.
    "$PYTHON" "$REPO_DIR/tools/console-consumer/to-json.py" --text <"$TMP/java.raw"
    sed 's/^/  (stderr) /' "$TMP/java.err"
    check_reader java-console-consumer "$TMP/java.jsonl"
  else
    sed 's/^/  (java) /' "$TMP/java.err"
    fail "Kafka's console consumer could not read $TOPIC (stderr above)"
  fi
fi

step "confluent-kafka-python (Debian; librdkafka underneath) reads the topic"
echo "\$ $PYTHON tools/confluent-kafka-reader/read.py --brokers $BROKER --topic $TOPIC --count 8"
if timeout 90 "$PYTHON" "$REPO_DIR/tools/confluent-kafka-reader/read.py" --brokers "$BROKER" \
  --topic "$TOPIC" --count 8 --timeout-ms 60000 >"$TMP/confluent.jsonl" 2>"$TMP/confluent.err"; then
  cat "$TMP/confluent.jsonl"
  check_reader confluent-kafka-python "$TMP/confluent.jsonl"
else
  cat "$TMP/confluent.jsonl"
  sed 's/^/  (python) /' "$TMP/confluent.err"
  fail "confluent-kafka-python could not read the 8 records of $TOPIC (stderr above)"
fi

step "the relay's batches: kafkajs reads the default (none) and stops at the opt-in lz4"
# The chapter's publish sends one record per batch; librdkafka sends a batch that compression does
# not make smaller as is, which one short record's is not (kcat's debug line says "uncompressed"
# for one lz4 record), so the steps above could pass under an lz4 default.
# The relay sends batches of many records: these show what the default is, and why.
chapter_db=$DB chapter_topic=$TOPIC
for codec in none lz4; do
  DB=$TMP/batches-$codec.db
  TOPIC=$chapter_topic-batches-$codec
  run reset
  expect_rc 0 "reset ($codec)"
  run write 50 --quiet
  expect_rc 0 "write 50 ($codec)"
  if [ "$codec" = none ]; then run relay --until-empty --quiet; else run -X compression.type=lz4 relay --until-empty --quiet; fi
  expect_rc 0 "relay --until-empty ($codec)"
  expect_line '^\[relay\] done: batches=1 acked=50 marked=50 ' "$OUT"
  echo "\$ node tools/kafkajs-reader/read.js --brokers $BROKER --topic $TOPIC --count 50"
  timeout 90 node "$KAFKAJS_DIR/read.js" --brokers "$BROKER" --topic "$TOPIC" --count 50 \
    --timeout-ms 60000 >"$TMP/kafkajs-$codec.jsonl" 2>"$TMP/kafkajs-$codec.err"
  rc=$?
  echo "(kafkajs exit $rc, $(grep -c . "$TMP/kafkajs-$codec.jsonl") records)"
  sed 's/^/  (stderr) /' "$TMP/kafkajs-$codec.err"
  if [ "$codec" = none ]; then
    expect_eq 0 "$rc" "kafkajs exit code on the relay's default batches"
    expect_eq 50 "$(grep -c . "$TMP/kafkajs-$codec.jsonl")" "records kafkajs read from the relay's default batches"
  else
    expect_eq 3 "$rc" "kafkajs exit code on lz4 batches (no codec plugin)"
    expect_line '^kafkajs-reader: error: KafkaJSNotImplemented: LZ4 compression not implemented$' "$TMP/kafkajs-$codec.err"
  fi
done
DB=$chapter_db TOPIC=$chapter_topic

finish
