#!/usr/bin/env bash
# relay --http: the endpoint an operator scrapes and probes, and the parked rows over HTTP.
# Injects, against one relay on an embedded broker with a control socket (-X message.max.bytes
# =2000, --max-attempts 1, --ready-max-age 30s, a token file naming "oncall"):
#   - a poison row (10 KB payload, refused locally at every attempt): parked at once;
#   - bad input while the relay publishes 20 more rows: an unknown path, a POST without a token
#     and with a wrong one, malformed JSON, a 1 MB body, a bad query parameter, and a client that
#     sends half a request and stalls;
#   - an unpark by filter with the token; the broker stopped (broker-ctl down) and started again;
#   - a relay paused at a failpoint (relay.after_claim) so its loop stops turning;
#   - a kill -9 of the relay.
# Expects: /metrics passes `promtool check metrics` and reports outbox_parked_rows 1 once the
# poison is parked; /healthz and /readyz answer 200 with "ok"; every bad request gets its 4xx
# (404, 401, 401, 400, 413, 400) and the slow client is dropped, while all 20 new rows are
# published meanwhile; GET /parked lists the poison row by aggregate; the unpark answers 200 with
# by=oncall and the relay logs "unpark by 'oncall': 1 rows"; with the broker down /readyz answers
# 503 "broker unreachable" and outbox_relay_ready 0, and 200 again once it is up; the paused
# relay's /healthz answers 503 "relay loop stalled" and its outbox_relay_last_loop_age_seconds
# exceeds the stall limit (the "relay down" alert's loop rule) while /metrics is still served;
# after kill -9 the endpoint refuses connections (the alert's "no scrape" rule).
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

command -v curl >/dev/null || die "curl is missing (scripts/install-deps.sh installs it)"
command -v promtool >/dev/null || die "promtool is missing (scripts/install-deps.sh: package prometheus)"

start_control_broker
run reset
expect_rc 0 "reset"
run write 10 --quiet
expect_rc 0 "write 10"
echo "\$ sqlite3 $DB  # evt-9001, a 10 KB payload on aggregate L-9001"
sqlite3 -bail "$DB" <<'SQL' || die "sqlite3 could not insert the poison row"
.timeout 5000
INSERT INTO outbox(event_id, aggregate_id, event_type, payload, created_at)
  VALUES ('evt-9001', 'L-9001', 'LoanCreated',
          json_object('eventId', 'evt-9001', 'note', printf('%.*c', 10240, 'x')),
          CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
SQL

TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '# who may unpark\noncall:%s\n' "$TOKEN" >"$TMP/tokens"

# http_port LOG: the port of the relay's "[relay] http: listening on HOST:PORT" line.
http_port() { sed -n 's/^\[relay\] http: listening on [^ ]*:\([0-9][0-9]*\) .*/\1/p' "$1" | head -n 1; }
# req NAME CURL-ARGS...: one request; the status in $CODE, the body in $TMP/NAME.body (printed).
req() {
  local name=$1
  shift
  echo "\$ curl $*"
  CODE=$(curl -s -m 10 -o "$TMP/$name.body" -w '%{http_code}' "$@")
  echo "HTTP $CODE"
  head -c 2000 "$TMP/$name.body" | sed 's/^/  | /'
}
# metric NAME: its value in the last /metrics body.
metric() { awk -v n="$1" '$1 == n { print $2 }' "$TMP/metrics.body"; }
_metric_is() {
  curl -s -m 5 -o "$TMP/metrics.body" "http://127.0.0.1:$PORT/metrics" && [ "$(metric "$1")" = "$2" ]
}
_status_is() { [ "$(curl -s -m 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT$1")" = "$2" ]; }

step "relay --http on a free loopback port"
start_bg relay relay --http 127.0.0.1:0 --http-token-file "$TMP/tokens" --ready-max-age 30s \
  --max-attempts 1 --idle-max 200ms --lease 4s --delivery-timeout 2s -X message.max.bytes=2000
RELAY_PID=$BG_PID
RELAY_LOG=$BG_LOG
wait_for 20 "$RELAY_PID" "http listening line" _has_line '^\[relay\] http: listening on 127.0.0.1:' "$RELAY_LOG" ||
  die "relay --http never listened: $(cat "$RELAY_LOG")"
PORT=$(http_port "$RELAY_LOG")
echo "endpoint: http://127.0.0.1:$PORT"
wait_for 20 "$RELAY_PID" "the poison row parked" _metric_is outbox_parked_rows 1
wait_for 20 "$RELAY_PID" "the 10 rows published" _metric_is outbox_pending_rows 0

step "GET /metrics, /healthz, /readyz"
req metrics "http://127.0.0.1:$PORT/metrics"
expect_eq 200 "$CODE" "/metrics status"
expect_eq 1 "$(metric outbox_parked_rows)" "outbox_parked_rows"
expect_eq 1 "$(metric outbox_relay_leader)" "outbox_relay_leader"
expect_eq 1 "$(metric outbox_relay_healthy)" "outbox_relay_healthy"
echo "\$ promtool check metrics < metrics.body"
promtool check metrics <"$TMP/metrics.body" >"$TMP/promtool.out" 2>&1
PROMTOOL_RC=$?
cat "$TMP/promtool.out"
expect_eq 0 "$PROMTOOL_RC" "promtool check metrics exit"
req healthz "http://127.0.0.1:$PORT/healthz"
expect_eq 200 "$CODE" "/healthz status"
expect_eq ok "$(cat "$TMP/healthz.body")" "/healthz body"
req readyz "http://127.0.0.1:$PORT/readyz"
expect_eq 200 "$CODE" "/readyz status"

step "GET /parked by aggregate"
req parked "http://127.0.0.1:$PORT/parked?aggregate=L-9001"
expect_eq 200 "$CODE" "/parked status"
expect_eq '1 evt-9001 1' "$(jq -r '"\(.matched) \(.rows[0].event_id) \(.rows[0].attempts)"' "$TMP/parked.body")" \
  "/parked?aggregate=L-9001 (matched event attempts)"
req parked-none "http://127.0.0.1:$PORT/parked?aggregate=L-1001"
expect_eq 0 "$(jq -r .matched "$TMP/parked-none.body")" "/parked?aggregate=L-1001 matched"

step "bad input while the relay publishes 20 more rows"
# A client that sends half a request and then nothing: held open on fd 3.
exec 3<>"/dev/tcp/127.0.0.1/$PORT" || die "cannot connect to the endpoint"
printf 'POST /parked/unpark HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n' >&3
SLOW_AT=$(_now_us)
run write 20 --quiet
expect_rc 0 "write 20"
req unknown "http://127.0.0.1:$PORT/admin"
expect_eq 404 "$CODE" "unknown path"
req no-token -X POST -d '{"ids":[11]}' "http://127.0.0.1:$PORT/parked/unpark"
expect_eq 401 "$CODE" "unpark without a token"
req wrong-token -X POST -H "Authorization: Bearer 0000000000000000" -d '{"ids":[11]}' \
  "http://127.0.0.1:$PORT/parked/unpark"
expect_eq 401 "$CODE" "unpark with a wrong token"
req malformed -X POST -H "Authorization: Bearer $TOKEN" -d '{"ids":[11,' "http://127.0.0.1:$PORT/parked/unpark"
expect_eq 400 "$CODE" "unpark with malformed JSON"
head -c 1048576 /dev/zero | tr '\0' '[' >"$TMP/huge.json"
req huge -X POST -H "Authorization: Bearer $TOKEN" --data-binary "@$TMP/huge.json" \
  "http://127.0.0.1:$PORT/parked/unpark"
expect_eq 413 "$CODE" "unpark with a 1 MB body"
req bad-query "http://127.0.0.1:$PORT/parked?limit=abc"
expect_eq 400 "$CODE" "/parked?limit=abc"
wait_for 20 "$RELAY_PID" "the 20 new rows published meanwhile" _metric_is outbox_pending_rows 0
expect_eq 30 "$(metric outbox_published_rows)" "outbox_published_rows"
# The server drops the silent client after its 5 s read timeout: EOF on fd 3.
echo "\$ read from the stalled client's socket"
SLOW_EOF=no
if read -r -t 15 -u 3 _line || [ $? -ne 142 ]; then SLOW_EOF=yes; fi
exec 3>&-
echo "stalled client dropped: $SLOW_EOF after $((($(_now_us) - SLOW_AT) / 1000)) ms"
expect_eq yes "$SLOW_EOF" "stalled client dropped by the server"
kill -0 "$RELAY_PID" 2>/dev/null || fail "the relay died during the bad input"

step "POST /parked/unpark by filter with the token"
req unpark -X POST -H "Authorization: Bearer $TOKEN" \
  -d '{"filter":{"aggregate":"L-9001","error":"too large"},"max":5}' "http://127.0.0.1:$PORT/parked/unpark"
expect_eq 200 "$CODE" "unpark status"
expect_eq 'oncall 1' "$(jq -r '"\(.by) \(.unparked)"' "$TMP/unpark.body")" "unpark (by unparked)"
wait_for 15 "$RELAY_PID" "the unpark log line" _has_line "^\[relay\] http: unpark by 'oncall': 1 rows unparked (ids 11)" "$RELAY_LOG"
# Still too large for the producer: parked again at its one attempt.
wait_for 20 "$RELAY_PID" "the poison row parked again" _metric_is outbox_relay_parked_rows_total 2

step "broker down: /readyz 503, then up again: 200"
broker_ctl down
wait_for 15 "$RELAY_PID" "/readyz 503 with the broker down" _status_is /readyz 503
req readyz-down "http://127.0.0.1:$PORT/readyz"
expect_line '^broker unreachable: ' "$TMP/readyz-down.body"
wait_for 15 "$RELAY_PID" "outbox_relay_ready 0" _metric_is outbox_relay_ready 0
req healthz-down "http://127.0.0.1:$PORT/healthz"
expect_eq 200 "$CODE" "/healthz with the broker down (the loop still turns)"
broker_ctl up
wait_for 15 "$RELAY_PID" "/readyz 200 with the broker up" _status_is /readyz 200

step "kill -9 the relay: the endpoint is gone"
kill9 "$RELAY_PID"
req gone "http://127.0.0.1:$PORT/metrics"
expect_eq 000 "$CODE" "/metrics after kill -9 (no answer)"

step "a relay whose loop stands still: /healthz 503"
run write 1 --quiet
echo "(OUTBOX_FAILPOINTS='relay.after_claim=pause')"
OUTBOX_FAILPOINTS='relay.after_claim=pause' start_bg stalled relay --http 127.0.0.1:0 \
  --health-factor 1 --idle-max 100ms --delivery-timeout 1s --lease 3s -X message.max.bytes=2000
STALLED_PID=$BG_PID
wait_paused "$STALLED_PID" "$BG_LOG" relay.after_claim
PORT=$(http_port "$BG_LOG")
# Stall limit: 1 x 100ms + 1s + 5s.
expect_line 'healthz stall limit 6100ms$' "$BG_LOG"
wait_for 15 "$STALLED_PID" "/healthz 503 while paused" _status_is /healthz 503
req healthz-stalled "http://127.0.0.1:$PORT/healthz"
expect_line '^relay loop stalled: no turn for [0-9.]+m?s \(limit 6100ms' "$TMP/healthz-stalled.body"
req metrics-stalled "http://127.0.0.1:$PORT/metrics"
cp "$TMP/metrics-stalled.body" "$TMP/metrics.body"
expect_eq 200 "$CODE" "/metrics while the loop is stalled"
awk '$1 == "outbox_relay_last_loop_age_seconds" { exit !($2 > 6.1) }' "$TMP/metrics.body" ||
  fail "outbox_relay_last_loop_age_seconds $(metric outbox_relay_last_loop_age_seconds) is not above 6.1"
expect_eq 0 "$(metric outbox_relay_healthy)" "outbox_relay_healthy while stalled"
release "$STALLED_PID"
wait_for 15 "$STALLED_PID" "/healthz 200 after the release" _status_is /healthz 200
kill -TERM "$STALLED_PID"
wait_exit "$STALLED_PID" 20 "the released relay"
expect_eq 0 "$BG_RC" "relay exit after SIGTERM"

finish
