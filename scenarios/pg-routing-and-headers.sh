#!/usr/bin/env bash
# Topic per event type and the CloudEvents headers on PostgreSQL: routing-and-headers.sh's run
# with --db postgresql://... (a schema of its own on the server at $OUTBOX_PG_URL), in both
# coordination modes.
# Injects: write 100 --workload 50 (50 LoanCreated, then 50 LoanRenewed); relay --coordination
#          claims sends the first 40 rows (--batch-size 20, two --once runs), relay --coordination
#          leader the rest; the application's traceparent (the headers column, set with psql) on
#          evt-1001 (sent by claims) and on the last LoanRenewed row (sent by the leader); a
#          foreign row of type "Loan Paid" (no legal topic) and a foreign LoanCreated row whose
#          headers are invalid JSON, written with psql.
# Expects: <topic>.LoanCreated holds exactly the 50 LoanCreated records and <topic>.LoanRenewed the
#          50 LoanRenewed ones (kcat -f '%h'), each with ce_specversion 1.0, ce_id = event_id,
#          ce_type, ce_subject = the loan, ce_time = the row's created_at (server clock, RFC 3339
#          UTC ms), and the two traced rows with their traceparent unchanged after those; the
#          foreign rows are parked, one with the template's error, one with the headers column's;
#          verify and check given the template reconcile 100 published rows across both topics.
# Skipped (exit 77) only when OUTBOX_PG_URL is unset; scripts/test.sh sets it.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

TRACEPARENT=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
command -v kcat >/dev/null 2>&1 || die "kcat is not installed (scripts/install-deps.sh installs kcat)"
use_postgres
start_broker
TEMPLATE="$TOPIC.{event_type}"
psql_q() { psql "$DB" -v ON_ERROR_STOP=1 -qAtX -c "$1"; }

step "write 100 --workload 50 on PostgreSQL; a traceparent on two rows; foreign rows of type 'Loan Paid' and with bad headers"
run reset
expect_rc 0 "reset"
run write 100 --workload 50
expect_rc 0 "write 100"
psql_q "UPDATE outbox SET headers = '{\"traceparent\":\"$TRACEPARENT\"}' WHERE event_id = 'evt-1001' OR id = (SELECT max(id) FROM outbox WHERE event_type = 'LoanRenewed')" ||
  die "psql could not set the traced rows' headers"
psql_q "INSERT INTO outbox(event_id, aggregate_id, event_type, payload) VALUES ('foreign-1', 'P-1', 'Loan Paid', '{}')" ||
  die "psql could not insert the foreign row"
psql_q "INSERT INTO outbox(event_id, aggregate_id, event_type, payload, headers) VALUES ('foreign-2', 'P-2', 'LoanCreated', '{}', '{\"traceparent\":')" ||
  die "psql could not insert the foreign row with bad headers"
expect_eq "2" "$(psql_q "SELECT COUNT(*) FROM outbox WHERE headers LIKE '%$TRACEPARENT%'")" "traced rows"
expect_eq "Loan Paid|1 LoanCreated|51 LoanRenewed|50" \
  "$(psql_q 'SELECT event_type, COUNT(*) FROM outbox GROUP BY 1 ORDER BY event_type COLLATE "C"' | paste -s -d ' ')" \
  "rows by event type"

step "relay --coordination claims, two batches of 20; then --coordination leader until empty"
run --topic-template "$TEMPLATE" relay --coordination claims --batch-size 20 --once --headers cloudevents --quiet
expect_rc 0 "relay claims, first batch"
run --topic-template "$TEMPLATE" relay --coordination claims --batch-size 20 --once --headers cloudevents --quiet
expect_rc 0 "relay claims, second batch"
run --topic-template "$TEMPLATE" relay --coordination leader --until-empty --headers cloudevents --quiet
expect_rc 0 "relay leader --until-empty"
expect_eq "100 2" "$(psql_q 'SELECT COUNT(*) FILTER (WHERE published), COUNT(*) FILTER (WHERE parked_at IS NOT NULL) FROM outbox' | tr '|' ' ')" \
  "published and parked rows"
expect_eq "topic template '$TEMPLATE': the row's topic is illegal: a topic name takes only the letters a-z and A-Z, digits, '.', '_' and '-' (Kafka's rule), byte $((${#TOPIC} + 6)) is 0x20" \
  "$(psql_q "SELECT last_error FROM outbox WHERE event_id = 'foreign-1'")" "the parked row's error"
expect_eq "headers column: invalid JSON: it ends after 15 bytes" \
  "$(psql_q "SELECT last_error FROM outbox WHERE event_id = 'foreign-2'")" "the bad headers row's error"

step "kcat reads each topic: the rows' own event types, with their CloudEvents headers and the traceparents"
for type in LoanCreated LoanRenewed; do
  kcat -b "$BROKER" -t "$TOPIC.$type" -C -e -q -f '%k|%h\n' | sort >"$TMP/kcat-$type.out" ||
    fail "kcat could not read $TOPIC.$type"
  psql_q "SELECT event_id, id, aggregate_id, created_at, headers IS NOT NULL FROM outbox WHERE event_type = '$type' AND published" |
    while IFS='|' read -r event_id id aggregate created traced; do
      time=$(date -u -d "@$((created / 1000))" +%Y-%m-%dT%H:%M:%S).$(printf '%03d' $((created % 1000)))Z
      app=""
      [ "$traced" = t ] && app=",traceparent=$TRACEPARENT"
      echo "$event_id|event_id=$event_id,event_type=$type,outbox_id=$id,run_id=RUN,ce_specversion=1.0,ce_id=$event_id,ce_source=/outbox-lab/relay,ce_type=$type,ce_subject=$aggregate,ce_time=$time$app"
    done | sort >"$TMP/expected-$type.out"
  sed -i 's/,run_id=[^,]*,/,run_id=RUN,/' "$TMP/kcat-$type.out"
  expect_eq 50 "$(grep -c . "$TMP/kcat-$type.out")" "records on $TOPIC.$type"
  head -n 1 "$TMP/kcat-$type.out"
  diff -u "$TMP/expected-$type.out" "$TMP/kcat-$type.out" >"$TMP/diff-$type.out" ||
    { sed 's/^/  /' "$TMP/diff-$type.out" | head -n 20; fail "$TOPIC.$type: headers differ from the rows (diff above)"; }
done
expect_line "^evt-1001\|event_id=evt-1001,.*,ce_time=[^,]*,traceparent=$TRACEPARENT$" "$TMP/kcat-LoanCreated.out"
expect_eq 1 "$(grep -c ",traceparent=$TRACEPARENT$" "$TMP/kcat-LoanRenewed.out")" "traced records on $TOPIC.LoanRenewed (sent by the leader)"

step "verify and check read both topics"
run --topic-template "$TEMPLATE" verify
expect_line "^\[verify\] kafka topic=$TOPIC\.LoanCreated,$TOPIC\.LoanRenewed records=100 distinct-event-ids=100 duplicated-ids=0 " "$OUT"
run --topic-template "$TEMPLATE" check
expect_line "^\[check\] topics read \(--topic-template .*\): $TOPIC\.LoanCreated,$TOPIC\.LoanRenewed$" "$OUT"
expect_line 'kafka-records=100' "$OUT"

finish
