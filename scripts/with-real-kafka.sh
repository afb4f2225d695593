#!/usr/bin/env bash
# The real-Kafka fixture of the test suite (ctest label real-kafka; scenarios/CMakeLists.txt):
#
#   scripts/with-real-kafka.sh start          start the suite's one-node Kafka 4.3.0 afresh
#                                             (kafka.sh destroy, then start)
#   scripts/with-real-kafka.sh stop           stop it (kafka.sh stop)
#   scripts/with-real-kafka.sh SCENARIO.sh [ARGS...]
#                                             run a scenario against it: KAFKA_BOOTSTRAP_SERVERS is
#                                             its address, so lib.sh's start_broker uses it with a
#                                             topic of the scenario's own
#
# ctest starts the broker once per test run (FIXTURES_SETUP) and stops it at the end
# (FIXTURES_CLEANUP); the cluster's folder and port come from OUTBOX_KAFKA_DIR and
# OUTBOX_KAFKA_PORT, which the CMake file sets apart from a developer's own (39092).
set -euo pipefail
kafka=$(cd "$(dirname "$0")" && pwd)/kafka.sh
case ${1:-} in
  # A fresh cluster for each test run: topics of an earlier run (the folder is the build tree's)
  # would hold records that a scenario reading a whole topic does not expect.
  # The first consumer group on a new cluster waits for Kafka to create __consumer_offsets (a few
  # seconds): a scenario's consume that came first timed out there. One group read here warms it.
  start)
    "$kafka" destroy >/dev/null
    addr=$("$kafka" start --nodes 1)
    echo warm-up | kcat -b "$addr" -P -t outbox-lab-warmup 2>/dev/null
    timeout 120 kcat -b "$addr" -G outbox-lab-warmup -o beginning -e -q outbox-lab-warmup >/dev/null 2>&1 ||
      { echo "outbox-lab: error: with-real-kafka.sh: no consumer group could read from $addr within 120 s" >&2; exit 1; }
    echo "$addr"
    ;;
  stop) "$kafka" stop ;;
  '' | -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  *)
    KAFKA_BOOTSTRAP_SERVERS=$("$kafka" address) || {
      echo "FAIL $(basename "$1" .sh): no real Kafka running (the fixture real-kafka.start did not start it)"
      exit 1
    }
    export KAFKA_BOOTSTRAP_SERVERS
    exec bash "$@"
    ;;
esac
