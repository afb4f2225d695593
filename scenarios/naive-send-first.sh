#!/usr/bin/env bash
# Chapter 7.1, the dual-write table's second row: "先发消息 — 发送后、写库前 — 下游收到一个库里不存在的
# 借阅" — send first, then write, done wrong.
# Injects: kill -9 of naive-send-first-hold after the broker acknowledged LoanCreated evt-4001 for
#          loan L-4001 and before the database write.
# Expects: a phantom: Kafka has exactly one record, evt-4001, and no table has L-4001 or its event
#          (business=0, outbox=0). check reports exactly one phantom, evt-4001, nothing lost, and
#          calls the run INVALID (exit 1).
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

start_broker

step "reset: empty business_loan and outbox tables"
run reset
expect_rc 0 "reset"

step "naive-send-first-hold: send evt-4001, wait for the ack, HOLD before the database write"
start_hold naive-send-first naive-send-first-hold
expect_line '^\[naive-send-first\] sent key=evt-4001 partition=[0-9]+ offset=[0-9]+$' "$HOLD_LOG"
expect_line '^\[naive-send-first\] event evt-4001 sent, business row L-4001 NOT written; HOLD before DB write; kill -9 '"$HOLD_PID\$" "$HOLD_LOG"
kill9 "$HOLD_PID"

step "check: the event exists, the loan does not"
run check
expect_rc 1 "check (INVALID: a phantom)"
expect_line '^\[check\] business=0 outbox=0 kafka-records=1$' "$OUT"
expect_line '^\[check\] ok=0 lost=0 duplicated=0 phantom=1 atomicity=0 lost-after-mark=0 stuck=0 ' "$OUT"
expect_line '^\[check\] phantom: evt-4001$' "$OUT"
expect_line '^\[check\] INVALID$' "$OUT"
expect_verify business=0,outbox=0,published=0,unpublished=0,kafka_records=1,kafka_distinct=1,kafka_unexpected=1
expect_line '^\[verify\] business_loan=0 outbox=0 published=0 unpublished=0$' "$OUT"

finish
