#!/usr/bin/env bash
# The benchmark's Kafka-facing figures on the embedded broker and on real Kafka 4.3.0, side by side:
# `outbox-lab bench --json` runs alternately on each (embedded, real, embedded, real, ...), and the
# table gives the median of each figure per broker and their ratio. SQLite-only figures (write
# path, poll history, checkpoint) are shrunk to a minimum here: `bench` itself measures them.
#
#   scripts/bench-brokers.sh [--rounds N] [--events N] [--smoke]
#     --rounds N   bench runs per broker, alternated (default 3); medians are reported
#     --events N   rows the in-process relay and raw produce send (default 100000)
#     --smoke      one round of tiny counts: checks that every figure exists (the test suite's)
#
# Real Kafka is scripts/kafka.sh's (started if it is not running, left running). Environment:
# OUTBOX_LAB_BIN (default build/outbox-lab) and kafka.sh's own (OUTBOX_KAFKA_DIR, OUTBOX_KAFKA_PORT).
# Prints the table, then one JSON object per line for each run when BENCH_BROKERS_JSON=FILE is set.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${OUTBOX_LAB_BIN:-$repo/build/outbox-lab}
rounds=3 events=100000 smoke=0
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --events) events=$2; shift 2 ;;
    --smoke) smoke=1 rounds=1 events=2000; shift ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "outbox-lab: error: bench-brokers.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case $rounds$events in *[!0-9]*) echo "outbox-lab: error: bench-brokers.sh: --rounds and --events take whole numbers" >&2; exit 2 ;; esac
[ -x "$bin" ] || { echo "outbox-lab: error: bench-brokers.sh: no binary at $bin (build it, or set OUTBOX_LAB_BIN)" >&2; exit 2; }

real=$("$repo/scripts/kafka.sh" start)
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-brokers.XXXXXX")
trap 'rm -rf "$work"' EXIT

chapter=$((events / 100)) drain=$((events / 2)) latency=2000
[ "$smoke" -eq 1 ] && chapter=50 drain=2000 latency=200
common=(bench --json --events "$events" --chapter-events "$chapter" --drain-events "$drain"
  --drain-rounds 1 --latency-events "$latency" --write-txns 100 --write-rounds 1 --history-rows 1000
  --poll-repetitions 3 --rss-events 2000 --idle 1s)

for ((r = 1; r <= rounds; r++)); do
  for broker in embedded real; do
    args=()
    [ "$broker" = real ] && args=(--brokers "$real")
    echo "[bench-brokers] round $r/$rounds on $broker" >&2
    "$bin" "${common[@]}" "${args[@]}" >"$work/$broker-$r.json" 2>"$work/$broker-$r.err" || {
      echo "outbox-lab: error: bench-brokers.sh: bench on $broker failed: $(tail -n 1 "$work/$broker-$r.err")" >&2
      exit 1
    }
    [ -z "${BENCH_BROKERS_JSON:-}" ] || jq -c --arg b "$broker" '{broker: $b} + .' "$work/$broker-$r.json" >>"$BENCH_BROKERS_JSON"
  done
done

# The figures: label, jq path. Latency is the `own` workload's (one aggregate per loan).
figures=(
  "chapter's algorithm (events/s)|.chapter.events_per_s"
  "relay, in process (events/s)|.relay.events_per_s"
  "raw produce (events/s)|.raw.events_per_s"
  "relay / raw|.relay_over_raw"
  "relay / chapter|.relay_over_chapter"
  "process: chapter's publish (events/s)|.processes.chapter.events_per_s"
  "process: batch-loop (events/s)|.processes.batch_loop.events_per_s"
  "process: relay --until-empty (events/s)|.processes.relay.events_per_s"
  "commit-to-mark p50 at 1000/s (ms)|(.latency[] | select(.workload == \"own\") | .p50_ms)"
  "commit-to-mark p99 at 1000/s (ms)|(.latency[] | select(.workload == \"own\") | .p99_ms)"
  "relay, compression none (events/s)|(.compression[] | select(.codec == \"none\") | .median_events_per_s)"
  "relay, compression lz4 (events/s)|(.compression[] | select(.codec == \"lz4\") | .median_events_per_s)"
  "bytes sent per event, compression none|(.compression[] | select(.codec == \"none\") | .bytes_per_event)"
  "bytes sent per event, compression lz4|(.compression[] | select(.codec == \"lz4\") | .bytes_per_event)"
)
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

printf '%-42s %14s %14s %10s\n' "figure (median of $rounds)" embedded "Kafka $("$repo/scripts/kafka.sh" version | sed 's/Kafka version: //')" "real/emb"
missing=0
for f in "${figures[@]}"; do
  label=${f%%|*} path=${f#*|}
  e=$(for ((r = 1; r <= rounds; r++)); do jq -r "$path // empty" "$work/embedded-$r.json"; done | median)
  k=$(for ((r = 1; r <= rounds; r++)); do jq -r "$path // empty" "$work/real-$r.json"; done | median)
  [ "$e" != - ] && [ "$k" != - ] || missing=$((missing + 1))
  ratio=$(awk -v e="$e" -v k="$k" 'BEGIN { if (e + 0 > 0 && k != "-") printf "%.2f", k / e; else print "-" }')
  printf '%-42s %14.2f %14.2f %10s\n' "$label" "$e" "$k" "$ratio" 2>/dev/null || printf '%-42s %14s %14s %10s\n' "$label" "$e" "$k" "$ratio"
done
echo "real Kafka: $real (scripts/kafka.sh, one node, loopback); embedded: librdkafka's mock cluster in its own process"
[ "$missing" -eq 0 ] || { echo "outbox-lab: error: bench-brokers.sh: $missing figures missing from bench --json" >&2; exit 1; }
