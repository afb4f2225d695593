#!/usr/bin/env bash
# CPU instructions per transaction of the bench's write-path lanes, a figure the machine's load
# and the disk's fsync cannot move (the bench's write ratio moves with both): callgrind over
# build/write-lanes (bench/write_lanes.cc), counting TXNS transactions after 500 warm-up ones, at
# synchronous off. Lanes: business (the loan alone), outbox (the loan and its outbox row, the
# event built beforehand, as `outbox-lab bench` does) and write (`write`'s own path, the event
# built inside).
#
# Usage: scripts/write-instructions.sh [TXNS] [SQL]   TXNS default 2,000; SQL runs on the fresh
#        database first (a schema variant, e.g. "DROP INDEX outbox_unpublished").
#        WRITE_LANES_BIN=path (default build/write-lanes), KEEP=dir: keep the callgrind profiles.
# Output: one line per lane: instructions per transaction; then outbox's ratio business / outbox.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${WRITE_LANES_BIN:-$ROOT/build/write-lanes}
TXNS=${1:-2000}
SQL=${2:-}
command -v valgrind >/dev/null || { echo "write-instructions: valgrind not found" >&2; exit 2; }
[ -x "$BIN" ] || { echo "write-instructions: no executable at $BIN (WRITE_LANES_BIN)" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

declare -A per_txn
for lane in business outbox write; do
  args=("$lane" "$TXNS" "$TMP/$lane.db" off)
  [ -z "$SQL" ] || args+=("$SQL")
  # --instr-atstart=no: only the counted transactions, between the program's client requests,
  # which dump them to $lane.cg.1.
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$TMP/$lane.cg" \
    "$BIN" "${args[@]}" >"$TMP/$lane.log" 2>&1 ||
    { cat "$TMP/$lane.log" >&2; echo "write-instructions: lane $lane failed" >&2; exit 1; }
  [ -z "${KEEP:-}" ] || { mkdir -p "$KEEP" && cp "$TMP/$lane.cg.1" "$KEEP/$lane.cg"; }
  total=$(sed -n 's/^totals: \([0-9]*\)$/\1/p' "$TMP/$lane.cg.1")
  per_txn[$lane]=$((total / TXNS))
  printf '%-9s %12d instructions/txn\n' "$lane" "${per_txn[$lane]}"
done
awk -v b="${per_txn[business]}" -v o="${per_txn[outbox]}" \
  'BEGIN { printf "ratio business / outbox (instructions): %.3f\n", b / o }'
