#!/usr/bin/env bash
# Topic per event type and the CloudEvents headers, read back by a consumer that is not the lab.
# Injects: the chapter's loans written twice over 50 loans (write 100 --workload 50: 50 LoanCreated,
#          then 50 LoanRenewed); the application's traceparent on evt-1001's row (the headers
#          column); then, in a second outbox, a foreign row whose event type "Loan Paid" makes no
#          legal topic, beside 4 loans.
# Expects: relay --topic-template '<topic>.{event_type}' --headers cloudevents (leader, then claims
#          on the second outbox) sends the 50 LoanCreated records to <topic>.LoanCreated and the 50
#          LoanRenewed ones to <topic>.LoanRenewed, none to <topic>; kcat (Debian's, -f '%h') reads
#          evt-1001's headers as exactly event_id, event_type, outbox_id, run_id, ce_specversion
#          1.0, ce_id, ce_source /outbox-lab/relay, ce_type, ce_subject (the loan), ce_time (the
#          row's created_at, RFC 3339 UTC with ms) and the traceparent unchanged; verify and check
#          given the same template reconcile the 100 rows across both topics (valid), while check
#          without it reads <topic> alone, where nothing was ever written, and stops with exit 8
#          (a wrong --topic: "has never held a record" on the embedded broker, which created
#          <topic> empty; "does not exist" on Kafka), not 100 lost events; consume prints
#          each record's topic. The "Loan Paid" row is parked at once with the template's error;
#          the 4 loans go out, and the relay exits 0. A third outbox of 100 rows through relay
#          --exactly-once --ce-source urn:lab:loans: both topics in its transactions, the same
#          headers with that source, check --exactly-once ok=100 across both topics.
# With KAFKA_BOOTSTRAP_SERVERS the same runs on that Kafka (topics of this run's own).
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

TRACEPARENT=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
command -v kcat >/dev/null 2>&1 || die "kcat is not installed (scripts/install-deps.sh installs kcat)"

start_broker
TEMPLATE="$TOPIC.{event_type}"

step "the chapter's loans over 50 loans: 50 LoanCreated, then 50 LoanRenewed; a traceparent on evt-1001"
run reset
expect_rc 0 "reset"
run write 100 --workload 50
expect_rc 0 "write 100"
sqlite3 -bail "$DB" "UPDATE outbox SET headers = '{\"traceparent\":\"$TRACEPARENT\"}' WHERE event_id = 'evt-1001'" ||
  die "sqlite3 could not set evt-1001's headers"
sqlite3 "$DB" 'SELECT event_type, COUNT(*) FROM outbox GROUP BY 1 ORDER BY 1' | tee "$TMP/types.out"
expect_eq "LoanCreated|50 LoanRenewed|50" "$(paste -s -d ' ' "$TMP/types.out")" "rows by event type"

step "relay --topic-template '$TEMPLATE' --headers cloudevents (leader, the SQLite default)"
run --topic-template "$TEMPLATE" relay --until-empty --headers cloudevents --quiet
expect_rc 0 "relay --until-empty"
expect_line 'marked=100 ' "$OUT"

step "kcat reads each topic: 50 records each, none on $TOPIC"
for type in LoanCreated LoanRenewed; do
  kcat -b "$BROKER" -t "$TOPIC.$type" -C -e -q -f '%k|%h\n' >"$TMP/kcat-$type.out" 2>"$TMP/kcat-$type.err" ||
    fail "kcat could not read $TOPIC.$type: $(head -n 1 "$TMP/kcat-$type.err")"
  expect_eq 50 "$(grep -c . "$TMP/kcat-$type.out")" "records on $TOPIC.$type"
  expect_eq 50 "$(grep -c "ce_type=$type," "$TMP/kcat-$type.out")" "ce_type=$type on $TOPIC.$type"
done
head -n 2 "$TMP/kcat-LoanCreated.out"
run_id=$(sqlite3 "$DB" 'SELECT run_id FROM outbox_run')
IFS='|' read -r created aggregate < <(sqlite3 "$DB" "SELECT created_at, aggregate_id FROM outbox WHERE event_id = 'evt-1001'")
ce_time=$(date -u -d "@$((created / 1000))" +%Y-%m-%dT%H:%M:%S).$(printf '%03d' $((created % 1000)))Z
expected="evt-1001|event_id=evt-1001,event_type=LoanCreated,outbox_id=1,run_id=$run_id,ce_specversion=1.0,ce_id=evt-1001,ce_source=/outbox-lab/relay,ce_type=LoanCreated,ce_subject=$aggregate,ce_time=$ce_time,traceparent=$TRACEPARENT"
echo "expected: $expected"
expect_eq "$expected" "$(grep '^evt-1001|' "$TMP/kcat-LoanCreated.out")" "evt-1001's headers as kcat reads them"
renewed=$(sqlite3 "$DB" "SELECT event_id FROM outbox WHERE event_type = 'LoanRenewed' ORDER BY id LIMIT 1")
expect_line "^$renewed\|event_id=$renewed,event_type=LoanRenewed,outbox_id=51,run_id=$run_id,ce_specversion=1.0,ce_id=$renewed,ce_source=/outbox-lab/relay,ce_type=LoanRenewed,ce_subject=[^,]+,ce_time=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$" \
  "$TMP/kcat-LoanRenewed.out"

step "verify and check read both topics with the same template"
run --topic-template "$TEMPLATE" verify --expect business=50,outbox=100,published=100,unpublished=0,kafka_records=100,kafka_distinct=100,kafka_duplicates=0,kafka_missing=0,kafka_unexpected=0
expect_rc 0 "verify --topic-template"
expect_line "^\[verify\] kafka topic=$TOPIC\.LoanCreated,$TOPIC\.LoanRenewed records=100 " "$OUT"
run --topic-template "$TEMPLATE" check
expect_rc 0 "check --topic-template"
expect_line "^\[check\] topics read \(--topic-template .*\): $TOPIC\.LoanCreated,$TOPIC\.LoanRenewed$" "$OUT"
expect_line 'business=50 outbox=100 kafka-records=100' "$OUT"
run check
# The plain topic never held a record: a wrong --topic (exit 8), not 100 lost events.
expect_rc 8 "check without the template (nothing ever on $TOPIC)"
expect_error_line "check without the template"
if [ -z "$EXTERNAL_BROKERS" ]; then
  # The embedded broker was started with $TOPIC: it exists, every partition at offset 0.
  expect_line "topic '$TOPIC' on .* has never held a record .* 100 outbox rows are marked published" "$ERR"
else
  # On Kafka nothing ever created $TOPIC.
  expect_line "topic '$TOPIC' does not exist" "$ERR"
fi
run --topic-template "$TEMPLATE" consume --with-offsets
expect_rc 0 "consume --topic-template"
expect_eq 100 "$(grep -c "^topic=$TOPIC\.Loan\(Created\|Renewed\) partition=" "$OUT")" "consume lines with their topic"

step "a second outbox: a foreign row of type 'Loan Paid' (no legal topic) beside 4 loans; relay --coordination claims"
DB=$TMP/second.db
run reset
run write 4
sqlite3 -bail "$DB" "INSERT INTO outbox(event_id, aggregate_id, event_type, payload) VALUES ('foreign-1', 'P-1', 'Loan Paid', '{}')" ||
  die "sqlite3 could not insert the foreign row"
run --topic-template "$TEMPLATE" relay --until-empty --coordination claims --headers cloudevents --quiet
expect_rc 0 "relay --until-empty with a parked row on its own aggregate"
expect_line 'marked=4 ' "$OUT"
expect_line 'parked=1' "$OUT"
expect_eq "topic template '$TEMPLATE': the row's topic is illegal: a topic name takes only the letters a-z and A-Z, digits, '.', '_' and '-' (Kafka's rule), byte $((${#TOPIC} + 6)) is 0x20" \
  "$(sqlite3 "$DB" "SELECT last_error FROM outbox WHERE event_id = 'foreign-1'")" "the parked row's error"
run --topic-template "$TEMPLATE" check
expect_line "^\[check\] topics read \(--topic-template .*\): $TOPIC\.LoanCreated$" "$OUT"

step "a third outbox: relay --exactly-once routes and adds the headers too (one transaction, two topics)"
DB=$TMP/third.db
run reset
run write 100 --workload 50
run --topic-template "$TEMPLATE" relay --exactly-once --until-empty --headers cloudevents --ce-source urn:lab:loans --quiet
expect_rc 0 "relay --exactly-once --until-empty"
expect_line 'marked=100 ' "$OUT"
kcat -b "$BROKER" -t "$TOPIC.LoanRenewed" -C -e -q -X isolation.level=read_committed -f '%k|%h\n' >"$TMP/kcat-eo.out" 2>/dev/null ||
  fail "kcat could not read $TOPIC.LoanRenewed"
run_id=$(sqlite3 "$DB" 'SELECT run_id FROM outbox_run')
expect_eq 50 "$(grep -c "^evt-1[0-9]*|.*,run_id=$run_id,ce_specversion=1\.0,.*,ce_source=urn:lab:loans,ce_type=LoanRenewed," "$TMP/kcat-eo.out")" \
  "this run's LoanRenewed records with ce_source urn:lab:loans"
run --topic-template "$TEMPLATE" check --exactly-once
expect_line "^\[check\] topics read \(--topic-template .*\): $TOPIC\.LoanCreated,$TOPIC\.LoanRenewed$" "$OUT"
expect_line '^\[check\] ok=100 lost=0 ' "$OUT"

finish
