#!/usr/bin/env bash
# CPU instructions per event of a relay draining a fixed backlog: a figure the machine's load
# cannot move (the bench's wall-clock figures can). Counted by valgrind's callgrind over the
# whole process, every thread (librdkafka's too); `perf stat -e instructions` would do the same
# where the kernel exposes the PMU, which this VM does not ("<not supported>").
#
# Each program drains its own copy of one backlog of EVENTS rows (default 20,000) on an embedded
# broker, then runs again on the drained copy: the second run is its start-up and teardown, and
#   per event = (instructions of the drain - instructions of the empty run) / EVENTS.
# Programs: `relay --until-empty` (leader mode, the SQLite default), `batch-loop` (the
# hand-written C++ loop) and bench/python_relay.py (when /usr/bin/python3 imports confluent_kafka).
#
# Usage: scripts/bench-instructions.sh [EVENTS] [PROGRAM...]   PROGRAM: relay batch-loop python
#        OUTBOX_LAB_BIN=path (default build/outbox-lab), PYTHON=path (default /usr/bin/python3),
#        KEEP=dir: keep the callgrind profiles there (callgrind_annotate DIR/relay-drain.cg)
# Output: one line per program: name, instructions of the drain, of the empty run, per event.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${OUTBOX_LAB_BIN:-$ROOT/build/outbox-lab}
PYTHON=${PYTHON:-/usr/bin/python3}
EVENTS=${1:-20000}
shift || true
PROGRAMS=("$@")
[ ${#PROGRAMS[@]} -gt 0 ] || PROGRAMS=(relay batch-loop python)
command -v valgrind >/dev/null || { echo "bench-instructions: valgrind not found" >&2; exit 2; }
[ -x "$BIN" ] || { echo "bench-instructions: no executable at $BIN (OUTBOX_LAB_BIN)" >&2; exit 2; }

TMP=$(mktemp -d)
BROKER_PID=
cleanup() {
  [ -n "$BROKER_PID" ] && kill "$BROKER_PID" 2>/dev/null && wait "$BROKER_PID" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
TOPIC=instructions-$$

"$BIN" --topic "$TOPIC" broker --addr-file "$TMP/broker.addr" </dev/null >"$TMP/broker.log" 2>&1 &
BROKER_PID=$!
for _ in $(seq 150); do [ -s "$TMP/broker.addr" ] && break; sleep 0.1; done
[ -s "$TMP/broker.addr" ] || { cat "$TMP/broker.log" >&2; echo "bench-instructions: broker did not start" >&2; exit 2; }
BROKER=$(cat "$TMP/broker.addr")

"$BIN" --db "$TMP/backlog.db" reset >/dev/null
"$BIN" --db "$TMP/backlog.db" --synchronous off write "$EVENTS" --quiet >/dev/null

# instructions LOG: the "Collected" count callgrind printed in LOG.
instructions() { sed -n 's/^==[0-9]*== Collected : \([0-9]*\)$/\1/p' "$1"; }

# count NAME DB ARGV...: callgrind over ARGV, which drains DB; prints the instructions.
count() {
  local name=$1 db=$2
  shift 2
  valgrind --tool=callgrind --callgrind-out-file="$TMP/$name.cg" "$@" \
    >"$TMP/$name.log" 2>&1 || { cat "$TMP/$name.log" >&2; echo "bench-instructions: $name failed" >&2; exit 1; }
  [ -z "${KEEP:-}" ] || { mkdir -p "$KEEP" && cp "$TMP/$name.cg" "$KEEP/"; }
  instructions "$TMP/$name.log"
}

printf '%-12s %16s %16s %14s\n' program drain empty-run per-event
for program in "${PROGRAMS[@]}"; do
  db=$TMP/$program.db
  cp "$TMP/backlog.db" "$db"
  common=(--db "$db" --brokers "$BROKER" --topic "$TOPIC" --synchronous full --busy-timeout 5000ms)
  case $program in
    relay) argv=("$BIN" relay --until-empty --quiet --batch-size 1000 "${common[@]}") ;;
    batch-loop) argv=("$BIN" batch-loop --batch-size 1000 "${common[@]}") ;;
    python)
      "$PYTHON" -c 'import confluent_kafka' 2>/dev/null || { echo "python: $PYTHON cannot import confluent_kafka; skipped"; continue; }
      argv=("$PYTHON" "$ROOT/bench/python_relay.py" --batch-size 1000 "${common[@]}") ;;
    *) echo "bench-instructions: unknown program '$program'" >&2; exit 2 ;;
  esac
  drain=$(count "$program-drain" "$db" "${argv[@]}")
  pending=$(sqlite3 "$db" 'SELECT COUNT(*) FROM outbox WHERE published = 0')
  [ "$pending" = 0 ] || { echo "bench-instructions: $program left $pending rows pending" >&2; exit 1; }
  empty=$(count "$program-empty" "$db" "${argv[@]}")
  printf '%-12s %16s %16s %14s\n' "$program" "$drain" "$empty" $(( (drain - empty) / EVENTS ))
done
