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

finish
