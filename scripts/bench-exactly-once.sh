#!/usr/bin/env bash
# What relay --exactly-once costs against at-least-once, on the broker you name (real Kafka: the
# embedded broker writes no transaction markers, docs/exactly-once.md):
#
#   scripts/bench-exactly-once.sh BROKERS [EVENTS [BATCH [ROUNDS]]]
#
# Each round, for each mode in turn: a fresh outbox (reset) and a topic of its own, EVENTS loans
# written (not timed), then `relay --until-empty --batch-size BATCH` timed as a whole process
# (start-up, the exactly-once recovery read, every batch, teardown). Prints events/s per round and
# the median per mode, and the overhead of exactly-once in percent of at-least-once's median.
# Defaults: EVENTS 5000, BATCH 1000, ROUNDS 3. OUTBOX_LAB_BIN: the binary (default build/outbox-lab).
set -euo pipefail
BROKERS=${1:?usage: bench-exactly-once.sh BROKERS [EVENTS [BATCH [ROUNDS]]]}
EVENTS=${2:-5000} BATCH=${3:-1000} ROUNDS=${4:-3}
REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=${OUTBOX_LAB_BIN:-$REPO/build/outbox-lab}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

now_ns() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

declare -A RATES=()
for round in $(seq 1 "$ROUNDS"); do
  for mode in at-least-once exactly-once; do
    db=$WORK/$mode-$round.db topic=bench-eos-$$-$mode-$round
    lab=("$BIN" --db "$db" --topic "$topic" --brokers "$BROKERS")
    "${lab[@]}" reset >/dev/null
    "${lab[@]}" write "$EVENTS" --quiet >/dev/null
    extra=()
    [ "$mode" = exactly-once ] && extra=(--exactly-once)
    start=$(now_ns)
    "${lab[@]}" relay --until-empty --quiet --batch-size "$BATCH" "${extra[@]}" >"$WORK/relay.out"
    ns=$(($(now_ns) - start))
    grep -q "pending=0" "$WORK/relay.out" || { cat "$WORK/relay.out"; echo "relay left rows pending" >&2; exit 1; }
    rate=$(awk -v n="$EVENTS" -v ns="$ns" 'BEGIN {printf "%.0f", n / (ns / 1e9)}')
    RATES[$mode]+="$rate "
    printf 'round %d %-14s %6d events in %7.3f s: %7d events/s\n' "$round" "$mode" "$EVENTS" \
      "$(awk -v ns="$ns" 'BEGIN {print ns / 1e9}')" "$rate"
  done
done
alo=$(tr ' ' '\n' <<<"${RATES[at-least-once]}" | grep . | median)
eos=$(tr ' ' '\n' <<<"${RATES[exactly-once]}" | grep . | median)
echo "median events/s (batch $BATCH, $EVENTS events, $ROUNDS rounds): at-least-once $alo, exactly-once $eos"
awk -v a="$alo" -v e="$eos" 'BEGIN {printf "exactly-once overhead: %.1f %% of at-least-once throughput\n", (a - e) * 100 / a}'
