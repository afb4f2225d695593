#!/usr/bin/env bash
# What relay --exactly-once costs against at-least-once, on the broker you name (real Kafka: the
# embedded broker writes no transaction markers, docs/exactly-once.md):
#
#   scripts/bench-exactly-once.sh BROKERS [EVENTS [BATCH [ROUNDS [LATENCY_EVENTS]]]]
#
# Each round, for each mode in turn: a fresh outbox (reset) and a topic of its own, EVENTS loans
# written (not timed), then `relay --until-empty --batch-size BATCH` timed as a whole process
# (start-up, the exactly-once recovery read, every batch, teardown). Prints events/s per round and
# the median per mode, and the overhead of exactly-once in percent of at-least-once's median.
# Then, unless LATENCY_EVENTS is 0, the latency from commit to mark, in the same run: per round and
# mode, a fresh outbox and topic, the relay started first (runs until stopped, --batch-size BATCH),
# then LATENCY_EVENTS loans written one a transaction, paced by the failpoint
# write.after_commit=sleep(PACE_MS) (env OUTBOX_BENCH_PACE_MS, default 2), and once every row is
# published, the relay stopped (SIGTERM). A first loan, written and published before them, is
# left out: the relay's start-up is not their latency. Each row's published_at - created_at (ms, both epoch ms
# of the same host's clock: created at the enqueue in the business transaction, published at the
# mark, which follows the broker's ack, and under --exactly-once commit_transaction) gives p50 and
# p99 over the round's rows (nearest rank); the medians over the rounds are printed per mode.
# Defaults: EVENTS 5000, BATCH 1000, ROUNDS 3, LATENCY_EVENTS 1000. OUTBOX_LAB_BIN: the binary
# (default build/outbox-lab).
set -euo pipefail
BROKERS=${1:?usage: bench-exactly-once.sh BROKERS [EVENTS [BATCH [ROUNDS]]]}
EVENTS=${2:-5000} BATCH=${3:-1000} ROUNDS=${4:-3} LATENCY_EVENTS=${5:-1000}
PACE_MS=${OUTBOX_BENCH_PACE_MS:-2}
REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=${OUTBOX_LAB_BIN:-$REPO/build/outbox-lab}
WORK=$(mktemp -d)
RELAY_PID=
trap '[ -z "$RELAY_PID" ] || kill "$RELAY_PID" 2>/dev/null; rm -rf "$WORK"' EXIT

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

[ "$LATENCY_EVENTS" -gt 0 ] || exit 0

# percentiles DB: "p50 p99" of published_at - created_at over the published rows, ms, nearest rank.
percentiles() {
  python3 - "$1" <<'PY'
import math, sqlite3, sys
con = sqlite3.connect(sys.argv[1])
d = sorted(r[0] for r in con.execute(
    "SELECT published_at - created_at FROM outbox WHERE published = 1 AND id > 1"))
rank = lambda q: d[max(0, math.ceil(q * len(d)) - 1)]
print(rank(0.50), rank(0.99), len(d))
PY
}

# drained: wait (polls of 0.1 s, up to 60 s) until the relay has published every row.
drained() {
  for _ in $(seq 1 600); do
    [ "$("${lab[@]}" verify --no-kafka --json | jq -r .unpublished)" = 0 ] && return 0
    sleep 0.1
  done
  cat "$WORK/relay.out"
  echo "the relay did not publish every row within 60 s" >&2
  exit 1
}

declare -A P50=() P99=()
for round in $(seq 1 "$ROUNDS"); do
  for mode in at-least-once exactly-once; do
    db=$WORK/latency-$mode-$round.db topic=bench-eos-latency-$$-$mode-$round
    lab=("$BIN" --db "$db" --topic "$topic" --brokers "$BROKERS")
    "${lab[@]}" reset >/dev/null
    extra=()
    [ "$mode" = exactly-once ] && extra=(--exactly-once)
    "${lab[@]}" relay --quiet --batch-size "$BATCH" "${extra[@]}" >"$WORK/relay.out" 2>&1 &
    RELAY_PID=$!
    # One loan first, published before the measured ones: the relay's start-up (the topic's
    # creation, init_transactions and recovery) is not counted in their latency.
    "${lab[@]}" write 1 --quiet >/dev/null
    drained
    start=$(now_ns)
    OUTBOX_FAILPOINTS="write.after_commit=sleep($PACE_MS)" "${lab[@]}" write "$LATENCY_EVENTS" --quiet >/dev/null
    write_rate=$(awk -v n="$LATENCY_EVENTS" -v ns="$(($(now_ns) - start))" 'BEGIN {printf "%.0f", n / (ns / 1e9)}')
    drained
    kill "$RELAY_PID"
    wait "$RELAY_PID" || true
    RELAY_PID=
    read -r p50 p99 rows < <(percentiles "$db")
    [ "$rows" = "$LATENCY_EVENTS" ] || { cat "$WORK/relay.out"; echo "latency round: $rows of $LATENCY_EVENTS rows published" >&2; exit 1; }
    P50[$mode]+="$p50 " P99[$mode]+="$p99 "
    printf 'latency round %d %-14s %6d events written at %4d/s: commit->mark p50 %4d ms, p99 %4d ms\n' \
      "$round" "$mode" "$rows" "$write_rate" "$p50" "$p99"
  done
done
for mode in at-least-once exactly-once; do
  printf 'median commit->mark (batch %s, %s events at write.after_commit=sleep(%s), %s rounds): %-14s p50 %s ms, p99 %s ms\n' \
    "$BATCH" "$LATENCY_EVENTS" "$PACE_MS" "$ROUNDS" "$mode" \
    "$(tr ' ' '\n' <<<"${P50[$mode]}" | grep . | median)" "$(tr ' ' '\n' <<<"${P99[$mode]}" | grep . | median)"
done
