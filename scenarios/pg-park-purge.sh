#!/usr/bin/env bash
# The operator's commands on PostgreSQL (issue 12): parked, unpark and purge on a postgresql:// --db
# (a schema of its own on the server at $OUTBOX_PG_URL).
# Injects: two poison events, evt-9001 (id 11, loan L-9001) and evt-9002 (id 12, loan L-9002),
#          each with a 10 KB payload, inserted with psql together with their loans between ten
#          ordinary loans before (ids 1-10) and ten after (ids 13-22), on a relay limited to
#          -X message.max.bytes=2000, so librdkafka refuses both locally (MSG_SIZE_TOO_LARGE) on
#          every attempt; later, an error at failpoint purge.mid_batch in the second batch of a
#          purge.
# Expects: before any reset, status and relay --once on the empty schema exit 6 naming it and
#          create no table. Then the relay parks both after 3 attempts and publishes the other
#          20 (pending=0);
#          `parked` lists ids 11 and 12 with 3 attempts and the size error (text, --json,
#          --limit 1 still counting both); check reports nothing lost and both parked (exit 15);
#          `unpark 11` unparks one, a second `unpark 11` and `unpark 99` exit 10, `unpark --all`
#          unparks the other (unparked=1); a relay without the limit publishes both: check valid,
#          22 ok. `purge --older-than 1h` deletes nothing just published; `purge --older-than 0s
#          --archive --batch-size 5` moves all 22 to outbox_archive in 5 batches, status shows
#          published=0 archived=22, and check is still valid (archived rows count as published;
#          so do rows purged without --archive, at the end).
#          Four more events, published, then a purge whose second batch of 2 fails at the
#          failpoint: exit 12, the first batch stays deleted (published=2), and a purge after
#          deletes the rest.
# Skipped (exit 77) only when OUTBOX_PG_URL is unset; scripts/test.sh sets it.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

use_postgres
start_broker
POISON_LIMIT=(-X message.max.bytes=2000)
RELAY_RETRY=(--max-attempts 3 --backoff-base 50ms --backoff-max 200ms)

# expect_status_json K=V...: every key of `status --json` named has that value.
expect_status_json() {
  run status --json
  expect_rc 0 "status --json"
  local kv cond=true
  for kv in "$@"; do cond="$cond and .${kv%%=*} == ${kv#*=}"; done
  expect_json "$OUT" "$cond" "status --json is not $*"
}

step "before reset: status and relay on a schema without the outbox refuse (exit 6), create nothing"
for cmd in status "relay --once"; do
  # shellcheck disable=SC2086  # the command's words
  run $cmd
  expect_rc 6 "$cmd on an empty schema"
  expect_line "no outbox table in schema $PG_SCHEMA" "$ERR"
  expect_error_line "$cmd on an empty schema"
done
tables=$(psql "$DB" -tA -c "SELECT count(*) FROM pg_tables WHERE schemaname = '$PG_SCHEMA'")
[ "$tables" = 0 ] || fail "the refused commands created $tables tables in $PG_SCHEMA"

step "ten loans, two poison events (10 KB each, with their loans), ten more loans"
run reset
expect_rc 0 "reset"
run write 10 --quiet
expect_rc 0 "write 10"
echo "\$ psql  # loans L-9001 and L-9002 and their 10 KB events in one transaction"
psql "$DB" -v ON_ERROR_STOP=1 -q <<'SQL' || die "psql could not insert the poison rows"
BEGIN;
INSERT INTO business_loan(loan_id, book_id, member_id, status, created_at)
  SELECT 'L-' || n, 'B-' || n, 'M-1', 'BORROWED', (extract(epoch FROM now()) * 1000)::bigint
  FROM generate_series(9001, 9002) AS n;
INSERT INTO outbox(event_id, aggregate_id, event_type, payload)
  SELECT 'evt-' || n, 'L-' || n, 'LoanCreated',
         convert_to('{"eventId":"evt-' || n || '","loanId":"L-' || n || '","note":"' ||
                    repeat('x', 10240) || '"}', 'UTF8')
  FROM generate_series(9001, 9002) AS n;
COMMIT;
SQL
run write 10 --quiet
expect_rc 0 "write 10"
rows=$(psql "$DB" -tA -F ' ' -c "SELECT id, event_id, length(payload) > 10240 FROM outbox WHERE id BETWEEN 10 AND 13 ORDER BY id" | paste -s -d ',')
echo "outbox rows 10-13 (id event payload>10KB): $rows"
expect_eq "10 evt-1010 f,11 evt-9001 t,12 evt-9002 t,13 evt-1013 f" "$rows" "outbox rows 10-13"

step "a relay that cannot send 10 KB parks both poison rows after 3 attempts"
RUN_TIMEOUT_S=30 run "${POISON_LIMIT[@]}" relay --until-empty "${RELAY_RETRY[@]}"
expect_rc 0 "relay --until-empty with two poison rows"
expect_line '^\[relay\] done: batches=[0-9]+ acked=20 marked=20 failed=6 parked=2 fenced=0 pending=0$' "$OUT"
expect_status_json parked=2 published=20 pending=0 unpublished=2 claimed=0

step "parked lists them on PostgreSQL"
run parked
expect_rc 0 "parked"
expect_line '^\[parked\] id=11 state=parked attempts=3 age-ms=[0-9]+ event-id=evt-9001 aggregate=L-9001 last-error=.*MSG_SIZE_TOO_LARGE' "$OUT"
expect_line '^\[parked\] id=12 state=parked attempts=3 age-ms=[0-9]+ event-id=evt-9002 aggregate=L-9002 last-error=.*MSG_SIZE_TOO_LARGE' "$OUT"
expect_line '^\[parked\] parked=2 failing=0 listed=2$' "$OUT"
run parked --json
expect_rc 0 "parked --json"
expect_json "$OUT" '.parked == 2 and .failing == 0 and ([.rows[].id] == [11, 12]) and ([.rows[].state] == ["parked", "parked"]) and ([.rows[].attempts] == [3, 3]) and (.rows[0].last_error | test("MSG_SIZE_TOO_LARGE")) and .rows[0].age_ms >= 0 and .rows[0].age_ms < 60000' "parked --json"
run parked --limit 1
expect_rc 0 "parked --limit 1"
expect_line '^\[parked\] parked=2 failing=0 listed=1$' "$OUT"
run check --json
expect_rc 15 "check with two parked rows (not drained)"
expect_json "$OUT" '.lost == [] and .parked == ["evt-9001", "evt-9002"] and .ok == 20 and .verdict == "not-drained"' "check --json with two parked rows"

step "unpark one by id, then the rest with --all"
run unpark 11
expect_rc 0 "unpark 11"
expect_line '^\[unpark\] unparked id=11$' "$OUT"
run unpark 11
expect_rc 10 "unpark 11 again (no longer parked)"
expect_error_line "unpark 11 again"
expect_line "^outbox-lab: error: unpark: no parked row with id 11 in 'postgresql://" "$ERR"
run unpark 99
expect_rc 10 "unpark 99 (no such row)"
run parked --json
expect_rc 0 "parked --json after unpark 11"
expect_json "$OUT" '.parked == 1 and ([.rows[].id] == [12])' "parked after unpark 11: only id 12"
run unpark --all
expect_rc 0 "unpark --all"
expect_line '^\[unpark\] unparked=1$' "$OUT"
run parked
expect_rc 0 "parked after unpark --all"
expect_line '^\[parked\] parked=0 failing=0 listed=0$' "$OUT"

step "a relay without the size limit publishes both; nothing lost"
RUN_TIMEOUT_S=30 run relay --until-empty --fail-on-parked
expect_rc 0 "relay --until-empty after unpark"
expect_line '^\[relay\] done: batches=[0-9]+ acked=2 marked=2 failed=0 parked=0 fenced=0 pending=0$' "$OUT"
run check --json
expect_rc 0 "check after unpark"
expect_json "$OUT" '.valid and .ok == 22 and .lost == [] and .duplicated == {} and .kafka_records == 22' "check --json after unpark"

step "purge on PostgreSQL: nothing is an hour old; everything is older than 0s"
run purge --older-than 1h
expect_rc 0 "purge --older-than 1h"
expect_line '^\[purge\] deleted=0 archived=0 batches=0$' "$OUT"
run purge --older-than 0s --archive --batch-size 5
expect_rc 0 "purge --older-than 0s --archive --batch-size 5"
expect_line '^\[purge\] deleted=22 archived=22 batches=5$' "$OUT"
expect_status_json published=0 archived=22 unpublished=0
run check --json
expect_rc 0 "check after the purge"
expect_json "$OUT" '.valid and .ok == 22 and .lost == []' "check --json after purge --archive: archived rows count as published"
run purge --older-than 0s
expect_rc 0 "purge of an empty outbox"
expect_line '^\[purge\] deleted=0 archived=0 batches=0$' "$OUT"

step "an error at purge.mid_batch rolls back only the batch in progress"
run write 4 --quiet
expect_rc 0 "write 4"
RUN_TIMEOUT_S=30 run relay --until-empty
expect_rc 0 "relay --until-empty of 4"
OUTBOX_FAILPOINTS='purge.mid_batch=1*off->error' run purge --older-than 0s --batch-size 2
expect_rc 12 "purge with an error at the second batch's failpoint"
expect_error_line "purge at purge.mid_batch"
expect_status_json published=2 archived=22
run purge --older-than 0s --batch-size 2
expect_rc 0 "purge after the failure"
expect_line '^\[purge\] deleted=2 archived=0 batches=1$' "$OUT"
expect_status_json published=0 archived=22 unpublished=0
# Purged without --archive, the 4 events still count as published (outbox_purged): valid, never
# phantom, atomicity or lost.
run check --json
expect_rc 0 "check after a purge without --archive"
expect_json "$OUT" '.valid and .ok == 26 and .phantom == [] and .atomicity == [] and .lost == []' "check --json after purge: purged events count as published"
run verify
expect_rc 0 "verify after a purge without --archive"
expect_no_line 'lost for good|phantom' "$OUT"

finish
