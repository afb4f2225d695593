#!/usr/bin/env bash
# check never reports a loss that did not happen (issue 15, section 1).
# Injects: (1) kill -9 of publish-hold 3 after three acked sends, before any mark: five committed
#          outbox rows, none published; (2) a second database on the same broker and topic whose
#          relay publishes the same event ids (evt-1001..) under another run id; (3) 50,000 events
#          through the relay, more than the embedded broker keeps per partition (5 MiB), so it
#          drops the oldest records and the topic no longer starts at offset 0 (the relay sends
#          uncompressed batches, the default, said explicitly: -X compression.type=lz4 would fit
#          them all).
# Expects: (1) check says pending, not lost: exit 15 "not drained yet: run the relay, then check",
#          5 pending, 0 lost; `check --drain` runs the relay to the end and judges valid (exit 0)
#          with the 3 re-sent duplicates. (2) verify and check count only their own run's records
#          (8) and report the other run's 5 apart; no duplicate is invented. Under a --topic
#          that holds only another run's records, both stop with exit 8 "check --topic" instead
#          of calling every event lost. (3) check reads the
#          log start: the events that may have been dropped are "cannot judge (broker retention)",
#          never lost (exit 16, verify too); the id list is cut at 10 with a count, `--ids` prints
#          them all. Rows marked published by hand past what was dropped: check INVALID with
#          lost_beyond_retention = their excess, and verify's closing line says at least that many
#          are lost.
#          (4) write 10, relay, purge --older-than 0s: check valid (ok=10, no phantom, no
#          atomicity finding) and verify says nothing is lost.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

readonly kNotDrained=15 kCannotJudge=16

start_broker

step "five loans written, three sent and acked, the sender killed before any mark"
run reset
expect_rc 0 "reset"
start_hold write write-hold 5
kill9 "$HOLD_PID"
start_hold publish-hold publish-hold 3
kill9 "$HOLD_PID"

step "check: committed rows are pending, not lost"
run check
expect_rc "$kNotDrained" "check with five unpublished rows"
expect_line '^\[check\] ok=3 lost=0 duplicated=0 phantom=0 atomicity=0 lost-after-mark=0 stuck=5 order-violations=0$' "$OUT"
expect_line '^\[check\] pending=5 parked=0 cannot-judge=0$' "$OUT"
expect_line '^\[check\] pending \(committed, not yet published: the relay will send them\): evt-1001, evt-1002, evt-1003, evt-1004, evt-1005$' "$OUT"
expect_no_line '^\[check\] lost:' "$OUT"
expect_line '^\[check\] not drained yet: run the relay, then check$' "$OUT"
run check --json
expect_rc "$kNotDrained" "check --json with five unpublished rows"
expect_json "$OUT" '.verdict == "not-drained" and .valid == false and .lost == [] and (.pending | length) == 5 and .ok == 3' \
  "check --json: not drained, five pending, nothing lost"
run verify
expect_rc 0 "verify after publish-hold"
expect_line '^\[verify\] 3 records are in Kafka but not marked; they will be sent again \(at-least-once\); 2 more intents are durable, not sent yet$' "$OUT"

step "check --drain: the relay runs to the end first, then the judgement"
run check --drain
expect_rc 0 "check --drain"
expect_line '^\[check\] drain: the relay ran until empty: batches=[0-9]+ acked=5 marked=5 failed=0 parked=0$' "$OUT"
expect_line '^\[check\] ok=5 lost=0 duplicated=3 phantom=0 atomicity=0 lost-after-mark=0 stuck=0 order-violations=0$' "$OUT"
expect_line '^\[check\] duplicated: evt-1001 x2, evt-1002 x2, evt-1003 x2 \(expected: at-least-once\)$' "$OUT"
expect_line '^\[check\] valid$' "$OUT"
run check --lang zh
expect_rc 0 "check --lang zh"
expect_line '^\[check\] 有效：每个已提交的事件都在 Kafka，没有丢失$' "$OUT"

step "another database on the same topic, with the same event ids: counted apart"
FIRST_DB=$DB
DB=$TMP/other.db
run reset
expect_rc 0 "reset (the other database)"
run write 5 --quiet
expect_rc 0 "write 5 (the other database)"
run relay --until-empty --quiet
expect_rc 0 "relay --until-empty (the other database)"
run check --json
expect_rc 0 "check of the other database"
expect_json "$OUT" '.valid and .kafka_records == 5 and .other_run_records == 8 and .duplicated == {}' \
  "the other database: its own 5 records, the first run's 8 apart"
DB=$FIRST_DB
run verify --expect kafka_records=8,kafka_distinct=5,kafka_duplicates=3,kafka_missing=0,kafka_unexpected=0
expect_rc 0 "verify of the first database, after the other's records"
expect_line "^\[verify\] other runs' records on the topic: 5 \(another database or an earlier reset; not counted\)$" "$OUT"
expect_line '^\[verify\] duplicate evt-1001 x2 \(expected: at-least-once\)$' "$OUT"
expect_line '^duplicated ids +evt-1001 x2, evt-1002 x2, evt-1003 x2$' "$OUT"
run check --expect valid=1,kafka_records=8,duplicated=3,other_run_records=5
expect_rc 0 "check --expect of the first database"

step "a mistyped --topic that other runs use: check --topic, not 'lost'"
# The other database's run on a topic of its own: records there, none of the first run's.
DB=$TMP/other.db
saved_topic=$TOPIC
TOPIC=$saved_topic-other
run reset
run write 2 --quiet
run relay --until-empty --quiet
expect_rc 0 "relay --until-empty (the other database, on $TOPIC)"
DB=$FIRST_DB
for sub in check verify; do
  run "$sub"
  expect_rc 8 "$sub --topic $TOPIC of the first database"
  expect_line "^outbox-lab: error: none of the 2 records on topic '$TOPIC' on .* is this run's, yet 5 outbox rows are marked published; check --topic and --brokers" "$ERR"
  expect_no_line "INVALID|lost for good" "$OUT"
done
TOPIC=$saved_topic

step "more than the embedded broker keeps: cannot judge, never lost"
DB=$TMP/big.db
BIG=50000
run reset
expect_rc 0 "reset (big)"
# synchronous=off only for speed: a kill -9 cannot undo a commit at any setting, and nothing
# here is killed.
run --synchronous off write "$BIG" --quiet
expect_rc 0 "write $BIG"
# Uncompressed (the lab's default, spelled out so that a change of default cannot hide it): 50,000
# events overflow the embedded broker's 5 MiB per partition, which lz4-compressed they do not.
RUN_TIMEOUT_S=300 run -X compression.type=none relay --until-empty --quiet
expect_rc 0 "relay --until-empty ($BIG)"
run check --json >/dev/null  # every id: not echoed
expect_rc "$kCannotJudge" "check --json after the broker dropped records"
# The dropped offsets also held the 13 records of the two earlier runs on this topic, so the
# unjudgeable events are at most the log start; every event is either in Kafka or unjudgeable.
expect_json "$OUT" ".verdict == \"cannot-judge\" and .lost == [] and .lost_after_mark == [] and .partitions[0].log_start > 0 and (.retention_unknown | length) > 0 and (.retention_unknown | length) <= .partitions[0].log_start and .ok + (.retention_unknown | length) == $BIG" \
  "check --json: every event either in Kafka or unjudgeable, none lost"
dropped=$(jq -r '.partitions[0].log_start' "$OUT")
unjudged=$(jq -r '.retention_unknown | length' "$OUT")
echo "(check --json: log start $dropped, $unjudged published events cannot be judged, $(jq -r .ok "$OUT") ok)"
run check
expect_rc "$kCannotJudge" "check after the broker dropped records"
expect_line "^\[check\] broker retention: partition 0 starts at offset $dropped \(offsets 0\.\.$((dropped - 1)) were dropped\)$" "$OUT"
expect_line "^\[check\] ok=$((BIG - unjudged)) lost=0 duplicated=0 phantom=0 " "$OUT"
expect_line "^\[check\] cannot judge \(broker retention\): evt-1001, evt-1002, evt-1003, evt-1004, evt-1005, evt-1006, evt-1007, evt-1008, evt-1009, evt-1010, \.\.\. and $((unjudged - 10)) more \(--ids prints all\)$" "$OUT"
expect_line "^\[check\] cannot judge $unjudged published events \(broker retention\): " "$OUT"
longest=$(awk '{ if (length($0) > n) n = length($0) } END { print n }' "$OUT")
[ "$longest" -le 300 ] || fail "check printed a line of $longest characters: lists must be cut"
echo "\$ outbox-lab check --ids  # output not shown: one line of $unjudged ids"
run check --ids >/dev/null
expect_rc "$kCannotJudge" "check --ids"
expect_line "evt-$((1000 + unjudged))$" "$OUT"
expect_no_line 'more \(--ids prints all\)' "$OUT"
run verify --expect kafka_records=$((BIG - unjudged))
expect_rc "$kCannotJudge" "verify after the broker dropped records (its expectations hold)"
expect_line "^\[verify\] the broker dropped $dropped offsets \(retention\): $unjudged published events cannot be judged$" "$OUT"
expect_line "^\[verify\] the 1 expectations are not judged: some events cannot be \(exit 16\)$" "$OUT"
# A CI gate of lost=0 must not pass a run whose records the broker dropped.
run check --expect lost=0,phantom=0
expect_rc "$kCannotJudge" "check --expect lost=0,phantom=0 after the broker dropped records"
expect_line "^\[check\] the 2 expectations are not judged: the events above cannot be \(exit 16\)$" "$OUT"
expect_no_line "expectations hold" "$OUT"
# More rows marked published by hand, never sent: now more events are missing than the broker
# dropped offsets, and at least the difference never reached it.
extra=$((dropped - unjudged + 20))
sqlite3 -bail "$DB" "INSERT INTO outbox(event_id, aggregate_id, event_type, payload, published)
  SELECT 'hand-' || value, 'H-' || value, 'LoanCreated', '{}', 1 FROM generate_series(1, $extra);" ||
  die "sqlite3 could not insert the hand-marked rows"
run check --json >/dev/null
expect_rc 1 "check with more published events missing than offsets dropped"
expect_json "$OUT" ".verdict == \"invalid\" and .lost_beyond_retention == 20" \
  "check --json: 20 events lost beyond what retention explains"
run verify
expect_rc 0 "verify with events lost beyond retention (it reports, exit 0)"
expect_line "^\[verify\] at least 20 events are lost for good: " "$OUT"

step "(4) purge is routine: purged events still count as published"
DB=$TMP/purged.db
run reset
run write 10 --quiet
run relay --until-empty
expect_rc 0 "relay --until-empty of 10"
run purge --older-than 0s
expect_rc 0 "purge --older-than 0s"
# A cutoff of now keeps a row marked in that very millisecond: purge again until all are gone.
[ "$(sqlite3 "$DB" 'SELECT COUNT(*) FROM outbox')" = 0 ] || run purge --older-than 0s
run check
expect_rc 0 "check after purge"
expect_line '^\[check\] ok=10 lost=0 duplicated=0 phantom=0 atomicity=0 ' "$OUT"
run verify
expect_rc 0 "verify after purge"
expect_line '^\[verify\] business_loan=10 outbox=0 published=0 unpublished=0 archived-or-purged=10 ' "$OUT"
expect_no_line 'lost for good|phantom' "$OUT"

finish
