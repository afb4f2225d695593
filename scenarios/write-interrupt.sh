#!/usr/bin/env bash
# Ctrl-C during a long `write` says how many transactions committed, as publish and relay do.
# Injects: SIGINT (what Ctrl-C sends) to `write 100000 --verbose` once its fifth transaction
#          committed.
# Expects: write finishes the transaction in progress, prints
#          "[write] stopped on signal: committed=N of 100000 ..." and exits 0; N is at least 5 and
#          equals the loans (and outbox rows) in the database.
. "$(dirname "$0")/lib.sh"

run reset
expect_rc 0 "reset"
start_bg writer write 100000 --verbose
wait_for 30 "$BG_PID" "the fifth committed transaction" _has_line '^\[write\] txn i=5 ' "$BG_LOG" ||
  die "write did not commit 5 transactions"
echo "\$ kill -INT $BG_PID  # Ctrl-C"
kill -INT "$BG_PID"
wait_exit "$BG_PID" 30 "write after SIGINT"
expect_eq 0 "$BG_RC" "write's exit code after SIGINT"
line=$(grep '^\[write\] stopped on signal: ' "$BG_LOG")
echo "$line"
committed=$(sed -n 's/^\[write\] stopped on signal: committed=\([0-9]*\) of 100000 .*/\1/p' <<<"$line")
[ -n "$committed" ] || fail "no '[write] stopped on signal: committed=N of 100000' line"
[ "${committed:-0}" -ge 5 ] || fail "committed=$committed, expected at least 5"
run verify --no-kafka --json
expect_json "$OUT" ".business_loan == ${committed:-0} and .outbox == ${committed:-0}" "the database holds what write said it committed"

finish
