#!/usr/bin/env bash
# The test command (README, .ci/run): installs what is missing, builds, checks the test names,
# runs the Catch2 binary once directly, then every unit test case and every crash scenario under
# ctest. It fails unless the direct run's count of test cases equals ctest's count of unit
# entries: a name that discovery split or mangled would otherwise give entries that run nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --with-browser --with-kafka  # report-browser.sh; real Kafka (scripts/kafka.sh)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=ON >/dev/null
cmake --build build -j"$(nproc)"

scripts/check-test-names.sh build/tests/outbox_tests

# The [postgres] tests run against a real server (scripts/postgres.sh: initdb into a temp dir,
# loopback only); they fail, never skip, without it.
OUTBOX_PG_URL=$(scripts/postgres.sh start)
export OUTBOX_PG_URL
echo "test.sh: PostgreSQL at $OUTBOX_PG_URL"

report=build/catch-direct.xml
if ! build/tests/outbox_tests -w NoTests -r xml -o "$report"; then
  echo "test.sh: the Catch2 binary run directly failed; see $report" >&2
  exit 1
fi
direct=$(grep -c '<TestCase ' "$report")
unit=$(ctest --test-dir build -N -L unit | grep -c '^ *Test *#')
if [ "$direct" -ne "$unit" ]; then
  echo "test.sh: Catch2 ran $direct test cases directly, ctest has $unit unit entries" >&2
  exit 1
fi
echo "test.sh: Catch2 run directly: $direct test cases passed; ctest unit entries: $unit"

ctest --test-dir build --output-on-failure -j2 "$@"
