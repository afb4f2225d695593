#!/usr/bin/env bash
# A live relay in another PID namespace is never released as a dead owner.
# Injects: two relays with one host name, each PID 1 of its own PID namespace
#          (`unshare --pid --fork --mount-proc`, as two containers with host networking or two
#          hostNetwork pods): relay A (`--until-empty --batch-size 40 --pipeline 1`) held by the
#          failpoint relay.after_ack_before_mark=hold in its first batch, then relay B
#          (`--once`) started beside it. Claims mode, then leader mode (the default).
# Expects: A's owner name carries its PID namespace and incarnation (relay-1@HOST/NS/INC), and
#          status outside both namespaces says owner-process=unknown. B prints no "released"
#          line: in claims mode it sends only the 60 rows A does not hold, and A's 40 rows stay
#          claimed by A; in leader mode B does not lead (A keeps the lease, token 1) and sends
#          nothing. Skipped (exit 77) where unshare cannot make a PID namespace (not root).
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

if ! unshare --pid --fork --mount-proc true 2>/dev/null; then
  echo "SKIP $SCENARIO: unshare --pid --fork --mount-proc does not work here (it needs root)"
  FINISHED=1
  exit 77
fi

start_broker

# in_namespace NAME ARGS...: the lab as PID 1 of a new PID namespace, in the background, output in
# $TMP/NAME.log; NS_PID is unshare's PID (--kill-child: killing it kills the lab).
in_namespace() {
  local name=$1
  shift
  lab_args
  NS_LOG=$TMP/$name.log
  echo "\$ unshare --pid --fork --mount-proc outbox-lab $* &"
  : >"$NS_LOG"
  unshare --pid --fork --mount-proc --kill-child "$LAB_BIN" "${LAB_ARGS[@]}" "$@" </dev/null \
    >>"$NS_LOG" 2>&1 &
  NS_PID=$!
  PIDS+=("$NS_PID")
}

for mode in claims leader; do
  step "$mode mode: reset, write 100 loans, relay A holds in its own PID namespace"
  DB=$TMP/$mode.db
  TOPIC=v2c7.outbox.$mode
  run reset
  expect_rc 0 "reset"
  run write 100 --quiet
  expect_rc 0 "write 100"
  export OUTBOX_FAILPOINTS='relay.after_ack_before_mark=hold'
  in_namespace "a-$mode" relay --coordination "$mode" --until-empty --batch-size 40 --pipeline 1
  unset OUTBOX_FAILPOINTS
  A_PID=$NS_PID
  A_LOG=$NS_LOG
  wait_for 30 "$A_PID" "HOLD line of relay A" _has_line 'HOLD' "$A_LOG" || die "relay A never held"
  cat "$A_LOG"
  expect_line '; kill -9 1$' "$A_LOG"  # PID 1 of its namespace
  owner_re='relay-1@[^ /]+/[0-9]+/[0-9a-f]{16}'
  run status
  expect_rc 0 "status with relay A holding"
  if [ "$mode" = claims ]; then
    expect_line "^\[status\] claim owner=$owner_re rows=40 age-ms=[0-9]+ expires-in-ms=[0-9]+ owner-process=unknown\$" "$OUT"
  else
    expect_line "^\[status\] leader owner=$owner_re token=1 lease-left-ms=[0-9]+ owner-process=unknown\$" "$OUT"
  fi

  step "$mode mode: relay B, PID 1 of another namespace, leaves A's claims and lease alone"
  in_namespace "b-$mode" relay --coordination "$mode" --once --batch-size 100
  B_PID=$NS_PID
  wait_exit "$B_PID" 30 "relay B"
  cat "$NS_LOG"
  expect_eq 0 "$BG_RC" "relay B's exit code"
  expect_no_line 'released' "$NS_LOG"
  run status
  if [ "$mode" = claims ]; then
    expect_line '^\[relay\] batch token=2 claimed=60 acked=60 ' "$NS_LOG"
    expect_line "^\[status\] claim owner=$owner_re rows=40 " "$OUT"
  else
    expect_line '^\[relay\] done: batches=0 ' "$NS_LOG"
    expect_line "^\[status\] leader owner=$owner_re token=1 " "$OUT"
  fi
  echo "\$ kill -9 $A_PID  # unshare --kill-child: relay A dies with it"
  kill -9 "$A_PID"
  wait "$A_PID" 2>/dev/null
done

finish
