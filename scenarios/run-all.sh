#!/usr/bin/env bash
# Runs every scenario (scenarios/*.sh but lib.sh and this file), one after another, each in its own
# temp dir with its own broker. Prints each verdict line; a failed scenario's whole log follows
# its verdict. Ends with `N passed, N failed, N skipped` and exits 1 if any failed. A scenario
# skips only by exiting 77 with a `SKIP <name>: why` line (the PostgreSQL scenarios without
# OUTBOX_PG_URL, lib.sh require_postgres).
# OUTBOX_LAB_BIN and KAFKA_BOOTSTRAP_SERVERS are passed through (see lib.sh).
set -u
dir=$(cd "$(dirname "$0")" && pwd)
self=$(basename "$0")
passed=0
failed=0
skipped=0
log=$(mktemp "${TMPDIR:-/tmp}/outbox-lab-run-all.XXXXXX") || exit 1
trap 'rm -f -- "$log"' EXIT

for script in "$dir"/*.sh; do
  name=$(basename "$script" .sh)
  case "$(basename "$script")" in lib.sh | "$self") continue ;; esac
  bash "$script" >"$log" 2>&1
  rc=$?
  verdict=$(grep -E "^(PASS|FAIL|SKIP) $name(:|\$)" "$log" | tail -n 1)
  if [ "$rc" -eq 77 ] && [ "${verdict%%:*}" = "SKIP $name" ]; then
    skipped=$((skipped + 1))
    echo "$verdict"
  elif [ "$rc" -eq 0 ] && [ "$verdict" = "PASS $name" ]; then
    passed=$((passed + 1))
    echo "$verdict"
  else
    failed=$((failed + 1))
    echo "${verdict:-FAIL $name: exited $rc without a verdict}"
    sed 's/^/    | /' "$log"
  fi
done

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
