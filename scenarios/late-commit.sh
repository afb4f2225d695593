#!/usr/bin/env bash
# A commit killed in flight is decided after the kill: a count read just after it is not final.
# Injects: a `write` killed by SIGKILL inside its COMMIT, after SQLite wrote the transaction's
#          frames, commit frame included, to the -wal and before it pointed the -shm index at
#          them (failpoint vfs.sync.wal=kill under --vfs powerloss: the -wal's sync at commit,
#          synchronous=full), while another process (`write-hold`, at its HOLD line) keeps the
#          database open, so the -shm index stays as it was.
# Expects: the killed writer never said it committed. (a) With the other process still open,
#          readers count 4 loans, not 5. When the other process is killed too, no connection is
#          left to close cleanly (a clean last close would checkpoint what the index shows and
#          drop the rest), and the next opener rebuilds the index from the -wal: the loan and its
#          outbox row surface, 5 and 5. (b) In a second run, a writer that starts while the
#          other process is still open counts 4 and writes its loan over the killed one's frames
#          (event evt-1005 again); the killed transaction never commits, and the count stays 5.
#          So a harness that counts the loans after a writer kill to decide how many to write
#          next may write one loan more than it meant to (the kill soak allows for it).
. "$(dirname "$0")/lib.sh"

# killed_write: `write 1 --verbose` killed at the -wal's sync inside its COMMIT.
killed_write() {
  OUTBOX_VFS=powerloss OUTBOX_FAILPOINTS='vfs.sync.wal=kill' run write 1 --verbose
  expect_eq 137 "$RC" "the writer's exit status (SIGKILL at its failpoint)"
  expect_line '^\[failpoint\] vfs\.sync\.wal KILL' "$ERR"
  expect_no_line '^\[write\] txn' "$OUT"
}

# holder_then_killed_write: 3 loans, a 4th by `write-hold` at its HOLD line (the database kept
# open), then the killed writer.
holder_then_killed_write() {
  run reset
  expect_rc 0 "reset"
  run write 3
  expect_rc 0 "write 3"
  start_hold holder write-hold 1
  killed_write
}

step "(a) the killed commit surfaces once no process holds the index"
holder_then_killed_write
run verify --no-kafka --json
expect_json "$OUT" '.business_loan == 4 and .outbox == 4' \
  "the other process open: the killed commit is not visible"
kill9 "$HOLD_PID"
run verify --no-kafka --json
expect_json "$OUT" '.business_loan == 5 and .outbox == 5' \
  "every process gone: the killed commit surfaced, loan and outbox row together"

step "(b) a writer that starts while the index is held writes over the killed commit"
holder_then_killed_write
run write 1 --verbose
expect_rc 0 "the next write"
expect_line '^\[write\] txn i=5 .*event=evt-1005 committed' "$OUT"
kill9 "$HOLD_PID"
run verify --no-kafka --json
expect_json "$OUT" '.business_loan == 5 and .outbox == 5' \
  "the killed commit was overwritten, never committed"

finish
