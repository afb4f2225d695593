#!/usr/bin/env bash
# A corrupted database file gets one message from every command: it is corrupt, and how to recover.
# Injects: a lab database with 300 loans, then 4 KiB of random bytes over its pages 3 and 4 (the
#          tables' b-tree pages; the header page stays, so SQLite still opens the file).
# Expects: verify (even --no-kafka) runs a quick integrity check and exits 5 with
#          "database 'F' is corrupt (...): restore it from a backup, or see the damage with
#          `sqlite3 'F' 'PRAGMA integrity_check'` ..."; check reports the damage as corrupt (not
#          as a power loss) and is INVALID (exit 1); every other command that fails on it (relay,
#          publish, status, write) exits 5 with the same message and never quotes SQL.
. "$(dirname "$0")/lib.sh"

start_broker
run reset
expect_rc 0 "reset"
run write 300 --quiet
expect_rc 0 "write 300"
# Stop-the-world copy: no process holds the file now; the WAL is checkpointed into it first.
sqlite3 "$DB" 'PRAGMA wal_checkpoint(TRUNCATE);' >/dev/null || die "checkpoint failed"
page_size=$(sqlite3 "$DB" 'PRAGMA page_size;')
echo "\$ dd if=/dev/urandom of=$DB bs=$page_size seek=2 count=2 conv=notrunc  # pages 3 and 4"
dd if=/dev/urandom of="$DB" bs="$page_size" seek=2 count=2 conv=notrunc 2>/dev/null || die "dd failed"

corrupt_re="^outbox-lab: error: database '$DB' is corrupt \\(.+\\): restore it from a backup, or see the damage with \`sqlite3 '$DB' 'PRAGMA integrity_check'\`"

step "verify runs a quick integrity check"
run verify --no-kafka
expect_rc 5 "verify --no-kafka on a corrupt file"
expect_line "$corrupt_re" "$ERR"
run verify
expect_rc 5 "verify on a corrupt file"

step "check calls it corrupt, not power loss"
run check
expect_rc 1 "check on a corrupt file"
expect_line '^\[check\] corrupt: the database file is corrupt \(.+\): restore it from a backup' "$OUT"
expect_no_line 'power loss' "$OUT"

step "every other command: the same message or none, never SQL"
for args in "relay --until-empty" "publish 5" "status" "write 1 --quiet"; do
  # shellcheck disable=SC2086  # split the words of args on purpose
  run $args
  if [ "$RC" -ne 0 ]; then
    expect_rc 5 "$args on a corrupt file"
    expect_line "$corrupt_re" "$ERR"
  fi
  expect_no_line "execute '|prepare '|SELECT |UPDATE |INSERT " "$ERR"
done

finish
