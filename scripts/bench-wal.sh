#!/usr/bin/env bash
# The WAL relay (relay --source wal) beside the polling relay (--coordination claims and leader),
# in one run on one PostgreSQL server (docs/wal-relay.md, "Figures"):
#
#   OUTBOX_PG_URL=postgresql://... scripts/bench-wal.sh [EVENTS [LATENCY_EVENTS [RATE]]]
#
# The run creates a database of its own on that server (outbox_bench_wal_<pid>, dropped at exit),
# so pg_stat_database counts no one else's transactions; each relay works in a schema of its own
# (autovacuum off on its tables, so n_dead_tup only grows). Per relay, in turn:
#   drain    EVENTS outbox rows (default 200,000) inserted by psql in transactions of 1,000 rows
#            (for the WAL relay after it has created its slot: a slot streams what commits after
#            it), VACUUM ANALYZE, CHECKPOINT (so every relay starts without full-page images
#            already paid), then `relay --until-empty --quiet` timed as a whole process under
#            /usr/bin/time (events/s; peak RSS, KiB -> MiB). Around it, from a session that is not
#            the relay's: pg_stat_database.xact_commit of the database (minus the snapshot
#            session's own commit, measured at the start), the outbox's n_tup_upd and n_dead_tup
#            (pg_stat_user_tables), and the WAL the relay wrote: pg_walinspect's records between
#            the two pg_current_wal_lsn() that touch a relation of this database, plus the commit
#            records of their transactions (a physical slot of the run pins that WAL meanwhile;
#            FPI bytes are the full-page images in it). Each is printed per 1,000 events.
#   latency  a fresh schema, the relay started first and warmed by one loan, then LATENCY_EVENTS
#            loans (default 5,000) by `write --rate RATE` (default 1,000/s; the writer's
#            connection at synchronous_commit=on, env OUTBOX_BENCH_WRITER_SYNC for another level:
#            at off a commit reaches the WAL relay only once the WAL writer has flushed it, up to
#            wal_writer_delay later, because a walsender streams flushed WAL only; env
#            OUTBOX_BENCH_WRITE_BATCH N commits N loans a transaction, still paced one by one, for
#            a disk whose fsyncs cannot keep RATE commits/s);
#            both record a history (--history), and an event's latency is its first send ok
#            (the broker's delivery report) minus its txn ok (the writer's COMMIT returned):
#            p50/p99/max over the events, nearest rank. The WAL relay can stream a commit
#            before COMMIT returns to the writer, so its figures are a lower bound (a negative
#            latency counts as is).
# The peak RSS printed is the larger of the two runs. BROKERS (env): a Kafka bootstrap list;
# without it an embedded broker is started. OUTBOX_LAB_BIN: the binary (default build/outbox-lab).
set -euo pipefail
EVENTS=${1:-200000} LATENCY_EVENTS=${2:-5000} RATE=${3:-1000}
WRITER_SYNC=${OUTBOX_BENCH_WRITER_SYNC:-on}
WRITE_BATCH=${OUTBOX_BENCH_WRITE_BATCH:-1}
BASE=${OUTBOX_PG_URL:?set OUTBOX_PG_URL (scripts/postgres.sh start prints it)}
REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=${OUTBOX_LAB_BIN:-$REPO/build/outbox-lab}
WORK=$(mktemp -d)
DBNAME=outbox_bench_wal_$$
PIN=outbox_bench_pin_$$
case "$BASE" in *\?*) echo "bench-wal.sh: give OUTBOX_PG_URL without a query string" >&2; exit 2 ;; esac
BENCH=${BASE%/*}/$DBNAME
RELAY_PID= BROKER_PID=

cleanup() {
  [ -z "$RELAY_PID" ] || kill "$RELAY_PID" 2>/dev/null || true
  [ -z "$BROKER_PID" ] || kill "$BROKER_PID" 2>/dev/null || true
  wait 2>/dev/null || true
  psql -qX "$BASE" -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
    WHERE (database = '$DBNAME' OR slot_name = '$PIN') AND NOT active" >/dev/null 2>&1 || true
  psql -qX "$BASE" -c "DROP DATABASE IF EXISTS $DBNAME" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

q() { psql -qtAX -v ON_ERROR_STOP=1 "$@"; }

if [ -z "${BROKERS:-}" ]; then
  "$BIN" broker --addr-file "$WORK/broker.addr" </dev/null >"$WORK/broker.log" 2>&1 &
  BROKER_PID=$!
  for _ in $(seq 1 100); do [ -s "$WORK/broker.addr" ] && break; sleep 0.1; done
  BROKERS=$(cat "$WORK/broker.addr")
  broker_text="embedded broker $BROKERS"
else
  broker_text="Kafka $BROKERS"
fi

q "$BASE" -c "CREATE DATABASE $DBNAME"
q "$BENCH" -c "CREATE EXTENSION pg_walinspect"
DBOID=$(q "$BENCH" -c "SELECT oid FROM pg_database WHERE datname = current_database()")
q "$BENCH" -c "SELECT pg_create_physical_replication_slot('$PIN', true)" >/dev/null

url() { echo "$BENCH?options=-csearch_path%3D$1${2:+%20$2}"; }
relay_args() {
  case "$1" in
    wal) echo "--source wal" ;;
    *) echo "--coordination $1" ;;
  esac
}

# new_schema NAME: a reset outbox in schema NAME, autovacuum off on its tables.
new_schema() {
  q "$BENCH" -c "CREATE SCHEMA $1"
  "$BIN" --db "$(url "$1")" reset >/dev/null
  q "$BENCH" -c "SELECT format('ALTER TABLE %I.%I SET (autovacuum_enabled = false);', schemaname, tablename)
    FROM pg_tables WHERE schemaname = '$1'" | q "$BENCH" >/dev/null
}

# snap SCHEMA: "xact_commit n_tup_upd n_dead_tup flush_lsn", read by a session of its own.
snap() {
  q "$BENCH" -F ' ' -c "SELECT d.xact_commit, t.n_tup_upd, t.n_dead_tup, pg_current_wal_flush_lsn()
    FROM pg_stat_database d, pg_stat_user_tables t
    WHERE d.datname = current_database() AND t.schemaname = '$1' AND t.relname = 'outbox'"
}

# wal_of LSN0 LSN1: "bytes fpi_bytes records" written for this database between the two LSNs.
wal_of() {
  [ "$(q "$BENCH" -c "SELECT '$2'::pg_lsn > '$1'::pg_lsn")" = t ] || { echo "0 0 0"; return; }
  q "$BENCH" -F ' ' -c "WITH r AS (SELECT * FROM pg_get_wal_records_info('$1', '$2')),
      mine AS (SELECT DISTINCT xid FROM r WHERE block_ref LIKE '%rel %/$DBOID/%' AND xid <> '0')
    SELECT coalesce(sum(record_length), 0), coalesce(sum(fpi_length), 0), count(*) FROM r
    WHERE block_ref LIKE '%rel %/$DBOID/%' OR (resource_manager = 'Transaction' AND xid IN (SELECT xid FROM mine))"
}

# The snapshot session's own commits, counted by the next snapshot: measured, then subtracted.
new_schema bench_probe
read -r c0 _ _ _ < <(snap bench_probe)
sleep 1.2
read -r c1 _ _ _ < <(snap bench_probe)
SNAP_COMMITS=$((c1 - c0))

# per N: N per 1,000 drained events.
per() { awk -v v="$1" -v n="$EVENTS" 'BEGIN {printf "%.1f", v * 1000 / n}'; }

declare -A RATE_OF=() SECS=() XACT=() UPD=() DEAD=() WALB=() FPI=() RSS=() P50=() P99=() PMAX=() WRATE=()
MODES=(wal claims leader)

for mode in "${MODES[@]}"; do
  schema=bench_$mode
  new_schema "$schema"
  lab=("$BIN" --db "$(url "$schema")" --brokers "$BROKERS" --topic "bench-wal-$$-$mode")
  [ "$mode" = wal ] && "${lab[@]}" relay --source wal --until-empty --quiet >"$WORK/slot.out"
  batches=$(((EVENTS + 999) / 1000))
  for b in $(seq 0 $((batches - 1))); do
    lo=$((b * 1000 + 1)) hi=$(((b + 1) * 1000 < EVENTS ? (b + 1) * 1000 : EVENTS))
    echo "INSERT INTO outbox(event_id, aggregate_id, event_type, payload) SELECT 'evt-'||(1000+i), 'L-'||(1000+i), 'LoanCreated', convert_to('{\"eventId\":\"evt-'||(1000+i)||'\"}', 'UTF8') FROM generate_series($lo, $hi) i;"
  done | q "$(url "$schema")" >/dev/null
  q "$(url "$schema")" -c "VACUUM ANALYZE outbox" -c "CHECKPOINT"
  read -r x0 u0 d0 l0 < <(snap "$schema")
  # shellcheck disable=SC2046
  /usr/bin/time -o "$WORK/time-$mode" -f '%e %M' "${lab[@]}" relay $(relay_args "$mode") \
    --until-empty --quiet >"$WORK/drain-$mode.out"
  sleep 1.2  # the relay's backend flushes its statistics as it exits
  read -r x1 u1 d1 l1 < <(snap "$schema")
  read -r wb fb _ < <(wal_of "$l0" "$l1")
  read -r secs rss <"$WORK/time-$mode"
  sent=$(grep -oE '(records|acked)=[0-9]+' "$WORK/drain-$mode.out" | tail -n 1 | cut -d= -f2)
  [ "$sent" = "$EVENTS" ] || { cat "$WORK/drain-$mode.out"; echo "bench-wal.sh: $mode sent $sent of $EVENTS" >&2; exit 1; }
  SECS[$mode]=$secs
  RATE_OF[$mode]=$(awk -v n="$EVENTS" -v s="$secs" 'BEGIN {printf "%.0f", n / s}')
  XACT[$mode]=$(per $((x1 - x0 - SNAP_COMMITS)))
  UPD[$mode]=$(per $((u1 - u0)))
  DEAD[$mode]=$(per $((d1 - d0)))
  WALB[$mode]=$(per "$wb")
  FPI[$mode]=$(per "$fb")
  RSS[$mode]=$rss
  printf 'drain   %-6s %d events in %s s (%s ev/s), commits %d, n_tup_upd %d, n_dead_tup %d, WAL %d bytes (FPI %d), max RSS %d KiB\n' \
    "$mode" "$EVENTS" "$secs" "${RATE_OF[$mode]}" $((x1 - x0 - SNAP_COMMITS)) $((u1 - u0)) $((d1 - d0)) "$wb" "$fb" "$rss"
done

# sends_ok FILE: delivery reports in the history.
sends_ok() { grep -c '"type":"ok","f":"send"' "$1" 2>/dev/null || true; }
wait_sends() {
  for _ in $(seq 1 1200); do
    [ "$(sends_ok "$1")" -ge "$2" ] && return 0
    sleep 0.1
  done
  echo "bench-wal.sh: $2 deliveries not reached within 120 s ($(sends_ok "$1"))" >&2
  exit 1
}

for mode in "${MODES[@]}"; do
  schema=bench_lat_$mode hist=$WORK/history-$mode.jsonl
  new_schema "$schema"
  lab=("$BIN" --db "$(url "$schema")" --brokers "$BROKERS" --topic "bench-wal-lat-$$-$mode" --history "$hist")
  # shellcheck disable=SC2046
  /usr/bin/time -o "$WORK/time-lat-$mode" -f '%e %M' "${lab[@]}" relay $(relay_args "$mode") --quiet \
    >"$WORK/lat-$mode.out" 2>&1 &
  RELAY_PID=$!
  # The WAL relay's slot must exist before the loans commit; the polling relays need no wait.
  if [ "$mode" = wal ]; then
    for _ in $(seq 1 300); do
      grep -q 'streaming from LSN' "$WORK/lat-$mode.out" && break
      sleep 0.1
    done
  fi
  wlab=("$BIN" --db "$(url "$schema" "-csynchronous_commit%3D$WRITER_SYNC")" --brokers "$BROKERS" --history "$hist")
  "${wlab[@]}" write 1 --quiet >/dev/null
  wait_sends "$hist" 1
  start=$(date +%s%N)
  "${wlab[@]}" write "$LATENCY_EVENTS" --rate "$RATE" --batch "$WRITE_BATCH" --quiet >/dev/null
  WRATE[$mode]=$(awk -v n="$LATENCY_EVENTS" -v ns="$(($(date +%s%N) - start))" 'BEGIN {printf "%.0f", n / (ns / 1e9)}')
  wait_sends "$hist" $((LATENCY_EVENTS + 1))
  child=$(pgrep -P "$RELAY_PID" || true)
  [ -n "$child" ] && kill -TERM "$child"
  wait "$RELAY_PID" || true
  RELAY_PID=
  read -r p50 p99 pmax n < <(python3 - "$hist" <<'PY'
import json, math, sys
txn, send = {}, {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("type") != "ok": continue
    if r.get("f") == "txn": txn.setdefault(r["value"], r["time_ms"])
    elif r.get("f") == "send": send.setdefault(r["value"], r["time_ms"])
first = min(txn, key=txn.get)  # the warm-up loan
d = sorted(send[e] - txn[e] for e in txn if e in send and e != first)
rank = lambda q: d[max(0, math.ceil(q * len(d)) - 1)]
print(rank(0.50), rank(0.99), d[-1], len(d))
PY
)
  [ "$n" = "$LATENCY_EVENTS" ] || { echo "bench-wal.sh: $mode latency: $n of $LATENCY_EVENTS events sent" >&2; exit 1; }
  P50[$mode]=$p50 P99[$mode]=$p99 PMAX[$mode]=$pmax
  read -r _ lrss <"$WORK/time-lat-$mode"
  [ "$lrss" -gt "${RSS[$mode]}" ] && RSS[$mode]=$lrss
  printf 'latency %-6s %d events written at %d/s: commit->ack p50 %d ms, p99 %d ms, max %d ms, relay max RSS %d KiB\n' \
    "$mode" "$n" "${WRATE[$mode]}" "$p50" "$p99" "$pmax" "$lrss"
done

echo
echo "outbox-lab bench-wal: PostgreSQL $(q "$BASE" -c 'SHOW server_version') on ${BASE#*@}, $broker_text, writer synchronous_commit=$WRITER_SYNC write --batch $WRITE_BATCH, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
printf '%-34s %14s %14s %14s\n' "figure" "wal" "claims" "leader"
row() {
  local name=$1 arr=$2 m
  printf '%-34s' "$name"
  for m in "${MODES[@]}"; do
    local -n ref=$arr
    printf ' %14s' "${ref[$m]}"
  done
  echo
}
row "drain $EVENTS rows: ev/s" RATE_OF
row "drain: seconds" SECS
row "commit->ack p50 ms" P50
row "commit->ack p99 ms (target <= 20)" P99
row "commit->ack max ms" PMAX
row "writer's achieved rate ev/s" WRATE
row "per 1,000 ev: transactions" XACT
row "per 1,000 ev: outbox updates" UPD
row "per 1,000 ev: dead tuples" DEAD
row "per 1,000 ev: WAL bytes" WALB
row "per 1,000 ev: of which FPI bytes" FPI
row "relay peak RSS KiB" RSS
