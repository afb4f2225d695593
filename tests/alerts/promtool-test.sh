#!/usr/bin/env bash
# Runs `promtool test rules` over alerts_test.head.yml + recorded-series.yml +
# alerts_test.expect.yml (ctest: promtool-test-rules).
set -euo pipefail
dir=$(cd "$(dirname "$0")" && pwd)
command -v promtool >/dev/null || { echo "outbox-lab: error: promtool is missing (scripts/install-deps.sh: package prometheus)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The rule file's path is relative to the test file: name it absolutely for the copy in $tmp.
sed "s|\.\./\.\./deploy/|$dir/../../deploy/|" "$dir/alerts_test.head.yml" |
  cat - "$dir/recorded-series.yml" "$dir/alerts_test.expect.yml" >"$tmp/alerts_test.yml"
promtool test rules "$tmp/alerts_test.yml"
