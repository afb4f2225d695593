#!/usr/bin/env bash
# Real Kafka: records a read_committed reader cannot reach yet are not lost.
# A read_committed reader stops at a partition's last stable offset: an open transaction holds
# back every record after its first one, this run's too, until the transaction ends (a producer
# killed mid-transaction: until transaction.timeout.ms aborts it). The embedded broker has no
# last stable offset, so this runs on real Kafka only.
# Injects: 5 loans; relay --exactly-once --batch-size 3 (transaction timeout 60 s) held at
#          relay.txn_before_commit and killed with kill -9: its transaction stays open; then the
#          at-least-once relay publishes all 5 after it (on the suite's broker, ctest's
#          real-kafka.real-kafka-open-transaction).
# Expects: check (read_committed, the default) does not call the 5 lost: it exits 8 with the line
#          naming the open transaction and --isolation read_uncommitted; check --isolation
#          read_uncommitted is valid (ok=5; the killed transaction's 3 records are duplicates).
#          An exactly-once restart on the same database aborts its own dead transaction and runs.
#          Then another outbox on the same topic leaves its own transaction open the same way: an
#          exactly-once relay of the first refuses to recover (it would read the shared
#          relay-state topic only up to that transaction and re-send what its own committed
#          transactions carried), naming the offsets held back.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

[ -n "$EXTERNAL_BROKERS" ] || die "needs real Kafka: run it through scripts/with-real-kafka.sh (ctest -L real-kafka)"
start_broker

step "reset, write 5 loans"
run reset
expect_rc 0 "reset"
run write 5 --quiet
expect_rc 0 "write 5"

step "an exactly-once relay killed inside its transaction: the transaction stays open"
OUTBOX_FAILPOINTS=relay.txn_before_commit=hold start_hold txn-relay \
  relay --exactly-once --batch-size 3 --transaction-timeout 60s
kill9 "$HOLD_PID"

step "the at-least-once relay publishes all 5, after the open transaction's records"
run relay --until-empty --quiet
expect_rc 0 "relay --until-empty"

step "check at read_committed: the records past the open transaction are not read, and not lost"
run check --read-timeout 3s
expect_rc 8 "check while another producer's transaction is open"
expect_line 'an open transaction holds offsets [0-9]+\.\.[0-9]+ back from read_committed readers' "$ERR"
expect_line 'pass --isolation read_uncommitted' "$ERR"
expect_no_line 'lost|INVALID' "$OUT"

step "check at read_uncommitted reads them: valid"
run check --isolation read_uncommitted
expect_rc 0 "check --isolation read_uncommitted"
expect_line '^\[check\] ok=5 lost=0 ' "$OUT"

step "the killed relay's own transactional.id: a restart aborts its open transaction and runs"
run write 1 --quiet
run relay --exactly-once --until-empty --quiet --transaction-timeout 60s
expect_rc 0 "relay --exactly-once after its own producer was killed inside a transaction"

step "another outbox on the same topic: its exactly-once relay killed inside a transaction"
# Its transactional.id is its own, so the next relay's init_transactions cannot abort this
# transaction: it holds back the shared relay-state topic too.
DB_MAIN=$DB
DB=$TMP/other-outbox.db
run reset
run write 3 --quiet
OUTBOX_FAILPOINTS=relay.txn_before_commit=hold start_hold other-txn-relay \
  relay --exactly-once --transaction-timeout 60s
kill9 "$HOLD_PID"

step "an exactly-once relay's recovery refuses to read less of the relay-state topic than there is"
DB=$DB_MAIN
run write 2 --quiet
run relay --exactly-once --until-empty --transaction-timeout 60s
[ "$RC" -ne 0 ] || fail "the exactly-once relay started its recovery past another producer's open transaction"
cat "$OUT" "$ERR" >"$TMP/recovery.txt"
expect_line "another producer's open transaction holds offsets [0-9]+\.\.[0-9]+ of it back" "$TMP/recovery.txt"
expect_no_line '^\[relay\] exactly-once recovery: ' "$OUT"

finish
