#!/usr/bin/env bash
# Issue 12, "the classic PostgreSQL outbox bug": ids come from a sequence, so transactions commit
# out of id order. Writer A takes outbox id 1 and holds its transaction open (failpoint
# write.before_commit=pause); writer B takes id 2 and commits; only then does A commit.
# Injects: the out-of-order commit, three times: once under the production claim (--pg-claim scan,
#          the default) with one relay running across A's commit, once with one relay in leader
#          mode (--coordination leader) running across it, once under the deliberately naive
#          keyset cursor (--pg-claim naive-cursor: claim only ids above the highest one claimed).
# Expects: scan and leader: the relay publishes both events, check is valid with lost=0 (the
#          leader finds id 1 on its next pass from id 0, after its cursor passed id 2). naive-cursor: the
#          relay publishes evt-1002, moves its offset to 2, and skips evt-1001 for ever; check
#          reports lost=1 (evt-1001 is at or below the offset that says "published", and the topic
#          never saw it) and exits 1 (invalid).
# Skipped (exit 77) only when OUTBOX_PG_URL is unset; scripts/test.sh sets it.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

use_postgres
start_broker

# out_of_order: writer A (id 1) holds, writer B (id 2) commits; A is left paused, its PID in A_PID.
out_of_order() {
  echo "(OUTBOX_FAILPOINTS='write.before_commit=pause')"
  OUTBOX_FAILPOINTS='write.before_commit=pause' start_bg writer-a write 1
  A_PID=$BG_PID A_LOG=$BG_LOG
  wait_paused "$A_PID" "$A_LOG" write.before_commit
  run write 1
  expect_rc 0 "writer B: write 1"
  expect_line '^\[write\] committed=1$' "$OUT"
}

step "scan (the production claim): one relay runs across writer A's late commit"
run reset
expect_rc 0 "reset"
out_of_order
start_bg relay-scan relay --json --idle-max 100ms
relay_pid=$BG_PID relay_log=$BG_LOG
wait_for 30 "$relay_pid" "the relay's batch with evt-1002" _has_lines 1 '"report":"batch"' "$relay_log" ||
  die "the scan relay never published writer B's row"
release "$A_PID"
wait_exit "$A_PID" 30 "writer A"
expect_eq 0 "$BG_RC" "exit code of writer A"
wait_for 30 "$relay_pid" "the relay's batch with evt-1001" _has_lines 2 '"report":"batch"' "$relay_log" ||
  fail "the scan relay never published writer A's late row"
kill -TERM "$relay_pid"
wait_exit "$relay_pid" 30 "the scan relay"
expect_eq 0 "$BG_RC" "exit code of the scan relay after SIGTERM"
sed 's/^/  | /' "$relay_log"
expect_json "$relay_log" '.report == "final" and .marked == 2 and .pending == 0' "scan relay: both rows marked"
expect_check "valid=1,ok=2,lost=0,duplicated=0,stuck=0,business_rows=2,outbox_rows=2"

step "leader mode: one leader runs across writer A's late commit"
# The leader reads pages past a keyset cursor of its own (no claims): once its cursor passed id 2,
# id 1 is found by its next pass from id 0, which starts when a read past the cursor finds nothing.
run reset
expect_rc 0 "reset"
out_of_order
start_bg relay-leader relay --coordination leader --json --idle-max 100ms
relay_pid=$BG_PID relay_log=$BG_LOG
wait_for 30 "$relay_pid" "the leader's batch with evt-1002" _has_lines 1 '"report":"batch"' "$relay_log" ||
  die "the leader never published writer B's row"
release "$A_PID"
wait_exit "$A_PID" 30 "writer A"
expect_eq 0 "$BG_RC" "exit code of writer A"
wait_for 30 "$relay_pid" "the leader's batch with evt-1001" _has_lines 2 '"report":"batch"' "$relay_log" ||
  fail "the leader never published writer A's late row"
kill -TERM "$relay_pid"
wait_exit "$relay_pid" 30 "the leader"
expect_eq 0 "$BG_RC" "exit code of the leader after SIGTERM"
sed 's/^/  | /' "$relay_log"
expect_json "$relay_log" '.report == "final" and .marked == 2 and .fenced == 0 and .pending == 0' "leader: both rows marked"
expect_check "valid=1,ok=2,lost=0,duplicated=0,stuck=0,business_rows=2,outbox_rows=2"

step "naive-cursor (the classic bug): the same commits, the relay keeps an offset"
run reset
expect_rc 0 "reset"
out_of_order
run relay --until-empty --pg-claim naive-cursor
expect_rc 0 "naive relay while A holds"
expect_line '^\[relay\] done: batches=1 acked=1 marked=1 ' "$OUT"
release "$A_PID"
wait_exit "$A_PID" 30 "writer A"
expect_eq 0 "$BG_RC" "exit code of writer A"
run relay --until-empty --pg-claim naive-cursor
expect_rc 0 "naive relay after A's commit"
expect_line '^\[relay\] done: batches=0 acked=0 marked=0 ' "$OUT"
run check
expect_rc 1 "check (invalid: an event is lost)"
expect_line '^\[check\] ok=1 lost=1 ' "$OUT"
expect_line 'evt-1001' "$OUT"
expect_check "valid=0,ok=1,lost=1,business_rows=2,outbox_rows=2"

step "the fix on the same rows: the scan relay sends what the naive one skipped"
run relay --until-empty
expect_rc 0 "scan relay"
expect_line '^\[relay\] done: batches=1 acked=1 marked=1 ' "$OUT"
expect_check "valid=1,ok=2,lost=0,business_rows=2,outbox_rows=2"

finish
