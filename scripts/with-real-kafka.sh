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
  start) "$kafka" destroy >/dev/null && "$kafka" start --nodes 1 ;;
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
