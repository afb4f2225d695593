#!/usr/bin/env bash
# Chapter 7.1's two kills with the log-based relay (relay --source wal) on PostgreSQL: the outbox's
# inserts come from a logical replication slot (pgoutput), and the mark is the slot's confirmed LSN.
# Injects: (1) kill -9 of write-hold 5 after five committed business+outbox transactions, before any
#          publish; (2) kill -9 of relay --source wal --batch-size 3 at
#          relay.wal.after_ack_before_confirm: three records acknowledged by the broker, the slot's
#          LSN not confirmed.
# Expects: the first WAL relay creates its publication and slot and sends nothing; after the second
#          kill the broker holds 3 records; the restarted relay is streamed all five commits again
#          (nothing was confirmed) and sends 5; the chapter's table: business 5, outbox 5,
#          published 5, 8 Kafka records, evt-1001/1002/1003 twice each. A second WAL relay on the
#          slot is refused (exit 24); a terminated walsender is reconnected with backoff. No UPDATE touched the
#          outbox: every row's published flag is still false. Then the polling relay on the same
#          database sends all five again (13 records: duplicates, never a loss) and the WAL relay
#          sends nothing for its marks. Then the out-of-order commit (writer A takes the smaller
#          id and commits after writer B): the slot streams B's event first (relay --json: the
#          wal-open, batch and final lines), check ok=7 lost=0.
#          Ends with three verdict lines: no published flag and no mark write, the duplicates come
#          from the ack -> LSN-confirm window, commit order.
# Skipped (exit 77) when OUTBOX_PG_URL is unset; fails with one line when the server's wal_level is
# not logical (scripts/postgres.sh starts its clusters with it; restart an older one).
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

use_postgres
start_broker

step "on an SQLite file the WAL relay refuses in one line (exit 23)"
PG_DB=$DB
DB=$TMP/sqlite.db
run reset
expect_rc 0 "reset of an SQLite file"
run relay --source wal --until-empty
expect_rc 23 "relay --source wal on SQLite"
expect_error_line "relay --source wal on SQLite"
expect_line "^outbox-lab: error: relay --source wal: refused: '.*sqlite.db' is an SQLite file" "$ERR"
DB=$PG_DB

step "reset on PostgreSQL"
run reset
expect_rc 0 "reset"

step "the WAL relay creates its publication and slot, then has nothing to send"
run relay --source wal --until-empty
expect_rc 0 "relay --source wal --until-empty on an empty outbox"
[ "$RC" -eq 23 ] && die "the server at $PG_BASE_URL does not run with wal_level=logical: restart it with scripts/postgres.sh stop; scripts/postgres.sh start"
expect_line '^\[relay\] wal: slot outbox_wal_[a-z0-9_]+ \(created\), publication outbox_wal_[a-z0-9_]+ \(created\), streaming from LSN [0-9A-F]+/[0-9A-F]+ \(walsender PID [0-9]+\)$' "$OUT"
PG_WAL_SLOT=$(sed -n 's/^\[relay\] wal: slot \([a-z0-9_]*\) .*/\1/p' "$OUT" | head -n 1)
[ -n "$PG_WAL_SLOT" ] || die "no slot name in the relay's first line"
expect_line '^\[relay\] wal done: batches=[0-9]+ transactions=0 records=0 skipped=0 reconnects=0 confirmed=' "$OUT"

step "first crash: write-hold 5, kill -9 before publishing"
start_hold write write-hold 5
for i in 1 2 3 4 5; do
  expect_line "^\[write\] txn i=$i loan=L-100$i event=evt-100$i committed business=$i outbox=$i\$" "$HOLD_LOG"
done
kill9 "$HOLD_PID"
expect_verify business=5,outbox=5,published=0,unpublished=5,kafka_records=0
expect_line '^\[verify\] wal: slot [a-z0-9_]+ inactive, confirmed LSN [0-9A-F/]+, lag [0-9]+ bytes, 5 inserts pending' "$OUT"

step "second crash: the WAL relay holds after three acks, before the LSN confirm"
LSN_BEFORE=$(psql "$DB" -tAc "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '$PG_WAL_SLOT'")
OUTBOX_FAILPOINTS=relay.wal.after_ack_before_confirm=hold start_hold relay-wal relay --source wal --batch-size 3 --linger 5s
expect_line '^\[relay\] wal: slot [a-z0-9_]+, publication [a-z0-9_]+, streaming from LSN ' "$HOLD_LOG"
expect_line '^\[failpoint\] relay.wal.after_ack_before_confirm HOLD; kill -9 ' "$HOLD_LOG"
kill9 "$HOLD_PID"
# The killed relay's walsender lets go of the slot a moment later.
wait_until 10 "the slot released after the kill" _wal_slot_inactive
expect_verify business=5,outbox=5,published=0,unpublished=5,kafka_records=3,kafka_distinct=3
expect_line '^\[verify\] wal: slot [a-z0-9_]+ inactive, confirmed LSN [0-9A-F/]+, lag [0-9]+ bytes, 5 inserts pending' "$OUT"
LSN_AFTER=$(psql "$DB" -tAc "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '$PG_WAL_SLOT'")

step "a second WAL relay while one streams the slot is refused in one line (exit 24)"
start_bg relay-first relay --source wal
wait_for 30 "$BG_PID" "the first WAL relay streaming" _has_line 'streaming from LSN' "$BG_LOG"
FIRST_PID=$BG_PID
run relay --source wal --until-empty
expect_rc 24 "a second relay --source wal on the same slot"
expect_error_line "a second relay --source wal"
expect_line "^outbox-lab: error: relay --source wal: refused: the replication slot '$PG_WAL_SLOT' is active for PID [0-9]+: another WAL relay streams it" "$ERR"
# A batch closes once nothing more has arrived, so the five may come in more than one batch.
_wal_batches_sent_five() {
  [ "$(sed -n 's/^\[relay\] wal: batch transactions=[0-9]* records=\([0-9]*\) .*/\1/p' "$1" |
    awk '{ n += $1 } END { print n + 0 }')" -ge 5 ]
}
wait_for 30 "$FIRST_PID" "the first WAL relay sending the five unconfirmed" _wal_batches_sent_five "$BG_LOG"

step "the walsender terminated: the relay reconnects with backoff and goes on"
WALSENDER=$(psql "$DB" -tAc "SELECT active_pid FROM pg_replication_slots WHERE slot_name = '$PG_WAL_SLOT'")
expect_eq 1 "$(psql "$DB" -tAc "SELECT count(*) FROM pg_terminate_backend($WALSENDER) t WHERE t")" "pg_terminate_backend of walsender $WALSENDER"
wait_for 30 "$FIRST_PID" "the WAL relay reconnected" _has_line '^\[relay\] wal: reconnected: slot' "$BG_LOG"
expect_line '^\[relay\] wal: stream lost \(stream the slot: terminating connection due to administrator command \(SQLSTATE 57P01\)\); reconnect attempt 1 in [0-9]+ ms$' "$BG_LOG"
kill -TERM "$FIRST_PID"
wait_exit "$FIRST_PID" 30 "the first WAL relay"
expect_eq 0 "$BG_RC" "relay --source wal's exit code after SIGTERM"
cat "$BG_LOG"
# Nothing was confirmed before the kill: all five commits were streamed again.
expect_line '^\[relay\] wal: batch transactions=[0-9]+ records=[0-9]+ confirmed=' "$BG_LOG"
expect_line '^\[relay\] wal stopped on signal: batches=[0-9]+ transactions=5 records=5 skipped=0 reconnects=1 ' "$BG_LOG"

wait_until 10 "the slot released after the stop" _wal_slot_inactive

step "final reconciliation: the chapter's table"
expect_verify business=5,outbox=5,published=5,unpublished=0,kafka_records=8,kafka_distinct=5,kafka_duplicates=3,kafka_missing=0,kafka_unexpected=0
expect_line '^\[verify\] wal: slot [a-z0-9_]+ inactive, confirmed LSN [0-9A-F/]+, lag [0-9]+ bytes, 0 inserts pending' "$OUT"
run status --json
expect_rc 0 "status --json"
expect_json "$OUT" '.published == 5 and .unpublished == 0 and .pending == 0 and .wal_slot.active == false and .wal_slot.pending == 0 and (.wal_slot.lag_bytes | type) == "number"' "status --json: 5 published by the slot, the slot inactive, nothing pending, its lag in bytes"
run verify --json
expect_rc 0 "verify --json"
expect_json "$OUT" '.kafka.duplicates == {"evt-1001": 2, "evt-1002": 2, "evt-1003": 2} and .kafka.records == 8 and .kafka.distinct_event_ids == 5 and .kafka.missing == [] and .kafka.unexpected == []' \
  "verify --json: exactly evt-1001, evt-1002, evt-1003 twice, 8 records of 5 events"
step "the checker judges the run by the slot too: nothing lost, the three duplicates"
run check
expect_rc 0 "check"
expect_line '^\[check\] wal: slot [a-z0-9_]+ inactive, .* 0 inserts pending' "$OUT"
expect_line '^\[check\] ok=5 lost=0 duplicated=3 phantom=0 ' "$OUT"
expect_line '^\[check\] valid$' "$OUT"

step "no mark write: every outbox row's published flag is still false"
expect_eq 5 "$(psql "$DB" -tAc 'SELECT count(*) FROM outbox WHERE NOT published')" "rows with published = false"
# Every relay process has exited, and a backend flushes its table statistics as it exits.
UPDATES=$(psql "$DB" -tAc "SELECT n_tup_upd + n_tup_del FROM pg_stat_user_tables WHERE relid = 'outbox'::regclass")
expect_eq 0 "$UPDATES" "outbox rows updated or deleted so far (pg_stat_user_tables.n_tup_upd + n_tup_del)"

step "the restarted relay has nothing left: caught up at once"
run relay --source wal --until-empty
expect_rc 0 "relay --source wal --until-empty after the drain"
expect_line '^\[relay\] wal done: batches=[0-9]+ transactions=0 records=0 ' "$OUT"

step "polling and WAL relays on one database: the polling relay sends again what the WAL relay sent"
# The WAL relay marks no row, so to the polling relay all five are unpublished: it sends them all
# again (duplicates, never a loss), and its marks reach the slot as updates, which the WAL relay
# passes over.
run relay --until-empty
expect_rc 0 "the polling relay on the WAL relay's database"
expect_line '^\[relay\] done: batches=[0-9]+ acked=5 marked=5 failed=0 parked=0 fenced=0 pending=0$' "$OUT"
expect_verify business=5,outbox=5,published=5,unpublished=0,kafka_records=13,kafka_distinct=5,kafka_missing=0
run relay --source wal --until-empty
expect_rc 0 "the WAL relay after the polling relay's marks"
expect_line '^\[relay\] wal done: batches=[0-9]+ transactions=[0-9]+ records=0 skipped=0 ' "$OUT"

step "commit order: writer A takes the smaller outbox id and commits after writer B; the slot streams B first"
echo "(OUTBOX_FAILPOINTS='write.before_commit=pause')"
OUTBOX_FAILPOINTS='write.before_commit=pause' start_bg writer-a write 1
A_PID=$BG_PID A_LOG=$BG_LOG
wait_paused "$A_PID" "$A_LOG" write.before_commit
run write 1
expect_rc 0 "writer B: write 1"
release "$A_PID"
wait_exit "$A_PID" 30 "writer A"
expect_eq 0 "$BG_RC" "exit code of writer A"
A_EVENT=$(psql "$DB" -tAc "SELECT event_id FROM outbox ORDER BY id DESC LIMIT 1 OFFSET 1")
B_EVENT=$(psql "$DB" -tAc "SELECT event_id FROM outbox ORDER BY id DESC LIMIT 1")
A_ID=$(psql "$DB" -tAc "SELECT id FROM outbox WHERE event_id = '$A_EVENT'")
B_ID=$(psql "$DB" -tAc "SELECT id FROM outbox WHERE event_id = '$B_EVENT'")
run relay --source wal --until-empty --batch-size 1 --json
expect_rc 0 "relay --source wal --until-empty --json after the out-of-order commits"
expect_eq 1 "$(json_lines "$OUT" | jq -s "[.[] | select(.report == \"wal-open\" and .slot == \"$PG_WAL_SLOT\" and .reconnect == false and .created_slot == false and (.walsender_pid > 0))] | length")" \
  "relay --json: one wal-open line for slot $PG_WAL_SLOT"
expect_eq 2 "$(json_lines "$OUT" | jq -s '[.[] | select(.report == "batch") | .records] | add')" \
  "relay --json: records over its batch lines"
expect_json "$OUT" '.report == "final" and .source == "wal" and .stopped == false and .records == 2 and .skipped == 0 and .reconnects == 0 and (.confirmed | test("^[0-9A-F]+/[0-9A-F]+$"))' \
  "relay --json: the final line"
RELAY_OUT=$OUT
run consume --with-offsets
expect_rc 0 "consume"
LAST_TWO=$(grep -o '"eventId":"[^"]*"' "$OUT" | tail -n 2 | sed 's/"eventId":"\(.*\)"/\1/' | paste -sd ' ')
if [ "$LAST_TWO" != "$B_EVENT $A_EVENT" ]; then  # what a failure needs to be understood
  echo "(the topic's last records)"; tail -n 4 "$OUT"
  echo "(the relay's lines)"; cat "$RELAY_OUT"
  psql "$DB" -c "SELECT id, event_id, aggregate_id, created_at FROM outbox ORDER BY id DESC LIMIT 3"
fi
expect_eq "$B_EVENT $A_EVENT" "$LAST_TWO" "the topic's last two records: writer B's event (id $B_ID) before writer A's (id $A_ID)"
run check
expect_rc 0 "check after the out-of-order commits"
expect_line '^\[check\] ok=7 lost=0 ' "$OUT"

step "what changed with the WAL relay (the chapter's two kills)"
echo "verdict: no published flag and no mark write: after the WAL relay's runs every row still had published=false (5 of 5) and the outbox had $UPDATES updated rows (pg_stat_user_tables); the mark is the slot's confirmed LSN"
echo "verdict: the kill between the broker's ack and the LSN confirm left the confirmed LSN at $LSN_AFTER (before the relay: $LSN_BEFORE): all 5 commits were streamed again, and the 3 acked ones (evt-1001, evt-1002, evt-1003) are the duplicates; check: 0 lost"
echo "verdict: commit order: writer A (outbox id $A_ID) committed after writer B (id $B_ID), and the slot streamed $B_EVENT before $A_EVENT: a log reader has no sequence gaps to guard"

finish
