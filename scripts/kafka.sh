#!/usr/bin/env bash
# Real Apache Kafka 4.3.0 (KRaft, the chapter's broker) for the lab, without Docker: the broker's
# jars come from Maven Central (scripts/kafka/pom.xml pins them) and run on Debian's OpenJDK 17.
#
#   scripts/kafka.sh fetch               resolve the pinned jars into the cache (once; reused)
#   scripts/kafka.sh start [--nodes N]   N = 1 (default) or 3 combined broker+controller nodes;
#                                        formats KRaft storage the first time, starts every node
#                                        that is not running (a crashed node restarts on its data),
#                                        waits until each answers ApiVersions, prints the bootstrap
#                                        address (127.0.0.1:PORT[,...])
#   scripts/kafka.sh address             the bootstrap address (exit 3 when no node runs)
#   scripts/kafka.sh status              each node: running (PID) or not (exit 3 when none runs)
#   scripts/kafka.sh kill NODE           kill -9 of node NODE's JVM, by its PID (a real crash)
#   scripts/kafka.sh kill-leader TOPIC [PARTITION]
#                                        kill -9 of the node that leads TOPIC's PARTITION (0);
#                                        prints the node id
#   scripts/kafka.sh leader TOPIC [PARTITION]   the node id that leads it now
#   scripts/kafka.sh create-topic TOPIC [PARTITIONS] [--config NAME=VALUE ...]
#                                        create TOPIC (1 partition by default) replicated on every
#                                        node, with Kafka's own topic tool (topic configs such as
#                                        cleanup.policy=compact)
#   scripts/kafka.sh delete-records TOPIC PARTITION OFFSET
#                                        move the partition's log start to OFFSET (DeleteRecords,
#                                        with Kafka's own tool): what retention does, on demand
#   scripts/kafka.sh stop                SIGTERM to every node (controlled shutdown), kill -9 after 30 s
#   scripts/kafka.sh destroy             stop, then delete the cluster's folder
#   scripts/kafka.sh version             the broker's own version line from its log
#   scripts/kafka.sh classpath           the classpath of the fetched jars (fetching first)
#   scripts/kafka.sh console-consumer ARGS...   Kafka's own Java console consumer
#                                        (org.apache.kafka.tools.consumer.ConsoleConsumer)
#
# Environment:
#   OUTBOX_KAFKA_DIR    the cluster's folder (default ${TMPDIR:-/tmp}/outbox-lab-kafka): node-N/
#                       holds server.properties, data/ (the log segments), logs/server.log, pid
#   OUTBOX_KAFKA_PORT   node 1's client port (default 39092); node N listens on PORT+N-1 and its
#                       controller on PORT+100+N-1. The embedded broker takes an ephemeral port
#                       and PostgreSQL 55432..55436, so neither collides.
#   OUTBOX_KAFKA_CACHE  where the jars go (default ${XDG_CACHE_HOME:-$HOME/.cache}/outbox-lab/kafka-4.3.0)
#   OUTBOX_KAFKA_HEAP   each node's -Xmx (default 512m)
#   OUTBOX_KAFKA_MAVEN_SETTINGS  a Maven settings.xml for fetch (a mirror or a proxy); default
#                       Maven's own (~/.m2/settings.xml)
#
# Exit codes: 0 ok, 2 usage, 3 not running, 4 Java or Maven missing (run scripts/install-deps.sh
# --with-kafka), 5 a node did not start (its log's tail is printed), 6 the fetch failed, 7 a port
# is in use, 8 the data folder belongs to another cluster id.
set -euo pipefail

KAFKA_VERSION=4.3.0
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
POM=$SCRIPT_DIR/kafka/pom.xml
LOG4J=$SCRIPT_DIR/kafka/log4j2.properties
DIR=${OUTBOX_KAFKA_DIR:-${TMPDIR:-/tmp}/outbox-lab-kafka}
PORT=${OUTBOX_KAFKA_PORT:-39092}
CACHE=${OUTBOX_KAFKA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/outbox-lab/kafka-$KAFKA_VERSION}
HEAP=${OUTBOX_KAFKA_HEAP:-512m}
# shellcheck source=wait-until.sh
. "$SCRIPT_DIR/wait-until.sh"

err() { echo "outbox-lab: error: kafka.sh: $1" >&2; exit "${2:-1}"; }
wait_timed_out() { :; }  # wait_until's hook; every caller here reports its own timeout

case $PORT in '' | *[!0-9]*) err "OUTBOX_KAFKA_PORT must be a port number, got '$PORT'" 2 ;; esac
[ "$PORT" -ge 1024 ] && [ "$PORT" -le 65000 ] || err "OUTBOX_KAFKA_PORT must be 1024..65000, got $PORT" 2

need_java() {
  command -v java >/dev/null 2>&1 ||
    err "Java is not installed; run scripts/install-deps.sh --with-kafka (Debian's openjdk-17-jre-headless)" 4
}

# --- fetch ---------------------------------------------------------------------------------------

# The cache is complete when its stamp names the pom it was fetched for.
fetched() { [ -f "$CACHE/complete" ] && [ "$(cat "$CACHE/complete")" = "$(sha256sum <"$POM" | cut -c1-64)" ]; }

fetch() {
  fetched && return 0
  command -v mvn >/dev/null 2>&1 ||
    err "Maven is not installed; run scripts/install-deps.sh --with-kafka (Debian's maven)" 4
  need_java
  mkdir -p "$CACHE"
  rm -rf "$CACHE/libs"
  local log=$CACHE/fetch.log
  echo "[kafka] fetching kafka_2.13 $KAFKA_VERSION and its dependencies from Maven Central into $CACHE" >&2
  local settings=()
  [ -n "${OUTBOX_KAFKA_MAVEN_SETTINGS:-}" ] && settings=(-s "$OUTBOX_KAFKA_MAVEN_SETTINGS")
  # The plugin by its full, pinned coordinates: a prefix lookup would hide a network failure
  # behind "No plugin found for prefix".
  if ! mvn -B -q "${settings[@]}" -f "$POM" \
    org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$CACHE/libs" >"$log" 2>&1; then
    if grep -q -E 'UnknownHost|Connection refused|Connect to .* failed|Could not transfer|transfer failed|Network is unreachable|timed out' "$log"; then
      err "cannot reach Maven Central to fetch Kafka $KAFKA_VERSION ($(grep -m1 -o -E 'transfer failed for [^ ,]*|UnknownHost[^ ,]*|Connection refused|Network is unreachable' "$log" | head -n 1)); check the network or Maven's proxy and mirror settings (~/.m2/settings.xml, or OUTBOX_KAFKA_MAVEN_SETTINGS), then run again (log: $log)" 6
    fi
    err "Maven could not fetch Kafka $KAFKA_VERSION: $(grep -m1 -E 'ERROR' "$log" | cut -c1-200) (log: $log)" 6
  fi
  [ -f "$CACHE/libs/kafka_2.13-$KAFKA_VERSION.jar" ] || err "Maven finished but kafka_2.13-$KAFKA_VERSION.jar is not in $CACHE/libs (log: $log)" 6
  sha256sum <"$POM" | cut -c1-64 >"$CACHE/complete"
  echo "[kafka] fetched $(find "$CACHE/libs" -name '*.jar' | wc -l) jars" >&2
}

classpath() { echo "$CACHE/libs/*"; }

# java_tool CLASS ARGS...: one of Kafka's own command-line tools on the fetched jars.
java_tool() {
  local class=$1
  shift
  java -Xmx256m -Dlog4j2.configurationFile="file:$LOG4J" -Dkafka.logs.dir="$DIR/tools" \
    -cp "$(classpath)" "$class" "$@"
}

# --- the cluster's layout ------------------------------------------------------------------------

node_dir() { echo "$DIR/node-$1"; }
client_port() { echo $((PORT + $1 - 1)); }
controller_port() { echo $((PORT + 100 + $1 - 1)); }
node_count() { if [ -f "$DIR/nodes" ]; then cat "$DIR/nodes"; else echo 0; fi; }
node_pid() { cat "$(node_dir "$1")/pid" 2>/dev/null || true; }

# node_running N: its recorded PID is alive and is a java process (not a reused PID).
node_running() {
  local pid
  pid=$(node_pid "$1")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ "$(ps -o comm= -p "$pid" 2>/dev/null)" = java ]
}

address() {
  local n i addrs=()
  n=$(node_count)
  for ((i = 1; i <= n; i++)); do
    node_running "$i" && addrs+=("127.0.0.1:$(client_port "$i")")
  done
  [ ${#addrs[@]} -gt 0 ] || return 3
  local IFS=,
  echo "${addrs[*]}"
}

# write_properties N NODES: node N's server.properties. Replication settings follow the cluster's
# size: with 3 nodes every topic has 3 replicas and a write needs 2 in sync (acks=all), so one
# node may die without losing an acknowledged record.
write_properties() {
  local i=$1 nodes=$2 voters="" j rf isr
  for ((j = 1; j <= nodes; j++)); do
    voters+="${voters:+,}$j@127.0.0.1:$(controller_port "$j")"
  done
  rf=$nodes
  isr=1
  [ "$nodes" -ge 3 ] && isr=2
  cat >"$(node_dir "$i")/server.properties" <<EOF
# Written by scripts/kafka.sh: node $i of a $nodes-node KRaft cluster (combined broker+controller).
process.roles=broker,controller
node.id=$i
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$(client_port "$i"),CONTROLLER://127.0.0.1:$(controller_port "$i")
advertised.listeners=PLAINTEXT://127.0.0.1:$(client_port "$i")
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$(node_dir "$i")/data
num.partitions=1
auto.create.topics.enable=true
default.replication.factor=$rf
min.insync.replicas=$isr
offsets.topic.replication.factor=$rf
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
unclean.leader.election.enable=false
group.initial.rebalance.delay.ms=0
# A killed node is fenced, and its partitions get a new leader, once it misses heartbeats for
# this long (Kafka's default is 9 s; a lab's failover should be seen, not waited for).
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=4000
num.network.threads=2
num.io.threads=2
log.retention.hours=168
EOF
}

no_time_wait() { [ -z "$(ss -tanH state time-wait "( sport = :$1 )" 2>/dev/null)" ]; }

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# answers N: node N answers ApiVersions and Metadata (kcat does both) and sees every node.
answers() {
  local n=$2 seen
  seen=$(kcat -b "127.0.0.1:$(client_port "$1")" -L -m 3 2>/dev/null | grep -c -E '^  broker [0-9]+ at ') || true
  [ "$seen" -ge "$n" ]
}

start_node() {
  local i=$1 nodes=$2 d
  d=$(node_dir "$i")
  local p
  for p in "$(client_port "$i")" "$(controller_port "$i")"; do
    if port_in_use "$p"; then
      local who
      who=$(ss -ltnpH "sport = :$p" 2>/dev/null | grep -o 'users:(([^)]*' | head -n 1 | sed 's/users:((//')
      err "port $p (node $i) is in use${who:+ by $who}; stop that process or set OUTBOX_KAFKA_PORT to another base port" 7
    fi
  done
  # A broker stopped moments ago leaves TIME_WAIT connections on its port, and Kafka's acceptor
  # cannot bind while they last (up to 60 s): wait them out instead of failing.
  for p in "$(client_port "$i")" "$(controller_port "$i")"; do
    if ! no_time_wait "$p"; then
      echo "[kafka] waiting for port $p's TIME_WAIT connections to close (a broker stopped moments ago)" >&2
      wait_until 70 "" no_time_wait "$p" || true
    fi
  done
  mkdir -p "$d/logs"
  # setsid: the JVM is in a session of its own, so a Ctrl-C or a test runner's process group
  # signal does not reach it; it is stopped by PID (stop, kill).
  setsid java -server -Xms256m -Xmx"$HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -Djava.awt.headless=true -Dlog4j2.configurationFile="file:$LOG4J" -Dkafka.logs.dir="$d/logs" \
    -cp "$(classpath)" kafka.Kafka "$d/server.properties" </dev/null >"$d/logs/stdout.log" 2>&1 &
  echo $! >"$d/pid"
}

start() {
  local nodes=1
  while [ $# -gt 0 ]; do
    case $1 in
      --nodes) [ $# -ge 2 ] || err "--nodes needs 1 or 3" 2; nodes=$2; shift 2 ;;
      --nodes=*) nodes=${1#--nodes=}; shift ;;
      *) err "start: unknown argument '$1' (usage: start [--nodes 1|3])" 2 ;;
    esac
  done
  case $nodes in 1 | 3) ;; *) err "--nodes must be 1 or 3, got '$nodes'" 2 ;; esac
  command -v kcat >/dev/null 2>&1 || err "kcat is not installed; run scripts/install-deps.sh" 4
  need_java
  fetch
  local existing i
  existing=$(node_count)
  if [ "$existing" -ne 0 ] && [ "$existing" -ne "$nodes" ]; then
    address >/dev/null &&
      err "a $existing-node cluster runs in $DIR; run scripts/kafka.sh stop first, or set OUTBOX_KAFKA_DIR and OUTBOX_KAFKA_PORT for a second one" 2
    rm -rf "$DIR"  # a stopped cluster of another size: its data is of no use to this one
  fi
  mkdir -p "$DIR"
  if [ ! -f "$DIR/cluster.id" ]; then
    java_tool kafka.tools.StorageTool random-uuid >"$DIR/cluster.id.new" 2>/dev/null ||
      err "the storage tool could not make a cluster id" 5
    mv "$DIR/cluster.id.new" "$DIR/cluster.id"
  fi
  echo "$nodes" >"$DIR/nodes"
  local cluster_id
  cluster_id=$(tr -d '[:space:]' <"$DIR/cluster.id")
  for ((i = 1; i <= nodes; i++)); do
    node_running "$i" && continue
    mkdir -p "$(node_dir "$i")"
    write_properties "$i" "$nodes"
    local meta
    meta=$(node_dir "$i")/data/meta.properties
    if [ -f "$meta" ]; then
      local theirs
      theirs=$(sed -n 's/^cluster.id=//p' "$meta")
      [ "$theirs" = "$cluster_id" ] ||
        err "$(dirname "$meta") holds cluster id $theirs, not this cluster's $cluster_id; delete it (scripts/kafka.sh destroy) or set OUTBOX_KAFKA_DIR" 8
    else
      java_tool kafka.tools.StorageTool format -t "$cluster_id" -c "$(node_dir "$i")/server.properties" \
        >"$(node_dir "$i")/format.log" 2>&1 ||
        { tail -n 5 "$(node_dir "$i")/format.log" >&2; err "formatting node $i's storage failed" 5; }
    fi
    start_node "$i" "$nodes"
  done
  for ((i = 1; i <= nodes; i++)); do
    if ! wait_until 120 "" _up_or_dead "$i" "$nodes" || ! node_running "$i"; then
      echo "--- node $i: $(node_dir "$i")/logs" >&2
      tail -n 15 "$(node_dir "$i")/logs/stdout.log" "$(node_dir "$i")/logs/server.log" >&2 2>/dev/null || true
      err "node $i did not answer on 127.0.0.1:$(client_port "$i") within 120 s" 5
    fi
  done
  address
}

_up_or_dead() { answers "$1" "$2" || ! node_running "$1"; }

stop() {
  local n i pids=()
  n=$(node_count)
  for ((i = n; i >= 1; i--)); do
    if node_running "$i"; then
      kill -TERM "$(node_pid "$i")" 2>/dev/null || true
      pids+=("$(node_pid "$i")")
    fi
  done
  local pid
  for pid in "${pids[@]}"; do
    wait_until 30 "" process_gone "$pid" || kill -KILL "$pid" 2>/dev/null || true
  done
  echo "[kafka] stopped ($DIR)"
}

leader() {
  local topic=${1:-} partition=${2:-0} addr
  [ -n "$topic" ] || err "usage: leader TOPIC [PARTITION]" 2
  addr=$(address) || err "not running ($DIR); run scripts/kafka.sh start" 3
  local id
  id=$(kcat -b "$addr" -L -t "$topic" -J 2>/dev/null |
    jq -r --arg t "$topic" --argjson p "$partition" \
      '.topics[] | select(.topic == $t) | .partitions[] | select(.partition == $p) | .leader')
  case $id in '' | null | -1) err "no leader known for $topic/$partition" 3 ;; esac
  echo "$id"
}

kill_node() {
  local i=${1:-}
  case $i in '' | *[!0-9]*) err "usage: kill NODE (1..$(node_count))" 2 ;; esac
  node_running "$i" || err "node $i is not running ($DIR)" 3
  local pid
  pid=$(node_pid "$i")
  kill -9 "$pid"
  wait_until 10 "" process_gone "$pid" || err "node $i (PID $pid) still alive after kill -9" 1
  echo "[kafka] kill -9 $pid (node $i)"
}

create_topic() {
  local topic=${1:-} partitions=1 addr configs=()
  [ -n "$topic" ] || err "usage: create-topic TOPIC [PARTITIONS] [--config NAME=VALUE ...]" 2
  shift
  if [ $# -gt 0 ] && [ "$1" != --config ]; then partitions=$1; shift; fi
  while [ $# -gt 0 ]; do
    [ "$1" = --config ] && [ -n "${2:-}" ] ||
      err "create-topic: expected --config NAME=VALUE, got '$1'" 2
    configs+=(--config "$2")
    shift 2
  done
  addr=$(address) || err "not running ($DIR); run scripts/kafka.sh start" 3
  java_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$addr" --create --topic "$topic" \
    --partitions "$partitions" --replication-factor "$(node_count)" "${configs[@]}" >&2
}

delete_records() {
  local topic=${1:-} partition=${2:-} offset=${3:-} addr
  [ -n "$topic" ] && [ -n "$partition" ] && [ -n "$offset" ] || err "usage: delete-records TOPIC PARTITION OFFSET" 2
  addr=$(address) || err "not running ($DIR); run scripts/kafka.sh start" 3
  mkdir -p "$DIR/tools"
  printf '{"version":1,"partitions":[{"topic":"%s","partition":%d,"offset":%d}]}\n' \
    "$topic" "$partition" "$offset" >"$DIR/tools/delete-records.json"
  java_tool org.apache.kafka.tools.DeleteRecordsCommand --bootstrap-server "$addr" \
    --offset-json-file "$DIR/tools/delete-records.json" >&2
}

# The header comment above, up to the first line that is not a comment.
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  fetch) need_java; fetch; echo "$CACHE/libs" ;;
  start) start "$@" ;;
  address) address || err "not running ($DIR); run scripts/kafka.sh start" 3 ;;
  status)
    n=$(node_count)
    any=0
    for ((i = 1; i <= n; i++)); do
      if node_running "$i"; then
        echo "[kafka] node $i running: PID $(node_pid "$i"), 127.0.0.1:$(client_port "$i") ($(node_dir "$i"))"
        any=1
      else
        echo "[kafka] node $i not running ($(node_dir "$i"))"
      fi
    done
    [ "$any" -eq 1 ] || { [ "$n" -gt 0 ] || echo "[kafka] no cluster in $DIR"; exit 3; }
    ;;
  kill) kill_node "$@" ;;
  leader) leader "$@" ;;
  create-topic) create_topic "$@" ;;
  delete-records) delete_records "$@" ;;
  kill-leader)
    id=$(leader "$@")
    kill_node "$id" >&2
    echo "$id"
    ;;
  stop) stop ;;
  destroy)
    stop >/dev/null
    rm -rf "$DIR"
    echo "[kafka] destroyed $DIR"
    ;;
  version)
    grep -h -m 1 -o 'Kafka version: [^ ]*' "$DIR"/node-*/logs/server.log 2>/dev/null | head -n 1 | grep . ||
      err "no node log with a version line in $DIR (start it first)" 3
    ;;
  classpath) need_java; fetch; classpath ;;
  console-consumer) need_java; fetch; java_tool org.apache.kafka.tools.consumer.ConsoleConsumer "$@" ;;
  -h | --help | help) usage ;;
  '') usage >&2; exit 2 ;;
  *) err "unknown command '$cmd' (fetch|start|address|status|kill|kill-leader|leader|create-topic|delete-records|stop|destroy|version|classpath|console-consumer; see --help)" 2 ;;
esac
