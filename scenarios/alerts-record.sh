#!/usr/bin/env bash
# The alert rules' conditions, made for real and recorded: the series behind
# tests/alerts/alerts_test.yml (`promtool test rules`, ctest promtool-test-rules).
# Injects, on an embedded broker with a control socket, one relay after another with
# --http (leader mode, --lease 2s, --max-attempts 5, backoff 2s..10s, -X message.max.bytes=2000):
#   1. a quiet start: 10 rows published;
#   2. a poison row (10 KB payload, refused locally): parked after its 5 attempts;
#   3. the broker stopped (broker-ctl down) for 20 samples while 5 rows are written, 3 of them by
#      a writer whose clock is 10 minutes behind (libfaketime: rows that have waited 10 minutes,
#      as a relay down that long would find them); then the broker started again;
#   4. four leader takeovers: a standby started, the leader killed with kill -9, four times;
#   5. the last leader killed.
# A recorder scrapes every relay's /metrics once a second (a failed scrape records up 0, as
# Prometheus does) until the end.
# Expects the endpoint's metrics to cross each alert's threshold (and /readyz to say "backlog
# too old" beside "broker unreachable" while the broker is down): outbox_parked_rows 1,
# outbox_oldest_pending_age_seconds above 300 while the broker is down, failed deliveries
# counted, outbox_leader_token 5 after four takeovers, and no answer from a killed relay.
# With ALERTS_RECORD_OUT=FILE it writes the recorded series there as promtool input_series.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

command -v curl >/dev/null || die "curl is missing (scripts/install-deps.sh installs it)"
FAKETIME_LIB=$(dpkg -L libfaketime 2>/dev/null | grep '/libfaketimeMT\.so\.1$' | head -n 1)
[ -n "$FAKETIME_LIB" ] && [ -f "$FAKETIME_LIB" ] ||
  die "libfaketimeMT.so.1 not found: install Debian's faketime (scripts/install-deps.sh does)"

RELAY_ARGS=(relay --http 127.0.0.1:0 --lease 2s --delivery-timeout 1s --idle-max 200ms
  --max-attempts 5 --backoff-base 2s --backoff-max 10s --ready-max-age 5m -X message.max.bytes=2000)
TARGETS=$TMP/targets   # "instance port" lines the recorder scrapes
SAMPLES=$TMP/samples   # "index instance metric value" lines
: >"$TARGETS"
: >"$SAMPLES"
echo 0 >"$TMP/sample-index"

http_port() { sed -n 's/^\[relay\] http: listening on [^ ]*:\([0-9][0-9]*\) .*/\1/p' "$1" | head -n 1; }

# start_relay NAME: a relay with --http; registers its port with the recorder; sets R_PID, R_LOG.
start_relay() {
  start_bg "$1" "${RELAY_ARGS[@]}"
  R_PID=$BG_PID
  R_LOG=$BG_LOG
  wait_for 20 "$R_PID" "$1 listening" _has_line '^\[relay\] http: listening on ' "$R_LOG" ||
    die "$1 never listened: $(cat "$R_LOG")"
  echo "$1 $(http_port "$R_LOG")" >>"$TARGETS"
  echo "$1: pid $R_PID, http://127.0.0.1:$(http_port "$R_LOG")"
}

# The recorder: one scrape of every target a second (a sampling cadence, not a race window).
record() {
  local i=0 name port
  while [ ! -e "$TMP/stop-recording" ]; do
    i=$((i + 1))
    while read -r name port; do
      # A killed relay's port is "-": its free port may be taken by a later relay's port 0.
      if [ "$port" != - ] && curl -s -m 0.8 -o "$TMP/scrape.$name" "http://127.0.0.1:$port/metrics"; then
        echo "$i $name up 1"
        awk -v i="$i" -v n="$name" '!/^#/ && NF == 2 { print i, n, $1, $2 }' "$TMP/scrape.$name"
      else
        echo "$i $name up 0"
      fi
    done <"$TARGETS" >>"$SAMPLES"
    echo "$i" >"$TMP/sample-index.tmp" && mv "$TMP/sample-index.tmp" "$TMP/sample-index"
    # The scrape interval (Prometheus' scrape_interval), not a wait for an event: the series are
    # sampled on a clock, as a Prometheus server would; every wait on the relays goes through
    # wait_for/wait_samples on what they print or serve.
    sleep 1
  done
}
# dead NAME: the recorder stops scraping NAME and records it down (its process was killed).
dead() { sed -i "s/^$1 .*/$1 -/" "$TARGETS"; }
# wait_samples N: until the recorder has taken N more samples.
_index_at_least() { [ "$(cat "$TMP/sample-index")" -ge "$1" ]; }
wait_samples() {
  local target=$(($(cat "$TMP/sample-index") + $1))
  wait_until $(($1 * 3 + 10)) "$1 more samples" _index_at_least "$target" || die "the recorder stalled"
}
# last VALUE of metric M of instance I.
last() { awk -v n="$1" -v m="$2" '$2 == n && $3 == m { v = $4 } END { print v }' "$SAMPLES"; }
_last_is() { [ "$(last "$1" "$2")" = "$3" ]; }
_last_above() { awk -v v="$(last "$1" "$2")" -v t="$3" 'BEGIN { exit !(v != "" && v + 0 > t) }'; }

start_control_broker
run reset
expect_rc 0 "reset"
run write 10 --quiet
expect_rc 0 "write 10"

step "1. a quiet start"
start_relay relay-1
LEADER_PID=$R_PID
record &
RECORDER_PID=$!
PIDS+=("$RECORDER_PID")
wait_for 20 "$LEADER_PID" "10 rows published" _last_is relay-1 outbox_published_rows 10
wait_samples 8

step "2. a poison row, parked after 5 attempts"
sqlite3 -bail "$DB" <<'SQL' || die "sqlite3 could not insert the poison row"
.timeout 5000
INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at)
  VALUES ('evt-9001', 'L-9001', 'LoanCreated',
          json_object('eventId', 'evt-9001', 'note', printf('%.*c', 10240, 'x')),
          CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
SQL
wait_for 60 "$LEADER_PID" "the poison row parked (outbox_parked_rows 1)" _last_is relay-1 outbox_parked_rows 1
wait_samples 8

step "3. the broker down for 20 samples; rows written, 3 of them 10 minutes old"
broker_ctl down
run write 2 --quiet
LD_PRELOAD=$FAKETIME_LIB FAKETIME=-10m run write 3 --quiet
expect_rc 0 "write 3 with the clock 10 minutes behind"
run status
wait_for 20 "$LEADER_PID" "oldest pending age above 300 s" _last_above relay-1 outbox_oldest_pending_age_seconds 300
# The broker probe runs once a second on its own thread: wait for its verdict, do not race it.
_readyz_names_broker() {
  curl -s -m 5 -o "$TMP/readyz.body" -w 'HTTP %{http_code}\n' \
    "http://127.0.0.1:$(http_port "$TMP/relay-1.log")/readyz" > "$TMP/readyz.code" &&
    grep -q '^broker unreachable: ' "$TMP/readyz.body"
}
wait_for 20 "$LEADER_PID" "/readyz naming the broker unreachable" _readyz_names_broker
echo "\$ curl http://127.0.0.1:$(http_port "$TMP/relay-1.log")/readyz"
cat "$TMP/readyz.code" "$TMP/readyz.body"
expect_line '^backlog too old: the oldest pending row is [0-9]+(m|s|ms)[^ ]* old, above --ready-max-age 5m$' "$TMP/readyz.body"
expect_line '^broker unreachable: ' "$TMP/readyz.body"
wait_samples 20
FAILED=$(last relay-1 outbox_relay_failed_deliveries_total)
echo "failed deliveries so far: $FAILED"
awk -v f="$FAILED" 'BEGIN { exit !(f > 10) }' || fail "outbox_relay_failed_deliveries_total $FAILED, expected above 10"
broker_ctl up
wait_for 60 "$LEADER_PID" "the backlog drained" _last_is relay-1 outbox_pending_rows 0
wait_samples 8

step "4. four leader takeovers"
for n in 2 3 4 5; do
  start_relay "relay-$n"
  NEXT_PID=$R_PID
  kill9 "$LEADER_PID"
  dead "relay-$((n - 1))"
  wait_for 20 "$NEXT_PID" "relay-$n leads (token $n)" _last_is "relay-$n" outbox_relay_leader 1
  expect_eq "$n" "$(last "relay-$n" outbox_leader_token)" "outbox_leader_token after takeover $((n - 1))"
  LEADER_PID=$NEXT_PID
done
expect_eq 0 "$(last relay-1 up)" "up of killed relay-1"
wait_samples 8

step "5. the last leader killed"
kill9 "$LEADER_PID"
dead relay-5
wait_samples 8
touch "$TMP/stop-recording"
wait_exit "$RECORDER_PID" 10 "the recorder"

# promtool input_series: one series per instance and metric the rules read, one value per
# sample ('_': none), in a stable order.
N=$(cat "$TMP/sample-index")
RULE_METRICS="up outbox_relay_healthy outbox_oldest_pending_age_seconds outbox_parked_rows"
RULE_METRICS+=" outbox_leader_token outbox_relay_failed_deliveries_total outbox_relay_acked_rows_total"
sort -k2,2 -k3,3 -k1,1n "$SAMPLES" | awk -v n="$N" -v wanted="$RULE_METRICS" '
  BEGIN { split(wanted, w, " "); for (i in w) keep[w[i]] = 1 }
  !($3 in keep) { next }
  { key = $3 "{job=\"outbox-relay\",instance=\"" $2 "\"}"; v[key, $1] = $4; if (!(key in seen)) { seen[key] = 1; order[++count] = key } }
  END {
    for (c = 1; c <= count; c++) {
      k = order[c]
      line = ""
      for (i = 1; i <= n; i++) line = line ((k, i) in v ? v[k, i] : "_") (i < n ? " " : "")
      print "      - series: '\''" k "'\''\n        values: '\''" line "'\''"
    }
  }' >"$TMP/series.yml"
echo "recorded $N samples of $(grep -c 'series:' "$TMP/series.yml") series"
if [ -n "${ALERTS_RECORD_OUT:-}" ]; then
  cp "$SAMPLES" "${ALERTS_RECORD_OUT%.yml}.samples"
  cp "$TMP/series.yml" "$ALERTS_RECORD_OUT"
  echo "series written to $ALERTS_RECORD_OUT"
fi
finish
