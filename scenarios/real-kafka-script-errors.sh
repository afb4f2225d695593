#!/usr/bin/env bash
# scripts/kafka.sh on bad input: each mistake gets one `outbox-lab: error: kafka.sh: ...` line
# that says what to do, and an exit code of its own, never a stack trace.
# Injects: a wrong --nodes and an unknown command (exit 2); no Java and no Maven on the PATH
#          (exit 4, naming install-deps.sh --with-kafka); Maven Central unreachable (a settings
#          file whose mirror is a closed loopback port, an empty local repository: exit 6); the
#          client port taken by another process (exit 7, naming the port); a data folder formatted
#          for another cluster id (exit 8, naming both ids and the fix); status and address of a
#          cluster that does not run (exit 3); the lab's broker-ctl without the embedded broker's
#          control socket (exit 3, pointing to kafka.sh kill).
# Expects: those codes and lines, and no Java exception text on stderr.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

KAFKA=$REPO_DIR/scripts/kafka.sh
export OUTBOX_KAFKA_DIR=$TMP/kafka OUTBOX_KAFKA_PORT=${OUTBOX_KAFKA_ERRORS_PORT:-39992}

# ks ARGS...: kafka.sh with stdout in $OUT, stderr in $ERR, exit code in $RC.
ks() {
  RUNS=$((RUNS + 1))
  OUT=$TMP/ks-$RUNS.out ERR=$TMP/ks-$RUNS.err
  echo "\$ scripts/kafka.sh $*"
  timeout 300 "$KAFKA" "$@" </dev/null >"$OUT" 2>"$ERR"
  RC=$?
  cat "$OUT"
  sed 's/^/  (stderr) /' "$ERR"
  [ "$RC" -eq 0 ] || echo "  (exit $RC)"
}

# one_error WHAT ERE: stderr is exactly one error line, matching ERE, and no Java stack trace.
one_error() {
  expect_eq 1 "$(grep -c '^outbox-lab: error: kafka.sh: ' "$ERR")" "$1: error lines"
  expect_line "$2" "$ERR"
  expect_no_line 'Exception|^\s+at [a-z]' "$ERR"
}

# A PATH with every tool of /usr/bin and /bin but java and mvn (and their alternatives).
mkdir -p "$TMP/bin"
for dir in /usr/local/bin /usr/bin /bin; do
  for tool in "$dir"/*; do
    name=$(basename "$tool")
    case $name in java | javac | mvn | mvnDebug) continue ;; esac
    [ -e "$TMP/bin/$name" ] || ln -s "$tool" "$TMP/bin/$name"
  done
done

step "usage mistakes: exit 2"
ks start --nodes 2
expect_rc 2 "start --nodes 2"
one_error "start --nodes 2" "--nodes must be 1 or 3, got '2'"
ks frobnicate
expect_rc 2 "an unknown command"
one_error "an unknown command" "unknown command 'frobnicate'"

step "nothing runs: status and address exit 3"
ks status
expect_rc 3 "status of no cluster"
ks address
expect_rc 3 "address of no cluster"
one_error "address of no cluster" "not running .*run scripts/kafka.sh start"

step "no Java, no Maven: exit 4 with the install command"
PATH=$TMP/bin ks start
expect_rc 4 "start without Java"
one_error "start without Java" "Java is not installed; run scripts/install-deps.sh --with-kafka"
OUTBOX_KAFKA_CACHE=$TMP/empty-cache PATH=$TMP/bin:$(dirname "$(readlink -f "$(command -v java)")") ks fetch
expect_rc 4 "fetch without Maven"
one_error "fetch without Maven" "Maven is not installed; run scripts/install-deps.sh --with-kafka"

step "Maven Central unreachable: exit 6"
mkdir -p "$TMP/home/.m2"
cat >"$TMP/home/.m2/settings.xml" <<'EOF'
<settings>
  <localRepository>EMPTY_REPO</localRepository>
  <mirrors>
    <mirror><id>closed</id><mirrorOf>*</mirrorOf><url>http://127.0.0.1:9/maven2</url></mirror>
  </mirrors>
</settings>
EOF
sed -i "s|EMPTY_REPO|$TMP/home/.m2/empty-repository|" "$TMP/home/.m2/settings.xml"
OUTBOX_KAFKA_MAVEN_SETTINGS=$TMP/home/.m2/settings.xml OUTBOX_KAFKA_CACHE=$TMP/unreachable-cache ks fetch
expect_rc 6 "fetch with the registry unreachable"
one_error "fetch with the registry unreachable" "cannot reach Maven Central to fetch Kafka 4.3.0 .*then run again"

step "the client port in use: exit 7, naming it"
python3 -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1); print("listening", flush=True); time.sleep(120)
' "$OUTBOX_KAFKA_PORT" >"$TMP/squatter.log" 2>&1 &
squatter=$!
PIDS+=("$squatter")
wait_for 10 "$squatter" "the squatter's listening line" _has_line listening "$TMP/squatter.log" || die "could not take port $OUTBOX_KAFKA_PORT"
ks start
expect_rc 7 "start on a port in use"
one_error "start on a port in use" "port $OUTBOX_KAFKA_PORT \(node 1\) is in use.*set OUTBOX_KAFKA_PORT"
_stop_pid "$squatter"
_forget_pid "$squatter"

step "broker-ctl's faults are the embedded broker's: without --control, one line naming kafka.sh"
LAB_BARE=1 run broker-ctl down
expect_rc 3 "broker-ctl without --control"
expect_error_line "broker-ctl without --control"
expect_line "work only on the embedded broker.*scripts/kafka.sh kill NODE or kill-leader TOPIC" "$ERR"

step "a data folder of another cluster: exit 8, naming both ids"
rm -rf "$OUTBOX_KAFKA_DIR"
mkdir -p "$OUTBOX_KAFKA_DIR/node-1/data"
echo "MkU3OEVBNTcwNTJENDM2Qk" >"$OUTBOX_KAFKA_DIR/cluster.id"
printf 'cluster.id=SomeOtherClusterIdAAAA\nnode.id=1\nversion=1\n' >"$OUTBOX_KAFKA_DIR/node-1/data/meta.properties"
ks start
expect_rc 8 "start on another cluster's data"
one_error "start on another cluster's data" "holds cluster id SomeOtherClusterIdAAAA, not this cluster's MkU3OEVBNTcwNTJENDM2Qk; delete it \(scripts/kafka.sh destroy\)"

finish
