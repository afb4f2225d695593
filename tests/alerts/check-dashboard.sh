#!/usr/bin/env bash
# deploy/grafana/outbox.json is valid JSON, every panel has a target, and every PromQL expression
# in it parses (promtool check rules over a recording rule per expression); run by ctest as
# grafana-dashboard-check.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
dash=$repo/deploy/grafana/outbox.json
jq -e '.title == "Outbox relay" and (.panels | length > 0) and all(.panels[]; (.targets | length) > 0)' \
  "$dash" >/dev/null || { echo "outbox-lab: error: $dash: not a dashboard with targets in every panel" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{
  echo "groups:"
  echo "  - name: dashboard"
  echo "    rules:"
  jq -r '.panels[].targets[].expr' "$dash" | awk '{ gsub(/\x27/, "\x27\x27"); printf "      - record: dashboard:expr%d\n        expr: \x27%s\x27\n", NR, $0 }'
} >"$tmp/rules.yml"
promtool check rules "$tmp/rules.yml"
