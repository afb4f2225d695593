#!/usr/bin/env bash
# Issue 8, leader mode — two relays on one outbox, one leads and one stands by.
# Injects: no crash — two `relay --coordination leader --until-empty --batch-size 500` processes
#          on the same database and topic over 10,000 unpublished events. relay-a starts first and
#          pauses after its first page read (failpoint relay.after_claim=1*pause->off), holding
#          the leader lease; relay-b is started only then, so which one leads is decided, not
#          raced. Besides the 10,000 loans' events, an application transaction (sqlite3) adds a
#          second event, LoanReturned, for each of the last 200 loans (rows 10,001..10,200), so
#          200 aggregates have two events one batch apart, in flight together in the pipeline;
#          the relays key records by aggregate id.
# Expects: relay-b says it is a standby (`{"report":"wait","on":"leader","owner":"relay-a",
#          "token":1,...}`) and status shows the leader relay-a with token 1 and a lease left;
#          after relay-a is released both exit 0; relay-a marked all 10,000 in batches of 500 under
#          token 1, relay-b sent and marked nothing; nothing failed or was fenced; on release
#          relay-a gave the lease back (status: no live leader, last token 1, or 2 when relay-b
#          took the released lease before it saw the outbox empty); check is valid with
#          10,200 records, 0 lost, 0 duplicated, 0 order violations.
# The writes use --synchronous normal only to keep the setup short: a commit survives kill -9 at
# any setting, and nothing here is killed.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

EVENTS=10000
ROWS=$((EVENTS + 200))

sum_batches() {
  json_lines "$1" | jq -s "map(select(.report == \"batch\") | .$2) | add // 0"
}

start_broker

step "reset, then write $EVENTS loans with their outbox events"
run reset
expect_rc 0 "reset"
run --synchronous normal write "$EVENTS" --quiet
expect_rc 0 "write $EVENTS"
expect_line "^\[write\] committed=$EVENTS\$" "$OUT"
echo "\$ sqlite3 $DB  # one LoanReturned event for each of loans L-10801..L-11000, in one transaction"
sqlite3 -bail "$DB" <<'SQL' || die "sqlite3 could not add the second events"
.timeout 5000
BEGIN IMMEDIATE;
WITH RECURSIVE n(i) AS (SELECT 9801 UNION ALL SELECT i + 1 FROM n WHERE i < 10000)
INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at)
SELECT 'evt-returned-' || (1000 + i), 'L-' || (1000 + i), 'LoanReturned',
       json_object('eventId', 'evt-returned-' || (1000 + i), 'loanId', 'L-' || (1000 + i)),
       CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)
FROM n;
COMMIT;
SQL
expect_eq "2" "$(sqlite3 "$DB" "SELECT COUNT(*) FROM outbox WHERE aggregate_id = 'L-11000'")" \
  "events of loan L-11000 (its LoanCreated and LoanReturned)"

step "relay-a takes the lease and pauses after its first page; relay-b starts as a standby"
echo "(OUTBOX_FAILPOINTS='relay.after_claim=1*pause->off')"
export OUTBOX_FAILPOINTS='relay.after_claim=1*pause->off'
start_bg relay-a relay --coordination leader --until-empty --batch-size 500 --key aggregate-id --owner relay-a --json
pid_a=$BG_PID log_a=$BG_LOG
unset OUTBOX_FAILPOINTS
wait_paused "$pid_a" "$log_a" relay.after_claim
expect_line '^\{"report":"lease","event":"acquired","owner":"relay-a","token":1,' "$log_a"
start_bg relay-b relay --coordination leader --until-empty --batch-size 500 --key aggregate-id --owner relay-b --json
pid_b=$BG_PID log_b=$BG_LOG
wait_for 30 "$pid_b" "relay-b's standby line" _has_line '"report":"wait","on":"leader","owner":"relay-a","token":1,' "$log_b" ||
  die "relay-b never said it stands by for relay-a"
run status --json
expect_rc 0 "status --json while relay-a leads"
expect_json "$OUT" '.leader.owner == "relay-a" and .leader.token == 1 and .leader.lease_left_ms > 0 and .leader.owner_process == "unknown" and .claimed == 0' \
  "status: relay-a leads with token 1 and writes no claims"
run status
expect_line '^\[status\] leader owner=relay-a token=1 lease-left-ms=[0-9]+ owner-process=unknown$' "$OUT"

release "$pid_a"
wait_exit "$pid_a" 60 "relay-a"
rc_a=$BG_RC
wait_exit "$pid_b" 30 "relay-b"
rc_b=$BG_RC
for name in relay-a relay-b; do
  echo "--- $name (batch lines left out)"
  grep -v '"report":"batch"' "$TMP/$name.log" | sed 's/^/  | /'
done
expect_eq 0 "$rc_a" "exit code of relay-a"
expect_eq 0 "$rc_b" "exit code of relay-b"

step "relay-a sent everything under token 1; relay-b nothing"
expect_json "$log_a" ".report == \"final\" and .marked == $ROWS and .acked == $ROWS and .failed == 0 and .fenced == 0 and .pending == 0" \
  "relay-a: final report"
expect_eq "$ROWS" "$(sum_batches "$log_a" claimed)" "rows relay-a read and sent"
expect_eq 20 "$(json_lines "$log_a" | jq -c 'select(.report == "batch" and .token == 1 and .claimed == 500 and .marked == 500)' | grep -c .)" \
  "relay-a's batches of 500 under token 1"
expect_line '^\{"report":"lease","event":"released","owner":"relay-a","token":1,' "$log_a"
expect_json "$log_b" '.report == "final" and .batches == 0 and .marked == 0 and .acked == 0 and .fenced == 0 and .pending == 0' \
  "relay-b: final report (a standby to the end)"
# relay-b may see relay-a's lease released before it sees the outbox empty: it then takes the free
# lease (token 2, after relay-a's term) and finds nothing to send.
expect_eq 0 "$(json_lines "$log_b" | jq -c 'select(.report == "lease" and .event == "acquired" and (.token != 2 or .previous_owner != "relay-a"))' | grep -c .)" \
  "relay-b's lease acquisitions other than token 2 after relay-a's term"
expect_no_line '^outbox-lab: error:' "$log_a"
expect_no_line '^outbox-lab: error:' "$log_b"

step "status: all published, the lease given back"
run status --json
expect_rc 0 "status --json"
expect_json "$OUT" ".unpublished == 0 and .published == $ROWS and .claimed == 0 and .leader == null and (.lease_token == 1 or .lease_token == 2)" \
  "status --json: all published, no live leader, last token 1 (or 2: relay-b took the released lease)"

step "check: every event exactly once on the topic, each aggregate's events in order"
expect_check "valid=1,outbox_rows=$ROWS,business_rows=$EVENTS,kafka_records=$ROWS,ok=$ROWS,duplicated=0,lost=0,phantom=0,atomicity=0,lost_after_mark=0,stuck=0"
run check --json
expect_json "$OUT" '.order_violations == []' "check --json: 0 order violations"


finish
