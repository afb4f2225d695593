#!/usr/bin/env bash
# report draws the history every other command wrote (OUTBOX_HISTORY), and a page into a missing
# folder names that folder.
# Injects: OUTBOX_HISTORY set for write, relay and report; report --html into a folder that does
#          not exist; a second relay after the first one's clean stop.
# Expects: report without --history says it reads OUTBOX_HISTORY's file and draws 2 lanes (the
#          writer and the relay); into a missing folder it exits 3 naming the folder, before any
#          read, and creates nothing. The second relay says it took the lease "after its clean
#          release by" the first (token 1), not "taking over".
. "$(dirname "$0")/lib.sh"

start_broker
export OUTBOX_HISTORY=$TMP/history.jsonl
run reset
expect_rc 0 "reset"
run write 3 --quiet
expect_rc 0 "write 3 (OUTBOX_HISTORY)"
run relay --until-empty
expect_rc 0 "relay --until-empty (OUTBOX_HISTORY)"

step "report reads OUTBOX_HISTORY"
run report --html "$TMP/page.html"
expect_rc 0 "report with OUTBOX_HISTORY"
expect_line "^\[report\] history $OUTBOX_HISTORY \(--history / OUTBOX_HISTORY\)\$" "$OUT"
expect_line '^\[report\] wrote .* 2 lanes, 3 records, verdict valid$' "$OUT"

step "a page into a missing folder names the folder"
run report --html "$TMP/out/x.html"
expect_rc 3 "report --html into a missing folder"
expect_line "^outbox-lab: error: write '$TMP/out/x.html': the folder '$TMP/out' does not exist \(create it first: mkdir -p '$TMP/out'\)\$" "$ERR"
[ ! -e "$TMP/out" ] || fail "$TMP/out was created"

step "a relay after another's clean stop says so, not 'taking over'"
unset OUTBOX_HISTORY
run write 1 --quiet
run relay --until-empty
expect_rc 0 "the second relay --until-empty"
expect_line '^\[relay\] leader: acquired the lease with token 2, after its clean release by relay-[0-9]+@[^ ]+ \(token 1\)$' "$OUT"

finish
