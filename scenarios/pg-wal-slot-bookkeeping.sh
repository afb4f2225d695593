#!/usr/bin/env bash
# What verify, check and status read of a WAL relay (relay --source wal): the slot it streams,
# the rows its slot will never stream, and its key->partition mapping, on PostgreSQL.
# Injects: 5 loans written before the WAL relay's first start, which then creates its slot under a
#          name of its own (--slot NAME, not the default); the polling relay; 50 loans over 50
#          aggregates relayed with --key aggregate-id; 50 more, and a WAL relay with
#          -X partitioner=murmur2_random.
# Expects: the WAL relay refuses to stream (exit 23, one line naming the polling relay) while
#          rows older than its slot are unpublished: streaming later rows of their aggregates
#          first reordered them (check: order violations). Meanwhile the 5 are pending (check
#          exits 15 naming them; status counts them pending), never "lost for good" as when every
#          row the slot did not hold counted as confirmed. After the polling relay, the WAL relay
#          streams. verify, check and status read the named slot (before, only the default name:
#          sent rows stayed "pending" for good). The WAL relay with another partitioner exits 21
#          and sends nothing, as the polling relay does (before, it sent, and check found
#          aggregates on two partitions). Nothing is lost, duplicated or reordered at the end.
# Skipped (exit 77) only when OUTBOX_PG_URL is unset; scripts/test.sh sets it.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

use_postgres
start_broker
PG_WAL_SLOT=wal_bookkeeping_$$  # dropped with its publication at exit (lib.sh)
WAL=(relay --source wal --slot "$PG_WAL_SLOT" --until-empty --key aggregate-id --quiet)

step "5 loans, then the WAL relay's first start creates its named slot after them and stops"
run reset
expect_rc 0 "reset"
run write 5
expect_rc 0 "write 5"
run "${WAL[@]}"
expect_rc 23 "the WAL relay with 5 rows older than its slot"
expect_error_line "the WAL relay with 5 rows older than its slot"
expect_line "^outbox-lab: error: relay --source wal: refused: 5 unpublished rows \(the first: outbox id 1\) were committed before the slot '$PG_WAL_SLOT' streamed the outbox, .* send them with the polling relay \(relay --until-empty\)" "$ERR"

step "the 5 rows older than the slot are pending for the polling relay, not lost"
run check
expect_rc 15 "check with the 5 rows older than the slot"
expect_line '^\[check\] pending \(committed, not yet published: the relay will send them\): evt-1001, evt-1002, evt-1003, evt-1004, evt-1005$' "$OUT"
run status --json
expect_json "$OUT" '.pending == 5 and .published == 0' "status counts the 5 pending"
expect_json "$OUT" ".wal_slot.slot == \"$PG_WAL_SLOT\"" "status reads the named slot"

step "the polling relay sends the 5; then the WAL relay streams"
run relay --until-empty --quiet
expect_rc 0 "the polling relay"
run "${WAL[@]}"
expect_rc 0 "the WAL relay once the older rows are published"

step "50 loans over 50 aggregates through the named slot: confirmed"
run write 50 --workload 50
expect_rc 0 "write 50"
run "${WAL[@]}"
expect_rc 0 "the WAL relay sends the 50"
run check --expect valid=1,ok=55,lost=0,pending=0,duplicated=0
expect_rc 0 "check after the 50"
run verify
expect_line "^\[verify\] wal: slot $PG_WAL_SLOT inactive" "$OUT"

step "50 more: a WAL relay with another partitioner is refused, as the polling relay is"
run write 50 --workload 50
expect_rc 0 "write 50 more"
run -X partitioner=murmur2_random "${WAL[@]}"
expect_rc 21 "the WAL relay with another partitioner"
expect_error_line "the WAL relay with another partitioner"
expect_line "^outbox-lab: error: topic '$TOPIC' was published with partitioner=consistent_random partitions=[0-9]+ and this relay would use partitioner=murmur2_random .* pass --allow-partitioner-change" "$ERR"
run check --expect ok=55,pending=50
expect_rc 0 "the refused relay sent nothing"
run "${WAL[@]}"
expect_rc 0 "the WAL relay on the recorded partitioner"
run check --expect valid=1,ok=105,lost=0,duplicated=0,order_hazards=0,order_violations=0
expect_rc 0 "check: nothing lost, duplicated or reordered"

finish
