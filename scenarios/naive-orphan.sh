#!/usr/bin/env bash
# Chapter 7.1, "先看反例：孤儿业务行" — the dual write done wrong.
# Injects: kill -9 of naive-hold after it committed business row L-2001 (no outbox row) and before
#          it sent anything to Kafka.
# Expects: the orphan — business_loan=1, outbox=0, and nothing on the topic (kafka_records=0):
#          no table and no record remembers that L-2001's event was never sent. verify ends with
#          the sentence that says so ("its event is lost for good"), in English and in Chinese.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

start_broker

step "reset: empty business_loan and outbox tables"
run reset
expect_rc 0 "reset"

step "naive-hold: commit the business row, HOLD before send"
start_hold naive naive-hold
expect_line '^\[naive\] business row L-2001 committed; HOLD before send; kill -9 '"$HOLD_PID\$" "$HOLD_LOG"
kill9 "$HOLD_PID"

step "verify: the business row survived, its event exists nowhere"
expect_verify business=1,outbox=0,published=0,unpublished=0,kafka_records=0,kafka_distinct=0
expect_line '^\[verify\] business_loan=1 outbox=0 published=0 unpublished=0$' "$OUT"
expect_line '^\[verify\] a loan committed without an outbox row: its event is lost for good$' "$OUT"
expect_line '^\[verify\] lost before the outbox \(a loan committed without an outbox row: no event to send, so not in lost= above\): 1$' "$OUT"
run verify --lang zh
expect_rc 0 "verify --lang zh"
expect_line '^\[verify\] 有业务行、无事件：1 笔借阅提交时没有 outbox 行，它的事件永远丢失$' "$OUT"

finish
