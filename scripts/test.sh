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

# The real-Kafka scenarios listen on fixed loopback ports (39092-40699: a cluster on port P takes
# P.. for its brokers and P+100.. for its controllers; see each scenario's OUTBOX_KAFKA_*_PORT),
# as do the extra PostgreSQL servers of the pg-* scenarios (55432-55499). The embedded broker and
# every client socket take ephemeral ports from net.ipv4.ip_local_port_range (32768-60999 on
# Debian), so one of them may sit on a fixed port by chance and a scenario's server then cannot
# start. As root (CI), keep those blocks out of ephemeral use until the next boot
# (net.ipv4.ip_local_reserved_ports, Linux's ip-sysctl docs); otherwise say that a clash can happen.
reserved=39000-40999,55432-55499
if [ "$(id -u)" -eq 0 ] && { echo "$reserved" >/proc/sys/net/ipv4/ip_local_reserved_ports; } 2>/dev/null; then
  echo "test.sh: ports $reserved reserved from ephemeral use (net.ipv4.ip_local_reserved_ports)"
else
  echo "test.sh: not root: ports $reserved stay open to ephemeral use; a real-Kafka scenario may rarely fail to bind one" >&2
fi

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
