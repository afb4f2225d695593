#!/usr/bin/env bash
# A restart of the embedded broker is not a loss, and run.sh touches a broker only for a command
# line the lab accepted, and only that database's broker.
# Injects: through run.sh (a copy of the repository's, whose cmake is a stand-in): a reset of
#          another database; rejected command lines (-Doutbox.db with a space, --db :memory:, an
#          unknown option); a reset of a garbage file and of a directory; `./run.sh stop-broker`;
#          kill -9 of the broker process.
# Expects: one broker per database: database B's reset and relay leave database A's broker (same
#          PID) and its records alone, and A still checks valid; a rejected command line exits 2
#          and neither stops nor starts a broker; a failed reset (garbage file, directory) stops
#          no broker; after stop-broker and after kill -9 of the broker, `check` and `verify` on
#          A say "the embedded broker was restarted after these were published (it keeps records
#          in memory); rerun from reset", exit 16 (cannot judge), and never say lost or INVALID.
#          The same for rows batch-loop marked, and for verify on a topic the new broker does not
#          have (not exit 8 "does not exist": the restart took it). After a reset A checks valid again on the new
#          broker. A restart with everything sent again to the new broker: check valid with a
#          note that the counts miss what the old broker held; an event marked after the restart
#          and never sent: cannot judge (16), never lost.
. "$(dirname "$0")/lib.sh"

fake_repo=$TMP/repo
mkdir -p "$fake_repo/scripts" "$fake_repo/build" "$TMP/fake-bin"
cp "$REPO_DIR/run.sh" "$fake_repo/run.sh"
cp "$REPO_DIR/scripts/wait-until.sh" "$fake_repo/scripts/"
ln -s "$(realpath "$LAB_BIN")" "$fake_repo/build/outbox-lab"
: >"$fake_repo/build/CMakeCache.txt"
printf '#!/bin/sh\nexit 0\n' >"$TMP/fake-bin/cmake"
chmod +x "$TMP/fake-bin/cmake"
STATE=$TMP/run-sh-state

# run_sh ARGS...: the copy's run.sh with its own state dir; stdout, stderr, exit code as `run`.
run_sh() {
  RUNS=$((RUNS + 1))
  OUT=$TMP/run-$RUNS.out
  ERR=${OUT%.out}.err
  echo "\$ ./run.sh $*"
  PATH=$TMP/fake-bin:$PATH OUTBOX_LAB_STATE=$STATE timeout -k 5 60 \
    "$fake_repo/run.sh" "$@" </dev/null >"$OUT" 2>"$ERR"
  RC=$?
  cat "$OUT"
  sed 's/^/  (stderr) /' "$ERR"
  [ "$RC" -eq 0 ] || echo "  (exit $RC)"
}

# broker_pid DB: the PID of DB's embedded broker per `./run.sh broker-status`, or empty.
broker_pid() {
  local id
  id=$(realpath -m -- "$1")
  PATH=$TMP/fake-bin:$PATH OUTBOX_LAB_STATE=$STATE "$fake_repo/run.sh" broker-status 2>/dev/null |
    sed -n "s|^running: db=$id bootstrap=[^ ]* pid=\([0-9]*\) .*|\1|p"
}

# remember_broker DB: its broker is stopped at the end, whatever happens.
remember_broker() {
  local pid
  pid=$(broker_pid "$1")
  [ -n "$pid" ] && PIDS+=("$pid")
  echo "$pid"
}

# expect_cannot_judge WHAT: the last check/verify said the broker restarted, exit 16, never lost.
expect_cannot_judge() {
  expect_rc 16 "$1"
  expect_line 'the embedded broker was restarted after these were published \(it keeps records in memory\); rerun from reset' "$OUT"
  expect_no_line 'lost for good|INVALID|^\[check\] lost:|^\[verify\] lost' "$OUT"
}

A=$TMP/a.db
B=$TMP/b.db

step "database A: reset, write 3, relay, check valid"
run_sh "-Doutbox.db=$A" OutboxLab reset
expect_rc 0 "reset A"
run_sh "-Doutbox.db=$A" OutboxLab write 3 --quiet
run_sh "-Doutbox.db=$A" OutboxLab relay --until-empty
expect_rc 0 "relay A"
run_sh "-Doutbox.db=$A" OutboxLab check
expect_rc 0 "check A"
pid_a=$(remember_broker "$A")
[ -n "$pid_a" ] || die "no broker runs for $A"
echo "broker of A: pid $pid_a"

step "a reset of database B leaves A's broker and records alone"
run_sh "-Doutbox.db=$B" OutboxLab reset
expect_rc 0 "reset B"
run_sh "-Doutbox.db=$B" OutboxLab write 2 --quiet
run_sh "-Doutbox.db=$B" OutboxLab relay --until-empty
expect_rc 0 "relay B"
remember_broker "$B" >/dev/null
run_sh "-Doutbox.db=$B" OutboxLab reset
expect_rc 0 "reset B again (stops B's broker only)"
expect_eq "$pid_a" "$(broker_pid "$A")" "A's broker PID after B's resets"
run_sh "-Doutbox.db=$A" OutboxLab check
expect_rc 0 "check A after B's resets"

step "rejected command lines and failed resets touch no broker"
run_sh -Doutbox.db "$A" OutboxLab reset
expect_rc 2 "-Doutbox.db with a space"
run_sh --db :memory: reset
expect_rc 2 "--db :memory: reset"
run_sh "-Doutbox.db=$A" OutboxLab relay --until-empty --no-such-option
expect_rc 2 "relay with an unknown option"
head -c 4096 /dev/urandom >"$TMP/garbage.db"
run_sh "-Doutbox.db=$TMP/garbage.db" OutboxLab reset
[ "$RC" -ne 0 ] || fail "reset of a garbage file succeeded"
mkdir -p "$TMP/a-directory"
run_sh "-Doutbox.db=$TMP/a-directory" OutboxLab reset
[ "$RC" -ne 0 ] || fail "reset of a directory succeeded"
run_sh "-Doutbox.db=$TMP/c.db" OutboxLab verify --no-such-option
expect_rc 2 "verify with an unknown option"
expect_eq "" "$(broker_pid "$TMP/c.db")" "a broker started for a rejected verify"
expect_eq "$pid_a" "$(broker_pid "$A")" "A's broker PID after the rejected and failed commands"
run_sh "-Doutbox.db=$A" OutboxLab check
expect_rc 0 "check A after the rejected and failed commands"

step "stop-broker: A's records went with it; check and verify cannot judge, never lost"
run_sh stop-broker
expect_rc 0 "stop-broker"
run_sh "-Doutbox.db=$A" OutboxLab check
expect_cannot_judge "check A after stop-broker"
remember_broker "$A" >/dev/null
run_sh "-Doutbox.db=$A" OutboxLab verify
expect_cannot_judge "verify A after stop-broker"
run_sh "-Doutbox.db=$A" OutboxLab check --json
expect_json "$OUT" '.verdict == "cannot-judge" and (.restart_unknown | length) == 3 and (.lost | length) == 0' "check --json after stop-broker"

step "kill -9 of the broker: the same"
run_sh "-Doutbox.db=$A" OutboxLab reset
run_sh "-Doutbox.db=$A" OutboxLab write 3 --quiet
run_sh "-Doutbox.db=$A" OutboxLab relay --until-empty
run_sh "-Doutbox.db=$A" OutboxLab check
expect_rc 0 "check A on a fresh run"
pid_a=$(remember_broker "$A")
echo "\$ kill -9 $pid_a  # A's broker"
kill -9 "$pid_a"
wait_until 10 "broker $pid_a still alive after kill -9" process_gone "$pid_a"
run_sh "-Doutbox.db=$A" OutboxLab check
expect_cannot_judge "check A after kill -9 of its broker"
remember_broker "$A" >/dev/null

step "batch-loop's marks too: after stop-broker, cannot judge, never lost"
run_sh "-Doutbox.db=$A" OutboxLab reset
run_sh "-Doutbox.db=$A" OutboxLab write 3 --quiet
run_sh "-Doutbox.db=$A" OutboxLab batch-loop
expect_rc 0 "batch-loop A"
run_sh "-Doutbox.db=$A" OutboxLab check
expect_rc 0 "check A after batch-loop"
remember_broker "$A" >/dev/null
run_sh stop-broker
run_sh "-Doutbox.db=$A" OutboxLab check
expect_cannot_judge "check A after batch-loop and stop-broker"
remember_broker "$A" >/dev/null

step "a topic of the class's own (--topic): after stop-broker the new broker lacks it; still 16"
run_sh "-Doutbox.db=$A" OutboxLab reset
run_sh "-Doutbox.db=$A" OutboxLab write 2 --quiet
run_sh "-Doutbox.db=$A" OutboxLab --topic class-topic relay --until-empty
expect_rc 0 "relay A to class-topic"
remember_broker "$A" >/dev/null
run_sh stop-broker
run_sh "-Doutbox.db=$A" OutboxLab --topic class-topic verify
expect_cannot_judge "verify --topic class-topic after stop-broker"
remember_broker "$A" >/dev/null

step "a restart between the sends: everything sent again, a note; a late mark missing: 16"
run_sh "-Doutbox.db=$A" OutboxLab reset
run_sh "-Doutbox.db=$A" OutboxLab write 3 --quiet
run_sh "-Doutbox.db=$A" OutboxLab relay --until-empty
remember_broker "$A" >/dev/null
run_sh stop-broker
# The next relay starts a new broker: all three are sent again (their marks cleared by hand, as
# a relay killed between ack and mark would leave them).
sqlite3 "$A" "UPDATE outbox SET published = 0, published_at = NULL" || die "sqlite3 update"
run_sh "-Doutbox.db=$A" OutboxLab relay --until-empty
expect_rc 0 "relay A on the new broker"
remember_broker "$A" >/dev/null
run_sh "-Doutbox.db=$A" OutboxLab check
expect_rc 0 "check A: nothing missing"
expect_line '^\[check\] note: the embedded broker was restarted during this run' "$OUT"
# A row marked by hand after the restart, never sent: the checker cannot tell it from one the
# restart took (a relay paused between ack and mark across the restart marks late too): 16.
run_sh "-Doutbox.db=$A" OutboxLab write 1 --quiet
sqlite3 "$A" "UPDATE outbox SET published = 1, published_at = (SELECT MAX(noted_at) FROM outbox_broker) + 1000 WHERE published = 0" ||
  die "sqlite3 update"
run_sh "-Doutbox.db=$A" OutboxLab check --json
expect_rc 16 "check A with an event marked after the restart and never sent"
expect_json "$OUT" '.restart_unknown == ["evt-1004"] and .lost == [] and .ok == 3' "check --json: evt-1004 cannot be judged"

step "from reset, the lesson works again"
run_sh "-Doutbox.db=$A" OutboxLab reset
run_sh "-Doutbox.db=$A" OutboxLab write 2 --quiet
run_sh "-Doutbox.db=$A" OutboxLab relay --until-empty
run_sh "-Doutbox.db=$A" OutboxLab check
expect_rc 0 "check A after reset"
remember_broker "$A" >/dev/null
run_sh stop-broker

finish
