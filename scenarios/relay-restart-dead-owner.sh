#!/usr/bin/env bash
# A relay restarted after kill -9 does not wait out the dead relay's lease (issue 9 §5).
# Injects: kill -9 of `relay --until-empty --batch-size 40` (default lease 30 s) held by the
#          failpoint relay.after_ack_before_mark=hold in its first batch: 40 rows claimed by
#          relay-PID@HOST, acknowledged by the broker, not marked. It runs with --pipeline 1, so
#          exactly one batch is claimed at the hold (with the default depth 2 the second batch
#          would be claimed and in flight too: relay-kill-mid-batch.sh covers that).
# Expects: before the kill, `status` shows the claim by owner (rows=40) with owner-process=alive;
#          after it, owner-process=dead. A restarted `relay --until-empty` releases the dead
#          owner's 40 rows at start (`[relay] released 40 rows claimed by dead owner ...`) and
#          drains all 100 rows in well under the 30 s lease (bounded at 10 s here, broker
#          connection included). check: valid, 0 lost, exactly the 40 held events duplicated.
#          Those relays run --coordination claims. Then the same in leader mode (the default),
#          on a fresh database and topic: status shows the leader relay-PID@HOST (token 1,
#          owner-process=alive, then dead); the restarted relay releases the dead owner's lease
#          at start (`[relay] released the leader lease (token 1) of dead owner ...`), takes it
#          with token 2 and drains the rest in under 10 s; 0 lost, the 40 held events duplicated.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

start_broker

step "reset, then write 100 loans"
run reset
expect_rc 0 "reset"
run write 100 --quiet
expect_rc 0 "write 100"

step "relay holds after its first batch's acks, before the mark; its claim shows in status"
export OUTBOX_FAILPOINTS='relay.after_ack_before_mark=hold'
start_hold relay relay --coordination claims --until-empty --batch-size 40 --pipeline 1
unset OUTBOX_FAILPOINTS
owner_re="relay-$HOLD_PID@[^ ]+"
run status
expect_rc 0 "status with a live relay's claim"
expect_line "^\[status\] claim owner=$owner_re rows=40 age-ms=[0-9]+ expires-in-ms=[0-9]+ owner-process=alive\$" "$OUT"
kill9 "$HOLD_PID"
run status --json
expect_rc 0 "status --json after the kill"
expect_json "$OUT" "(.claims | length) == 1 and .claims[0].rows == 40 and .claims[0].owner_process == \"dead\" and (.claims[0].owner | startswith(\"relay-$HOLD_PID@\"))" \
  "status names the dead owner"

step "restart: the dead owner's claims are released at once, not after the 30 s lease"
RUN_TIMEOUT_S=40 run relay --coordination claims --until-empty
expect_rc 0 "relay --until-empty after the kill"
expect_line "^\[relay\] released 40 rows claimed by dead owner $owner_re [0-9]+ ms ago\$" "$OUT"
expect_line '^\[relay\] done: .* pending=0$' "$OUT"
[ "$RUN_MS" -lt 10000 ] || fail "the restarted relay took ${RUN_MS} ms: it waited for the lease"
run check --json
expect_rc 0 "check --json"
expect_json "$OUT" '.valid == true and .lost == [] and (.duplicated | length) == 40 and .ok == 100' \
  "check after the restart: nothing lost, the held batch duplicated once"

step "leader mode: a fresh database, a leader held after its first batch's acks, then kill -9"
DB=$TMP/leader.db
TOPIC=$TOPIC.leader
run reset
expect_rc 0 "reset (leader part)"
run write 100 --quiet
expect_rc 0 "write 100 (leader part)"
export OUTBOX_FAILPOINTS='relay.after_ack_before_mark=hold'
start_hold leader relay --until-empty --batch-size 40 --pipeline 1
unset OUTBOX_FAILPOINTS
owner_re="relay-$HOLD_PID@[^ ]+"
run status
expect_rc 0 "status with a live leader"
expect_line "^\[status\] leader owner=$owner_re token=1 lease-left-ms=[0-9]+ owner-process=alive\$" "$OUT"
kill9 "$HOLD_PID"
run status --json
expect_json "$OUT" ".leader.token == 1 and .leader.owner_process == \"dead\" and (.leader.owner | startswith(\"relay-$HOLD_PID@\")) and .claimed == 0" \
  "status names the dead leader"

step "leader mode: the restart releases the dead leader's lease at once and takes token 2"
RUN_TIMEOUT_S=40 run relay --until-empty
expect_rc 0 "relay --until-empty after the kill (leader part)"
expect_line "^\[relay\] released the leader lease \(token 1\) of dead owner $owner_re\$" "$OUT"
expect_line '^\[relay\] leader: acquired the lease with token 2, taking over from relay-[0-9]+@[^ ]+ \(token 1\)$' "$OUT"
expect_line '^\[relay\] done: .* pending=0$' "$OUT"
[ "$RUN_MS" -lt 10000 ] || fail "the restarted leader took ${RUN_MS} ms: it waited for the lease"
run check --json
expect_rc 0 "check --json (leader part)"
expect_json "$OUT" '.valid == true and .lost == [] and (.duplicated | length) == 40 and .ok == 100' \
  "check after the leader's restart: nothing lost, the held batch duplicated once"

finish
