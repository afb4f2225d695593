#!/usr/bin/env bash
# Chapter 7.1, "单条毒行" and "顺序错乱" — a poison row, and the later event of its aggregate.
# Injects: a poison event: evt-9001 (loan L-9001, outbox id 11) with a 10 KB payload, inserted
#          with the sqlite3 CLI together with its business_loan row, on a relay limited to
#          -X message.max.bytes=2000, so librdkafka refuses it locally (MSG_SIZE_TOO_LARGE) on
#          every attempt; right after it, evt-9002 (id 12) for the SAME aggregate L-9001; ten
#          ordinary loans before (ids 1-10) and ten after (ids 13-22). Each part gets a fresh
#          database and its own topic. The relays key records by aggregate id, so both L-9001
#          events share a partition and their order on the topic means something.
# Expects:
#   1. block-key (the default), `relay --until-empty --max-attempts 3`: the first batch holds
#      one row per aggregate (21 of 22: evt-9002 is not claimed beside evt-9001); evt-9001 parked
#      after 3 attempts (status parked=1), the 20 other aggregates' events published, evt-9002
#      NOT published (it waits behind its aggregate's parked row), and the relay still exits,
#      reporting pending=1 and naming the parked row that stalls it, with exit code 20 (not 0:
#      a CI gate must not pass with work left); status names it too. After `unpark --all`, a relay
#      without the size limit publishes evt-9001 then evt-9002: check valid, no order violation.
#   2. block-key, the poison parked at its first failure (--max-attempts 1) in a batch that ends
#      with it (--batch-size 11), so evt-9002 is only ever seen behind a parked row:
#      `relay --until-empty` must still exit (pending=1, exit 20), with evt-9002 unpublished.
#      In between (part 1): `relay --until-empty --fail-on-parked` exits 14 (parked rows left), and
#      `parked` (text and --json) lists evt-9001 with 3 attempts, its last error and its age.
#   3. skip (`--on-failure skip`): evt-9002 IS published while evt-9001 is parked. After
#      `unpark --all` and a relay without the limit, evt-9001 comes after evt-9002 on the topic:
#      check is valid (nothing lost) and reports exactly that one order violation — the price of
#      skip, which the chapter's "顺序错乱" row warns about.
# Every relay here runs --coordination claims: one row per aggregate per batch is claims mode's
# block-key (leader mode keeps the same rule: README, "Order in leader mode").
# A relay that hangs is stopped after 15 s (run's RUN_TIMEOUT_S) and reported; draining 22 rows
# takes about a second.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

start_broker
# Read after start_broker: on a shared Kafka it names a topic of this run's own.
TOPIC_BASE=$TOPIC
POISON_LIMIT=(-X message.max.bytes=2000)
RELAY_RETRY=(--max-attempts 3 --backoff-base 50ms --backoff-max 200ms)

# fresh_poison_db NAME: a new database $TMP/NAME.db and topic TOPIC_BASE.NAME with ids 1-10
# ordinary loans, 11 evt-9001 (poison, L-9001), 12 evt-9002 (L-9001), 13-22 ordinary loans.
fresh_poison_db() {
  DB=$TMP/$1.db
  TOPIC=$TOPIC_BASE.$1
  echo "database $DB, topic $TOPIC"
  run reset
  expect_rc 0 "reset"
  run write 10 --quiet
  expect_rc 0 "write 10"
  echo "\$ sqlite3 $DB  # evt-9001 (10 KB payload) with loan L-9001 in one transaction, then evt-9002"
  sqlite3 -bail "$DB" <<'SQL' || die "sqlite3 could not insert the poison rows"
.timeout 5000
BEGIN IMMEDIATE;
INSERT INTO business_loan(loan_id, book_id, member_id, status, created_at)
  VALUES ('L-9001', 'B-9001', 'M-1', 'BORROWED', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at)
  VALUES ('evt-9001', 'L-9001', 'LoanCreated',
          json_object('eventId', 'evt-9001', 'loanId', 'L-9001', 'bookId', 'B-9001',
                      'note', printf('%.*c', 10240, 'x')),
          CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
COMMIT;
INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at)
  VALUES ('evt-9002', 'L-9001', 'LoanReturned',
          json_object('eventId', 'evt-9002', 'loanId', 'L-9001', 'bookId', 'B-9001'),
          CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
SQL
  run write 10 --quiet
  expect_rc 0 "write 10"
  echo "\$ sqlite3 $DB 'SELECT id, event_id, aggregate_id, length(payload) FROM outbox WHERE aggregate_id = ...'"
  local rows
  rows=$(sqlite3 -separator ' ' "$DB" \
    "SELECT id, event_id, aggregate_id, length(payload) > 10240 FROM outbox WHERE id BETWEEN 10 AND 13 ORDER BY id" | paste -s -d ',')
  echo "$rows"
  expect_eq "10 evt-1010 L-1010 0,11 evt-9001 L-9001 1,12 evt-9002 L-9001 0,13 evt-1013 L-1013 0" \
    "$rows" "outbox rows 10-13 (id event aggregate payload>10KB)"
}

# l9001_state: one line per L-9001 event: event_id published parked attempts.
l9001_state() {
  sqlite3 -separator ' ' "$DB" "SELECT event_id, published, parked_at IS NOT NULL, attempts
    FROM outbox WHERE aggregate_id = 'L-9001' ORDER BY id" | paste -s -d ','
}

# expect_status_json K=V...: every key of `status --json` named has that value.
expect_status_json() {
  run status --json
  expect_rc 0 "status --json"
  local kv cond=true
  for kv in "$@"; do cond="$cond and .${kv%%=*} == ${kv#*=}"; done
  expect_json "$OUT" "$cond" "status --json is not $*"
}

# expect_check_json RC WHAT JQ-CONDITIONS...: `check --json` exits RC and every condition (a jq
# expression over the report) holds.
expect_check_json() {
  local rc=$1 what=$2
  shift 2
  run check --json
  expect_rc "$rc" "check --json ($what)"
  local cond
  for cond in "$@"; do expect_json "$OUT" "$cond" "check --json ($what)"; done
}

# expect_topic_order "EVT EVT": L-9001's event ids in topic order (consume would print
# evt-9001's 10 KB line; only the ids are kept).
expect_topic_order() {
  local order
  lab_args
  echo "\$ outbox-lab consume | grep -o 'evt-900[12]'"
  order=$("$LAB_BIN" "${LAB_ARGS[@]}" consume </dev/null 2>"$TMP/consume.err" |
    grep -o -E '"eventId":"evt-900[12]"' | cut -d'"' -f4 | paste -s -d ' ')
  echo "$order"
  expect_eq "$1" "$order" "L-9001's events in topic order"
}


step "block-key: the poison row is parked, its aggregate's next event waits"
fresh_poison_db block-key
RUN_TIMEOUT_S=15 run "${POISON_LIMIT[@]}" relay --coordination claims --until-empty --key aggregate-id "${RELAY_RETRY[@]}"
expect_rc 20 "relay --until-empty (block-key) with a row stalled behind a parked row"
expect_line '^\[relay\] stalled: 1 rows of aggregate L-9001 wait behind parked row id=11 event=evt-9001; `outbox-lab unpark 11` lets them go$' "$OUT"
state=$(l9001_state)
echo "L-9001 events (event published parked attempts): $state"
expect_eq "evt-9001 0 1 3,evt-9002 0 0 0" "$state" \
  "block-key: L-9001's events: evt-9002 must wait behind the parked evt-9001"
# The first batch holds one row per aggregate: 21 of 22, evt-9002 left for later.
expect_line '^\[relay\] batch token=[0-9]+ claimed=21 acked=20 failed=1 marked=20 retried=1 parked=0 fenced=0$' "$OUT"
expect_line '^\[relay\] batch .* failed=1 .*parked=1 ' "$OUT"
expect_line '^\[relay\] done: batches=[0-9]+ acked=20 marked=20 failed=3 parked=1 fenced=0 pending=1$' "$OUT"
expect_status_json parked=1 published=20 pending=1 claimed=0
run status
expect_line '^\[status\] stalled: parked row id=11 event=evt-9001 holds back 1 rows of aggregate L-9001$' "$OUT"
last_error=$(sqlite3 "$DB" "SELECT last_error FROM outbox WHERE event_id = 'evt-9001'")
echo "evt-9001 last_error: $last_error"
case "$last_error" in *MSG_SIZE_TOO_LARGE*) ;; *) fail "evt-9001 last_error is '$last_error', not MSG_SIZE_TOO_LARGE" ;; esac
expect_check_json 15 "poison parked, evt-9002 waiting: not drained until unparked, nothing lost" \
  '.lost == []' '.parked == ["evt-9001"]' '.pending == ["evt-9002"]' \
  '.stuck == ["evt-9001", "evt-9002"]' '.verdict == "not-drained"' \
  '.kafka_records == 20' '.ok == 20' '.duplicated == {}' \
  '.phantom == [] and .atomicity == [] and .lost_after_mark == []'

step "CI: relay --fail-on-parked exits 14 while a row is parked; parked lists it"
RUN_TIMEOUT_S=15 run relay --coordination claims --until-empty --key aggregate-id --fail-on-parked
expect_rc 14 "relay --until-empty --fail-on-parked with a parked row"
expect_line '^\[relay\] done: .* parked=0 fenced=0 pending=1$' "$OUT"
run parked
expect_rc 0 "parked"
expect_line '^\[parked\] id=11 state=parked attempts=3 age-ms=[0-9]+ event-id=evt-9001 aggregate=L-9001 last-error=.*MSG_SIZE_TOO_LARGE' "$OUT"
expect_line '^\[parked\] parked=1 failing=0 listed=1$' "$OUT"
run parked --json
expect_rc 0 "parked --json"
expect_json "$OUT" '.parked == 1 and .failing == 0 and (.rows | length) == 1 and .rows[0].id == 11 and .rows[0].state == "parked" and .rows[0].attempts == 3 and (.rows[0].last_error | test("MSG_SIZE_TOO_LARGE")) and .rows[0].age_ms >= 0' "parked --json"

step "block-key: unpark, and a relay without the size limit publishes evt-9001, then evt-9002"
run unpark --all
expect_rc 0 "unpark --all"
expect_line '^\[unpark\] unparked=1$' "$OUT"
RUN_TIMEOUT_S=15 run relay --coordination claims --until-empty --key aggregate-id --fail-on-parked
expect_rc 0 "relay --until-empty --fail-on-parked after unpark (block-key): nothing parked"
expect_line '^\[relay\] done: batches=[0-9]+ acked=2 marked=2 failed=0 parked=0 fenced=0 pending=0$' "$OUT"
expect_eq "evt-9001 1 0 0,evt-9002 1 0 0" "$(l9001_state)" "L-9001 events after unpark (event published parked attempts)"
expect_check_json 0 "block-key after unpark" \
  '.valid' '.kafka_records == 22' '.ok == 22' '.duplicated == {}' \
  '.order_violations == []'
expect_topic_order "evt-9001 evt-9002"

step "block-key, poison parked at its first failure: --until-empty must still end"
fresh_poison_db park-first
RUN_TIMEOUT_S=15 run "${POISON_LIMIT[@]}" relay --coordination claims --until-empty --key aggregate-id --batch-size 11 \
  --max-attempts 1
expect_rc 20 "relay --until-empty with a row blocked behind a parked row"
expect_line '^\[relay\] batch token=[0-9]+ claimed=11 acked=10 failed=1 marked=10 retried=0 parked=1 fenced=0$' "$OUT"
expect_line '^\[relay\] done: batches=2 acked=20 marked=20 failed=1 parked=1 fenced=0 pending=1$' "$OUT"
expect_status_json parked=1 published=20 pending=1 claimed=0
expect_eq "evt-9001 0 1 1,evt-9002 0 0 0" "$(l9001_state)" "L-9001 events (event published parked attempts)"

step "skip: evt-9002 flows past the parked evt-9001"
fresh_poison_db skip
RUN_TIMEOUT_S=15 run "${POISON_LIMIT[@]}" relay --coordination claims --until-empty --key aggregate-id --on-failure skip \
  "${RELAY_RETRY[@]}"
expect_rc 0 "relay --until-empty --on-failure skip"
expect_line '^\[relay\] done: batches=[0-9]+ acked=21 marked=21 failed=3 parked=1 fenced=0 pending=0$' "$OUT"
expect_status_json parked=1 published=21 pending=0 claimed=0
expect_eq "evt-9001 0 1 3,evt-9002 1 0 0" "$(l9001_state)" "L-9001 events after the skip relay"
expect_check_json 15 "skip: only the parked poison not sent, not lost" \
  '.lost == []' '.parked == ["evt-9001"]' '.stuck == ["evt-9001"]' '.kafka_records == 21' \
  '.duplicated == {}' '.phantom == [] and .lost_after_mark == []'

step "skip: unpark: evt-9001 is published after evt-9002 — one order violation"
run unpark --all
expect_rc 0 "unpark --all"
expect_line '^\[unpark\] unparked=1$' "$OUT"
RUN_TIMEOUT_S=15 run relay --coordination claims --until-empty --key aggregate-id --on-failure skip
expect_rc 0 "relay --until-empty after unpark (skip)"
expect_line '^\[relay\] done: batches=1 acked=1 marked=1 failed=0 parked=0 fenced=0 pending=0$' "$OUT"
expect_check_json 0 "skip after unpark: valid, order reversed" \
  '.valid' '.kafka_records == 22' '.ok == 22' '.duplicated == {}' \
  '.order_violations == ["evt-9001 (aggregate L-9001) after a later event"]'
expect_topic_order "evt-9002 evt-9001"

finish
