#!/usr/bin/env bash
# The chapter's HTML report, opened in a real browser (issue 11).
# Injects: nothing of its own: it runs scenarios/outbox-crash.sh (the chapter's two kill -9s) with
#          --report, then opens the page it wrote in headless Chromium twice, once for the DOM
#          (--dump-dom, with a network log) and once for a screenshot.
# Expects: the DOM after the page's script ran shows 8 Kafka cells, 3 of them outlined as
#          duplicates, the verdict "valid", exactly two kill marks, on the lanes of the two PIDs
#          outbox-crash.sh killed; the page made no network request. The request detector is
#          itself checked first on a control page that makes one.
# The screenshot is kept under the build directory ($OUTBOX_LAB_ARTIFACTS, default
# <build>/artifacts/report-chapter.png); `--screenshot FILE` also copies it to FILE (README's
# docs/report-chapter.png: ./run.sh report-screenshot). Needs chromium: scripts/install-deps.sh
# --with-browser (scripts/test.sh does it).
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

copy_to=""
while [ $# -gt 0 ]; do
  case "$1" in
    --screenshot) copy_to=${2:-}; shift 2 || die "--screenshot needs a file" ;;
    *) die "unknown argument '$1'; usage: report-browser.sh [--screenshot FILE] [--report DIR]" ;;
  esac
done

CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
[ -n "$CHROMIUM" ] || die "chromium is not installed: run scripts/install-deps.sh --with-browser"
ARTIFACTS=${OUTBOX_LAB_ARTIFACTS:-$(dirname "$LAB_BIN")/artifacts}
mkdir -p "$ARTIFACTS" || die "cannot create $ARTIFACTS"
SCREENSHOT=$ARTIFACTS/report-chapter.png

# Headless, its own profile, no background services, every proxied request sent to a closed port
# (127.0.0.1:9, discard, is not listening): even a request that slipped through reaches nothing.
# The network log records what was attempted.
chromium_run() {
  local netlog=$1
  shift
  timeout -k 5 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --disable-default-apps --hide-scrollbars --user-data-dir="$TMP/chromium-profile" \
    --proxy-server=127.0.0.1:9 --log-net-log="$netlog" "$@" 2>>"$TMP/chromium.err"
}

# page_requests NETLOG: the URLs the page (a file:// top frame) asked the network for, one a
# line. Chromium's own background requests (updates, time) belong to no page: they are left out.
page_requests() {
  python3 - "$1" <<'PY'
import json, sys
log = json.load(open(sys.argv[1]))
names = {v: k for k, v in log["constants"]["logEventTypes"].items()}
for event in log["events"]:
    params = event.get("params", {})
    if names.get(event["type"]) != "URL_REQUEST_START_JOB":
        continue
    url = params.get("url", "")
    if "file://" in params.get("network_isolation_key", "") and not url.startswith("file:"):
        print(url)
PY
}

step "control: the request detector sees a page that does make a request"
control=$TMP/control.html
echo '<!DOCTYPE html><html><body><img src="http://192.0.2.1/x.png"></body></html>' >"$control"
if chromium_run "$TMP/control-netlog.json" --dump-dom "file://$control" >/dev/null; then
  requests=$(page_requests "$TMP/control-netlog.json") || fail "cannot read the control's network log"
  echo "control page requests: ${requests:-none}"
  [ "$requests" = "http://192.0.2.1/x.png" ] ||
    fail "the detector missed the control page's request (got '${requests}'): it proves nothing"
else
  tail -n 20 "$TMP/chromium.err" | sed 's/^/  (chromium) /'
  die "chromium could not open the control page"
fi

step "the chapter's run, with its report"
echo "\$ bash scenarios/outbox-crash.sh --report $TMP/report"
OUTBOX_LAB_REPORT_DIR= bash "$SCENARIO_DIR/outbox-crash.sh" --report "$TMP/report" >"$TMP/chapter.log" 2>&1
chapter_rc=$?
grep -E '^(\$ kill -9|\[report\]|report:|PASS|FAIL)' "$TMP/chapter.log"
[ "$chapter_rc" -eq 0 ] || { sed 's/^/  | /' "$TMP/chapter.log" | tail -n 40; die "outbox-crash.sh failed"; }
HTML=$TMP/report/outbox-crash.html
[ -s "$HTML" ] || die "outbox-crash.sh --report wrote no $HTML"
mapfile -t killed < <(sed -n 's/^\$ kill -9 \([0-9][0-9]*\)$/\1/p' "$TMP/chapter.log")
expect_eq 2 "${#killed[@]}" "kill -9s in the chapter's run"
echo "killed: ${killed[*]}; page: $(wc -c <"$HTML") bytes"
if grep -E -q -i '(src|href|action)[[:space:]]*=[[:space:]]*["'"'"']?[[:space:]]*(https?:)?//' "$HTML"; then
  fail "the page references a network resource: $(grep -E -o -i '(src|href|action)=.{0,60}//[^"]*' "$HTML" | head -n 1)"
fi

step "open it in headless Chromium: the DOM after its script ran"
start=$(_now_us)
chromium_run "$TMP/netlog.json" --dump-dom "file://$HTML" >"$TMP/dom.html" ||
  die "chromium --dump-dom failed: $(tail -n 1 "$TMP/chromium.err")"
wall_ms=$((($(_now_us) - start) / 1000))
echo "chromium --dump-dom: ${wall_ms} ms wall (start-up included)"
python3 - "$TMP/dom.html" "${killed[@]}" >"$TMP/dom-check.txt" <<'PY'
import sys
from html.parser import HTMLParser

class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack = []          # (tag, attrs) of open elements
        self.cells = []          # classes of Kafka cells
        self.kills = []          # (pid of the kill, data-process of its lane)
        self.verdict = None
        self.verdict_text = ""
        self.in_verdict_text = False
        self.loaded_ms = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "html":
            self.loaded_ms = a.get("data-loaded-ms")
        if "cell" in classes and any(t == "svg" and x.get("id") == "kafka" for t, x in self.stack):
            self.cells.append(classes)
        if "kill" in classes:
            lanes = [x for t, x in self.stack if "lane" in (x.get("class") or "").split()]
            self.kills.append((a.get("data-process"), lanes[-1].get("data-process") if lanes else None,
                               lanes[-1].get("data-name") if lanes else None))
        if a.get("id") == "verdict":
            self.verdict = a.get("data-valid")
        if a.get("id") == "verdict-text":
            self.in_verdict_text = True
        if tag not in ("meta", "br", "img", "input", "link"):  # HTML's void elements have no end tag
            self.stack.append((tag, a))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        self.handle_endtag(tag)

    def handle_endtag(self, tag):
        self.in_verdict_text = False
        if any(t == tag for t, _ in self.stack):
            while self.stack.pop()[0] != tag:
                pass

    def handle_data(self, data):
        if self.in_verdict_text:
            self.verdict_text += data

page = Page()
page.feed(open(sys.argv[1], encoding="utf-8").read())
killed = sorted(sys.argv[2:])
print("cells", len(page.cells))
print("outlined", sum("dup" in c for c in page.cells))
print("verdict", page.verdict, page.verdict_text.strip())
print("kills", " ".join(sorted(f"{k}@{lane}:{name}" for k, lane, name in page.kills)))
print("kills-on-killed-lanes", sorted(k for k, lane, _ in page.kills if k == lane) == killed)
print("loaded-ms", page.loaded_ms)
PY
cat "$TMP/dom-check.txt"
expect_line '^cells 8$' "$TMP/dom-check.txt"
expect_line '^outlined 3$' "$TMP/dom-check.txt"
expect_line '^verdict true valid$' "$TMP/dom-check.txt"
expect_line '^kills-on-killed-lanes True$' "$TMP/dom-check.txt"
expect_line '^loaded-ms [0-9]+$' "$TMP/dom-check.txt"
for pid in "${killed[@]}"; do
  expect_line "^kills .*\b$pid@$pid:(write-hold|publish-hold)\b" "$TMP/dom-check.txt"
done
requests=$(page_requests "$TMP/netlog.json") || fail "cannot read the network log"
[ -z "$requests" ] || fail "the page made network requests: $(echo "$requests" | head -n 3 | paste -s -d ' ')"
echo "page requests: ${requests:-none}"

step "a screenshot"
rm -f "$SCREENSHOT"
chromium_run "$TMP/netlog-shot.json" --window-size=1280,1400 --screenshot="$SCREENSHOT" "file://$HTML" \
  >/dev/null || die "chromium --screenshot failed: $(tail -n 1 "$TMP/chromium.err")"
[ -s "$SCREENSHOT" ] || fail "no screenshot at $SCREENSHOT"
[ "$(head -c 8 "$SCREENSHOT" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$SCREENSHOT is not a PNG"
echo "screenshot: $SCREENSHOT ($(wc -c <"$SCREENSHOT") bytes)"
if [ -n "$copy_to" ]; then
  cp "$SCREENSHOT" "$copy_to" || fail "cannot copy the screenshot to $copy_to"
  echo "copied to $copy_to"
fi

finish
