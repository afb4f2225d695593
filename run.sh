#!/usr/bin/env bash
# run.sh: the chapter's entry point. Builds outbox-lab (first use: dependencies + configure; then
# incrementally and quietly), keeps an embedded Kafka-protocol broker running in the background
# for the commands that talk to Kafka, and then *execs* the lab, so the PID you see is the lab's
# own and the chapter's `kill -9 <pid>` kills the lab, not a wrapper shell.
#
#   ./run.sh -Doutbox.db=/tmp/mqrel7-outbox/outbox OutboxLab write-hold 5
#     runs  build/outbox-lab --db /tmp/mqrel7-outbox/outbox write-hold 5
#
# Run `./run.sh --help` for the details. Exit codes are the lab's (src/cli/exit_code.h); run.sh's
# own failures (build, broker start) exit 125, as `docker run` does for its own.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build_dir=$repo/build
# OUTBOX_LAB_BIN: a prebuilt binary to use as it is (run.sh then builds nothing).
bin=${OUTBOX_LAB_BIN:-$build_dir/outbox-lab}
state=${OUTBOX_LAB_STATE:-/tmp/outbox-lab-state-$(id -u)}
# One embedded broker per database (use_broker_of sets these): a reset of one database restarts
# only that database's broker, so another database's records (in that broker's memory) survive.
broker_dir=""
addr_file=""
pid_file=""
broker_log=""
readonly kRunShFailed=125
readonly kBrokerStartTimeoutS=15

say() { echo "run.sh: $*" >&2; }
# shellcheck source=scripts/wait-until.sh
. "$repo/scripts/wait-until.sh"
wait_timed_out() { say "$1"; }
die() {
  echo "run.sh: error: $*" >&2
  exit "$kRunShFailed"
}

usage() {
  cat <<EOF
Usage: ./run.sh [-Doutbox.db=PATH] [OutboxLab] SUBCOMMAND [ARGS...]
       ./run.sh demo | demo-exactly-once | demo-wal | report-screenshot | stop-broker | broker-status | broker-addr [DB] | --help

Builds build/outbox-lab if needed (first use also runs scripts/install-deps.sh; build output
goes to $state/build.log and is shown only on failure, a "CMake Error" line in it counting as
one even when cmake exits 0), then execs it,
so the PID you kill -9 is the lab itself. The chapter's Java-style commands work verbatim:
  -Doutbox.db=PATH   becomes --db PATH
  OutboxLab          is dropped
  anything else      is passed through unchanged

Kafka: without KAFKA_BOOTSTRAP_SERVERS or --brokers, the subcommands that talk to Kafka
(publish, publish-hold, verify unless --no-kafka, consume, relay, check, and any not known
to run.sh) get --brokers of an embedded broker that run.sh starts once in the background
(in memory; its state files are in \$OUTBOX_LAB_STATE, default
/tmp/outbox-lab-state-\$(id -u)) and reuses while it runs. None starts for an SQLite file
that does not exist (the lab then asks for a reset), except for consume, which reads the topic.
Each database (--db) gets a broker of its own. A successful reset stops that database's
broker, so the next experiment starts on an empty topic and its offsets match the chapter's
(0, 1, 2, ...); other databases' brokers keep running. The lab checks the command line before
run.sh starts or stops any broker for it. run.sh builds build/outbox-lab when it is missing or
older than the sources; OUTBOX_LAB_BIN=PATH uses a prebuilt binary as it is instead.

  ./run.sh demo           the chapter's experiment (two kill -9s) end to end, with the final
                          reconciliation (scenarios/outbox-crash.sh; own broker, own temp db),
                          and its HTML report, $state/report/outbox-crash.html
  ./run.sh demo-exactly-once
                          the chapter's two kills with relay --exactly-once (Kafka
                          transactions) on real Kafka, read at both isolation levels
                          (scenarios/exactly-once-chapter.sh; docs/exactly-once.md)
  ./run.sh demo-wal       the chapter's two kills with the log-based relay (relay --source wal)
                          on PostgreSQL: no published flag, no mark write, the duplicates from
                          the ack -> LSN-confirm window, commit order (scenarios/pg-wal-chapter.sh;
                          scripts/postgres.sh's server; docs/wal-relay.md)
  ./run.sh report-screenshot [PNG]
                          the demo's report opened in headless Chromium and checked
                          (scenarios/report-browser.sh); its screenshot goes to PNG, default
                          $state/report-chapter.png (docs/report-chapter.png only when named)
  ./run.sh stop-broker    stop every embedded broker (SIGTERM by PID), remove their state files
  ./run.sh broker-status  print each one's database, address and PID, or "not running" (exit 3)
  ./run.sh broker-addr [DB]
                          print the bootstrap address of DB's broker (for kcat -b), or exit 3
                          (with OUTBOX_KAFKA=real, both ask scripts/kafka.sh's Kafka)

Real Kafka: with OUTBOX_KAFKA=real, run.sh uses real Apache Kafka 4.3.0 (KRaft, one node) in
place of the embedded broker: scripts/kafka.sh start fetches it from Maven Central the first
time, starts it on 127.0.0.1:\${OUTBOX_KAFKA_PORT:-39092} unless it runs, and the lab gets its
address; \`./run.sh demo\` runs the chapter there on a topic of its own. Its records are on
disk and survive restarts; stop it with scripts/kafka.sh stop. reset does not touch it.

PostgreSQL: with OUTBOX_BACKEND=postgres, run.sh starts the throwaway PostgreSQL 15 server of
scripts/postgres.sh (127.0.0.1:\${OUTBOX_PG_PORT:-55432}, database outbox_lab) if it is not
running, and gives the lab --db of its URL in place of -Doutbox.db=PATH or --db PATH (or of
none): the chapter's commands then run on PostgreSQL, and \`./run.sh demo\` runs the chapter's
experiment there (scenarios/pg-chapter.sh). A --db postgresql://... URL of that server's
address starts it too; a URL of any other server is passed on untouched.

Each of run.sh's own commands prints its usage with --help or -h (./run.sh demo --help) and
does nothing else.

run.sh's own failures exit $kRunShFailed; all other codes are the lab's.

EOF
}

# The usage of run.sh's own command $1: what it does, its arguments, the environment it reads.
own_usage() {
  local common="  OUTBOX_LAB_STATE         run.sh's state directory, here $state
  OUTBOX_LAB_BIN           a prebuilt outbox-lab to use as it is (run.sh then builds nothing)"
  case "$1" in
    demo)
      cat <<EOF
Usage: ./run.sh demo

The chapter's experiment (two kill -9s) end to end, with the final reconciliation
(scenarios/outbox-crash.sh, on a broker and a temporary database of its own), and its HTML
report, $state/report/outbox-crash.html. Builds build/outbox-lab first if needed.

Arguments: none.
Environment:
  OUTBOX_BACKEND=postgres  the chapter on scripts/postgres.sh's PostgreSQL 15 instead
                           (scenarios/pg-chapter.sh, port \${OUTBOX_PG_PORT:-55432}; no HTML report)
  OUTBOX_KAFKA=real        on scripts/kafka.sh's Kafka 4.3.0 (port \${OUTBOX_KAFKA_PORT:-39092})
  KAFKA_BOOTSTRAP_SERVERS  a Kafka to use instead of the embedded broker (a topic of its own)
  OUTBOX_LAB_KEEP_TMP=1    keep the scenario's temporary directory (its path is printed)
$common
EOF
      ;;
    demo-exactly-once)
      cat <<EOF
Usage: ./run.sh demo-exactly-once

The chapter's two kills with relay --exactly-once (Kafka transactions), read at both isolation
levels (scenarios/exactly-once-chapter.sh; docs/exactly-once.md). Always on real Kafka: the
embedded broker writes no transaction markers. Builds build/outbox-lab first if needed.

Arguments: none.
Environment:
  KAFKA_BOOTSTRAP_SERVERS  the Kafka to use (a topic of its own); without it, scripts/kafka.sh's
                           Kafka 4.3.0, started unless it runs (port \${OUTBOX_KAFKA_PORT:-39092};
                           fetched from Maven Central the first time)
  OUTBOX_LAB_KEEP_TMP=1    keep the scenario's temporary directory (its path is printed)
$common
EOF
      ;;
    demo-wal)
      cat <<EOF
Usage: ./run.sh demo-wal

The chapter's two kills with the log-based relay (relay --source wal) on PostgreSQL
(scenarios/pg-wal-chapter.sh; docs/wal-relay.md): starts scripts/postgres.sh's PostgreSQL 15
unless it runs. Builds build/outbox-lab first if needed.

Arguments: none.
Environment:
  OUTBOX_PG_PORT           scripts/postgres.sh's port (default 55432)
  OUTBOX_KAFKA=real        on scripts/kafka.sh's Kafka 4.3.0 (port \${OUTBOX_KAFKA_PORT:-39092})
  KAFKA_BOOTSTRAP_SERVERS  a Kafka to use instead of the embedded broker (a topic of its own)
  OUTBOX_LAB_KEEP_TMP=1    keep the scenario's temporary directory (its path is printed)
$common
EOF
      ;;
    report-screenshot)
      cat <<EOF
Usage: ./run.sh report-screenshot [PNG]

Runs the demo with its HTML report, opens the report in headless Chromium, checks what it shows
(scenarios/report-browser.sh) and saves a screenshot. Builds build/outbox-lab first if needed.

Arguments:
  PNG                      where the screenshot goes (default $state/report-chapter.png;
                           docs/report-chapter.png is tracked: replace it only by naming it)
Environment:
  CHROMIUM                 the browser (default chromium or chromium-browser from PATH;
                           scripts/install-deps.sh --with-browser installs it)
  OUTBOX_LAB_ARTIFACTS     where the scenario keeps its own copy (default build/artifacts)
$common
EOF
      ;;
    stop-broker)
      cat <<EOF
Usage: ./run.sh stop-broker

Stops every embedded broker run.sh started (SIGTERM by PID, SIGKILL after 10 s) and removes their
state files; their records, kept in memory, are gone. Exit 0, also when none runs. Real Kafka
(scripts/kafka.sh stop) and PostgreSQL (scripts/postgres.sh stop) are left alone.

Arguments: none.
Environment:
$common
EOF
      ;;
    broker-status)
      cat <<EOF
Usage: ./run.sh broker-status

Prints one line per running embedded broker: its database, bootstrap address, PID and log.
Exit 0 when one runs, 3 ("not running") when none does. With OUTBOX_KAFKA=real: scripts/kafka.sh
status (each node of the real Kafka, exit 3 when none runs).

Arguments: none.
Environment:
$common
EOF
      ;;
    broker-addr)
      cat <<EOF
Usage: ./run.sh broker-addr [DB]

Prints the bootstrap address of the embedded broker of database DB (for kcat -b); exit 3 when
none runs for it. Starts no broker. With OUTBOX_KAFKA=real: the address of scripts/kafka.sh's
Kafka (one cluster for every DB), or exit 3 when it is not running.

Arguments:
  DB                       the database (a path, as given to -Doutbox.db= or --db); default
                           \$OUTBOX_DB, else outbox.db
Environment:
  OUTBOX_DB                the default DB
$common
EOF
      ;;
  esac
}

# True when an argument after run.sh's own command ($2 on) is -h or --help.
asks_for_help() {
  local arg
  for arg in "${@:2}"; do
    case "$arg" in
      -h | --help) return 0 ;;
    esac
  done
  return 1
}

# --- build -----------------------------------------------------------------------------------------

ensure_state_dir() {
  (umask 077 && mkdir -p "$state") || die "cannot create state directory $state"
  [ -O "$state" ] || die "state directory $state belongs to another user; set OUTBOX_LAB_STATE"
}

build_failed() {
  echo "run.sh: error: $1; last 60 lines of $state/build.log:" >&2
  tail -n 60 "$state/build.log" >&2
  exit "$kRunShFailed"
}

# A `CMake Error` in the log is a failed build even when cmake exited 0 (an error while
# regenerating can leave the old build.ninja/Makefile in place): show each one with the lines
# that explain it, and stop instead of running a stale binary.
cmake_errors_fail() {
  local log=$1
  grep -q 'CMake Error' "$log" || return 0
  echo "run.sh: error: the build log has CMake errors (cmake exited 0, but build/outbox-lab may be stale); from $log:" >&2
  grep -A 5 'CMake Error' "$log" >&2
  exit "$kRunShFailed"
}

# Prints "run.sh: building outbox-lab: 45% after 1m20s" every 20 s from build log $1 until killed.
progress_while_building() {
  local log=$1 start=$SECONDS percent pause=""
  # Its sleep must not outlive it (holding our stderr open); `wait` returns at once on TERM.
  trap '[ -z "$pause" ] || kill "$pause" 2>/dev/null; exit 0' TERM
  while :; do
    sleep 20 &
    pause=$!
    wait "$pause"
    percent=$(grep -o '^\[ *[0-9]*%\]' "$log" 2>/dev/null | tail -n 1 | tr -dc '0-9')
    say "building outbox-lab: ${percent:-0}% after $(((SECONDS - start) / 60))m$(((SECONDS - start) % 60))s (log: $log)"
  done
}

# Serialised with flock, so two run.sh started together do not build over each other. The lock
# lives in a subshell: its descriptor must not leak into the lab we exec afterwards.
build() {
  ensure_state_dir
  if [ -n "${OUTBOX_LAB_BIN:-}" ]; then
    [ -x "$bin" ] || die "OUTBOX_LAB_BIN=$bin is not an executable file"
    return 0
  fi
  (
    if command -v flock >/dev/null 2>&1; then flock 9; fi
    log=$state/build.log
    : >"$log"
    if [ ! -x "$bin" ] || [ ! -f "$build_dir/CMakeCache.txt" ]; then
      say "first use: installing dependencies and building outbox-lab, about 8 minutes on 2 cores (log: $log)"
      "$repo/scripts/install-deps.sh" >>"$log" 2>&1 || build_failed "scripts/install-deps.sh failed"
      say "dependencies ready after ${SECONDS}s; configuring"
      cmake -S "$repo" -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >>"$log" 2>&1 ||
        build_failed "cmake configure failed"
      say "configured after ${SECONDS}s; compiling"
    fi
    if ! command -v cmake >/dev/null 2>&1; then
      say "cmake not found; using the existing $bin as it is"
      exit 0
    fi
    # Only the lab: run.sh never runs the unit tests (scripts/test.sh builds and runs those), and
    # compiling them would triple the first build. A build that takes a while says how far it
    # got every 20 s (the last "[ NN%]" of the log), so a first build (minutes on 2 cores) is
    # never silent.
    progress_while_building "$log" >/dev/null 9>&- &
    local progress=$!
    local rc=0
    cmake --build "$build_dir" --target outbox-lab -j"$(nproc)" >>"$log" 2>&1 || rc=$?
    kill "$progress" 2>/dev/null || true
    wait "$progress" 2>/dev/null || true
    [ "$rc" -eq 0 ] || build_failed "build failed"
    cmake_errors_fail "$log"
  ) 9>"$state/build.lock"
  [ -x "$bin" ] || die "the build finished but $bin is missing"
}

# --- embedded broker ---------------------------------------------------------------------------------

# The identity of database $1 (a path, or a postgresql:// URL): its absolute path, the URL as is.
db_identity() {
  case "$1" in
    postgres://* | postgresql://*) printf '%s\n' "$1" ;;
    *) realpath -m -- "$1" 2>/dev/null || printf '%s\n' "$PWD/$1" ;;
  esac
}

# Points addr_file, pid_file and broker_log at the broker of database $1: $state/brokers/<hash>/.
use_broker_of() {
  local id key
  id=$(db_identity "$1")
  key=$(printf '%s' "$id" | sha256sum | cut -c1-16)
  broker_dir=$state/brokers/$key
  addr_file=$broker_dir/broker.addr
  pid_file=$broker_dir/broker.pid
  broker_log=$broker_dir/broker.log
  BROKER_DB=$id
}

# Runs "$@" once per broker directory under $state/brokers, with use_broker_of's variables set.
for_each_broker() {
  local dir
  for dir in "$state"/brokers/*/; do
    [ -d "$dir" ] || continue
    broker_dir=${dir%/}
    addr_file=$broker_dir/broker.addr
    pid_file=$broker_dir/broker.pid
    broker_log=$broker_dir/broker.log
    BROKER_DB=$(cat "$broker_dir/db" 2>/dev/null || echo "?")
    "$@"
  done
}

# The recorded broker is alive and is an outbox-lab (not a stranger that inherited its PID, nor
# a zombie: kill -0 succeeds on one until init reaps it).
broker_running() {
  local pid info
  [ -s "$addr_file" ] && [ -s "$pid_file" ] || return 1
  pid=$(cat "$pid_file")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  info=$(ps -o stat=,comm= -p "$pid" 2>/dev/null) || return 1
  [[ $info =~ ^\ *[^Z\ ][^\ ]*\ +outbox-lab$ ]]
}

broker_ready() { [ -s "$addr_file" ] && grep -q '^\[broker\] ready ' "$broker_log"; }
# The broker is ready, or its process $1 died trying (wait_until stops either way).
ready_or_dead() { broker_ready || process_gone "$1"; }

# Prints the bootstrap address of the running broker, starting one if there is none.
ensure_broker() {
  ensure_state_dir
  mkdir -p "$broker_dir" || die "cannot create $broker_dir"
  printf '%s\n' "$BROKER_DB" >"$broker_dir/db"
  (
    if command -v flock >/dev/null 2>&1; then flock 9; fi
    if broker_running; then
      cat "$addr_file"
      exit 0
    fi
    rm -f "$addr_file" "$pid_file"
    # Its own session (no terminal's SIGHUP or Ctrl-C reaches it), no descriptor of ours: a
    # broker holding our stdout would keep a `./run.sh verify | less` pipe open forever.
    setsid nohup "$bin" broker --addr-file "$addr_file" </dev/null >"$broker_log" 2>&1 9>&- &
    local pid=$!
    wait_until "$kBrokerStartTimeoutS" "" ready_or_dead "$pid"
    if ! broker_ready; then
      echo "run.sh: error: the embedded broker did not become ready within ${kBrokerStartTimeoutS}s; $broker_log:" >&2
      sed 's/^/  /' "$broker_log" >&2
      kill -TERM "$pid" 2>/dev/null || true
      exit "$kRunShFailed"
    fi
    # The broker names its own PID; trust that over $! should setsid ever have forked.
    local ready_pid
    ready_pid=$(sed -n 's/^\[broker\] ready .* pid=\([0-9][0-9]*\).*$/\1/p' "$broker_log" | head -n 1)
    echo "${ready_pid:-$pid}" >"$pid_file"
    local addr
    addr=$(head -n 1 "$addr_file")
    say "started embedded broker at $addr (pid ${ready_pid:-$pid}) for $BROKER_DB; stop it with ./run.sh stop-broker"
    echo "$addr"
  ) 9>"$broker_dir/broker.lock"
}

# SIGTERM by PID, wait (10 s, then SIGKILL), remove the state files. Quiet if none is running.
stop_broker() {
  local pid
  if ! broker_running; then
    rm -f "$addr_file" "$pid_file"
    return 1
  fi
  pid=$(cat "$pid_file")
  kill -TERM "$pid"
  if ! wait_until 10 "" process_gone "$pid"; then
    say "broker $pid ignored SIGTERM for 10 s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$addr_file" "$pid_file"
  STOPPED_PID=$pid
}

# --- PostgreSQL ----------------------------------------------------------------------------------------

# OUTBOX_BACKEND: sqlite (the default, also when empty) or postgres; anything else is a typo
# that would otherwise run the chapter on the wrong database.
backend=${OUTBOX_BACKEND:-sqlite}
case "$backend" in
  sqlite | postgres) ;;
  *) die "OUTBOX_BACKEND=$backend: must be sqlite or postgres" ;;
esac

# OUTBOX_KAFKA: embedded (the default, also when empty) or real (scripts/kafka.sh's Kafka 4.3.0).
kafka_kind=${OUTBOX_KAFKA:-embedded}
case "$kafka_kind" in
  embedded | real) ;;
  *) die "OUTBOX_KAFKA=$kafka_kind: must be embedded or real" ;;
esac

# Starts scripts/kafka.sh's real Kafka unless it runs, and prints its bootstrap address.
ensure_real_kafka() {
  "$repo/scripts/kafka.sh" start ||
    die "scripts/kafka.sh start failed (exit $?); scripts/install-deps.sh --with-kafka installs Java and Maven"
}

# Starts scripts/postgres.sh's server unless it runs, and prints its URL.
ensure_postgres() {
  "$repo/scripts/postgres.sh" start ||
    die "scripts/postgres.sh start failed (exit $?); scripts/install-deps.sh installs postgresql-15"
}

# What every demo does first: build, point the scenario at the binary, make the state directory,
# and when $1 is real, start scripts/kafka.sh's Kafka unless KAFKA_BOOTSTRAP_SERVERS names one.
prepare_demo() {
  build
  export OUTBOX_LAB_BIN=$bin
  ensure_state_dir
  if [ "$1" = real ] && [ -z "${KAFKA_BOOTSTRAP_SERVERS:-}" ]; then
    KAFKA_BOOTSTRAP_SERVERS=$(ensure_real_kafka) || exit "$kRunShFailed"
    export KAFKA_BOOTSTRAP_SERVERS
    say "OUTBOX_KAFKA=real: the chapter on Apache Kafka $("$repo/scripts/kafka.sh" version | sed 's/^Kafka version: //') at $KAFKA_BOOTSTRAP_SERVERS (a topic of its own)"
  fi
}

# True when URL $1 names the throwaway server's address (127.0.0.1 or localhost, its port).
is_throwaway_postgres() {
  local port=${OUTBOX_PG_PORT:-55432}
  [[ $1 =~ ^postgres(ql)?://([^@/]*@)?(127\.0\.0\.1|localhost):$port(/|$) ]]
}

# --- run.sh's own commands ---------------------------------------------------------------------------

# The run.sh command closest to word $1 (at most one edit per three letters, as the lab's
# "did you mean"), or nothing. Levenshtein distance in awk.
closest_own_command() {
  awk -v typed="$1" 'function dist(a, b,   i, j, la, lb, d, cost, x) {
      la = length(a); lb = length(b)
      for (i = 0; i <= la; i++) d[i, 0] = i
      for (j = 0; j <= lb; j++) d[0, j] = j
      for (i = 1; i <= la; i++)
        for (j = 1; j <= lb; j++) {
          cost = substr(a, i, 1) == substr(b, j, 1) ? 0 : 1
          x = d[i - 1, j] + 1
          if (d[i, j - 1] + 1 < x) x = d[i, j - 1] + 1
          if (d[i - 1, j - 1] + cost < x) x = d[i - 1, j - 1] + cost
          if (i > 1 && j > 1 && substr(a, i, 1) == substr(b, j - 1, 1) &&
              substr(a, i - 1, 1) == substr(b, j, 1) && d[i - 2, j - 2] + 1 < x)
            x = d[i - 2, j - 2] + 1
          d[i, j] = x
        }
      return d[la, lb]
    }
    BEGIN {
      n = split("demo demo-exactly-once demo-wal report-screenshot stop-broker broker-status broker-addr", names, " ")
      allowed = int(length(typed) / 3); if (allowed < 1) allowed = 1
      best = ""; bestd = allowed + 1
      for (k = 1; k <= n; k++) { dd = dist(typed, names[k]); if (dd < bestd) { best = names[k]; bestd = dd } }
      print best
    }'
}

# `./run.sh demo --help`: the command's usage, before it builds, starts or stops anything.
case "${1:-}" in
  demo | demo-exactly-once | demo-wal | report-screenshot | stop-broker | broker-status | broker-addr)
    if asks_for_help "$@"; then
      own_usage "$1"
      exit 0
    fi
    ;;
esac

case "${1:-}" in
  "")
    usage >&2
    exit 2
    ;;
  -h | --help | help)
    usage
    build
    exec "$bin" --help
    ;;
  stop-broker)
    stopped=0
    stop_one() {
      if stop_broker; then
        echo "stopped embedded broker (pid $STOPPED_PID) of $BROKER_DB"
        stopped=1
      fi
    }
    for_each_broker stop_one
    [ "$stopped" -eq 1 ] || echo "no embedded broker running"
    exit 0
    ;;
  broker-addr)
    # Real Kafka is one cluster for every database: its address, or exit 3 when it is down.
    if [ "$kafka_kind" = real ]; then
      "$repo/scripts/kafka.sh" address 2>/dev/null && exit 0
      echo "run.sh: OUTBOX_KAFKA=real and scripts/kafka.sh's Kafka is not running (scripts/kafka.sh start)" >&2
      exit 3
    fi
    use_broker_of "${2:-${OUTBOX_DB:-outbox.db}}"
    if broker_running; then
      head -n 1 "$addr_file"
      exit 0
    fi
    echo "run.sh: no embedded broker runs for $BROKER_DB" >&2
    exit 3
    ;;
  broker-status)
    if [ "$kafka_kind" = real ]; then
      exec "$repo/scripts/kafka.sh" status
    fi
    running=0
    status_one() {
      if broker_running; then
        echo "running: db=$BROKER_DB bootstrap=$(head -n 1 "$addr_file") pid=$(cat "$pid_file") log=$broker_log"
        running=1
      fi
    }
    for_each_broker status_one
    [ "$running" -eq 1 ] && exit 0
    echo "not running"
    exit 3
    ;;
  demo)
    prepare_demo "$kafka_kind"
    if [ "$backend" = postgres ]; then
      OUTBOX_PG_URL=$(ensure_postgres) || exit "$kRunShFailed"
      export OUTBOX_PG_URL
      say "OUTBOX_BACKEND=postgres: the chapter on $OUTBOX_PG_URL (a schema of its own, dropped at the end)"
      exec bash "$repo/scenarios/pg-chapter.sh"
    fi
    exec bash "$repo/scenarios/outbox-crash.sh" --report "$state/report"
    ;;
  demo-exactly-once)
    # Real Kafka always: the embedded broker writes no transaction markers (docs/exactly-once.md).
    prepare_demo real
    exec bash "$repo/scenarios/exactly-once-chapter.sh"
    ;;
  demo-wal)
    # PostgreSQL always: the WAL relay reads a logical replication slot.
    prepare_demo "$kafka_kind"
    OUTBOX_PG_URL=$(ensure_postgres) || exit "$kRunShFailed"
    export OUTBOX_PG_URL
    say "demo-wal: the chapter with relay --source wal on $OUTBOX_PG_URL (a schema of its own, dropped at the end)"
    exec bash "$repo/scenarios/pg-wal-chapter.sh"
    ;;
  report-screenshot)
    build
    export OUTBOX_LAB_BIN=$bin
    ensure_state_dir
    # Into the state folder unless a path is given (docs/report-chapter.png is tracked: replace
    # it only on purpose, with `./run.sh report-screenshot docs/report-chapter.png`).
    shot=${2:-$state/report-chapter.png}
    mkdir -p "$(dirname "$shot")"
    say "screenshot: $shot"
    exec bash "$repo/scenarios/report-browser.sh" --screenshot "$shot"
    ;;
esac

# --- the chapter's command line -> the lab's ------------------------------------------------------

args=()
subcommand=""
dropped_outboxlab=0
has_brokers=0
wants_help=0
no_kafka=0
expect_value=0
db_given=0
db_value_next=0
db_values=()
for arg in "$@"; do
  if [ "$expect_value" -eq 1 ]; then
    args+=("$arg")
    expect_value=0
    if [ "$db_value_next" -eq 1 ]; then
      db_values+=("$arg")
      db_value_next=0
    fi
    continue
  fi
  case "$arg" in
    -Doutbox.db=*)
      args+=(--db "${arg#-Doutbox.db=}")
      db_given=1
      db_values+=("${arg#-Doutbox.db=}")
      ;;
    --db=*)
      args+=("$arg")
      db_given=1
      db_values+=("${arg#--db=}")
      ;;
    --db)
      args+=("$arg")
      expect_value=1
      db_given=1
      db_value_next=1
      ;;
    # With a space instead of '=': passed on as it is, so the lab names the fix; the path after
    # it is not the subcommand.
    -Doutbox.db)
      args+=("$arg")
      [ -n "$subcommand" ] || expect_value=1
      ;;
    # The chapter's class name, in any case (outboxlab, OUTBOXLAB).
    [Oo][Uu][Tt][Bb][Oo][Xx][Ll][Aa][Bb])
      if [ -z "$subcommand" ] && [ "$dropped_outboxlab" -eq 0 ]; then
        dropped_outboxlab=1
      else
        args+=("$arg")
      fi
      ;;
    --brokers)
      has_brokers=1
      args+=("$arg")
      expect_value=1
      ;;
    --brokers=*)
      has_brokers=1
      args+=("$arg")
      ;;
    # Global options that take a value: their value is not the subcommand.
    --topic | --topic-template | -X | --synchronous | --history | --vfs | --busy-timeout | \
      --busy-timeout-ms)
      args+=("$arg")
      [ -n "$subcommand" ] || expect_value=1
      ;;
    -h | --help) wants_help=1; args+=("$arg") ;;
    --no-kafka) no_kafka=1; args+=("$arg") ;;
    -*) args+=("$arg") ;;
    *)
      [ -n "$subcommand" ] || subcommand=$arg
      args+=("$arg")
      ;;
  esac
done

# A mistyped command of run.sh's own before the first build: a typo must not cost a build of
# minutes before it is told (with a binary, the lab's own check below catches it).
if [ ! -x "$bin" ] && [ "$#" -ge 1 ] && [[ $1 != -* ]]; then
  closest=$(closest_own_command "$1")
  if [ -n "$closest" ] && [ "$closest" != "$1" ]; then
    echo "run.sh: error: unknown command '$1'; did you mean './run.sh $closest'? (see ./run.sh --help)" >&2
    exit 2
  fi
fi

build

# OUTBOX_BACKEND=postgres: the throwaway server's URL in place of every --db value (the chapter's
# -Doutbox.db=PATH included), or added when none was given. A --db postgresql:// URL of the
# throwaway server's address starts that server whatever OUTBOX_BACKEND says. --help needs none.
if [ "$wants_help" -eq 0 ]; then
  pg_url=""
  if [ "$backend" = postgres ]; then
    pg_url=$(ensure_postgres) || exit "$kRunShFailed"
    replaced=()
    next_is_db=0
    for arg in "${args[@]}"; do
      if [ "$next_is_db" -eq 1 ]; then
        [ "$arg" = "$pg_url" ] || say "OUTBOX_BACKEND=postgres: --db $arg becomes --db $pg_url"
        replaced+=("$pg_url")
        next_is_db=0
        continue
      fi
      case "$arg" in
        --db) replaced+=("$arg"); next_is_db=1 ;;
        --db=*)
          [ "${arg#--db=}" = "$pg_url" ] || say "OUTBOX_BACKEND=postgres: $arg becomes --db $pg_url"
          replaced+=(--db "$pg_url")
          ;;
        *) replaced+=("$arg") ;;
      esac
    done
    args=("${replaced[@]}")
    [ "$db_given" -eq 1 ] || args=(--db "$pg_url" "${args[@]}")
  else
    for value in "${db_values[@]}"; do
      if is_throwaway_postgres "$value"; then
        ensure_postgres >/dev/null || exit "$kRunShFailed"
        break
      fi
    done
  fi
fi

# The lab judges the command line before run.sh starts or stops a broker for it: a rejected one
# (a typo, a bad option or value) touches no broker; the lab then prints its own error.
if [ "$wants_help" -eq 0 ] && ! OUTBOX_LAB_VALIDATE_ONLY=1 "$bin" "${args[@]}" >/dev/null 2>&1; then
  # A mistyped command of run.sh's own (dmeo): the lab knows only its subcommands.
  if [ "$#" -ge 1 ] && [[ $1 != -* ]]; then
    closest=$(closest_own_command "$1")
    if [ -n "$closest" ]; then
      echo "run.sh: error: unknown command '$1'; did you mean './run.sh $closest'? (see ./run.sh --help)" >&2
      exit 2
    fi
  fi
  export OUTBOX_LAB_FRONTEND=$0
  exec "$bin" "${args[@]}"
fi

# The database whose broker this is: the last --db given, else the lab's default.
db_for_broker=${OUTBOX_DB:-outbox.db}
[ "${#db_values[@]}" -eq 0 ] || db_for_broker=${db_values[-1]}
[ "$backend" != postgres ] || db_for_broker=${pg_url:-$db_for_broker}
use_broker_of "$db_for_broker"

# Those that never talk to Kafka; bench starts a broker of its own. Any other subcommand,
# including ones added later, gets the embedded broker.
needs_broker=1
case "$subcommand" in
  "" | reset | naive-hold | write-hold | rollback | broker) needs_broker=0 ;;
  broker-ctl | write | failpoints | status | metrics | purge | unpark | parked | bench) needs_broker=0 ;;
esac
if [ "$wants_help" -eq 1 ] || [ "$no_kafka" -eq 1 ] || [ "$has_brokers" -eq 1 ] ||
   [ -n "${KAFKA_BOOTSTRAP_SERVERS:-}" ]; then
  needs_broker=0
fi
# An SQLite file that does not exist: the lab stops at once (exit 6, "run ... reset first"), so a
# broker started for it would only be left running. consume reads the topic alone and keeps it.
case "$db_for_broker" in
  postgres://* | postgresql://*) ;;
  *) [ -e "$db_for_broker" ] || [ "$subcommand" = consume ] || needs_broker=0 ;;
esac
# Hints quote the command as typed here ("run `./run.sh -Doutbox.db=... OutboxLab reset` first").
export OUTBOX_LAB_FRONTEND=$0

# A reset starts a new experiment: once the lab has reset this database, its broker is stopped,
# so the next command starts one on an empty topic (offsets from 0, as in the chapter). A reset
# that fails (a garbage file, a directory) leaves the broker and its records alone, and other
# databases' brokers are never touched. Real Kafka (OUTBOX_KAFKA=real) keeps its records: the
# lab counts only the new run's.
if [ "$subcommand" = reset ] && [ "$kafka_kind" = embedded ] && [ "$wants_help" -eq 0 ] && [ "$has_brokers" -eq 0 ] &&
   [ -z "${KAFKA_BOOTSTRAP_SERVERS:-}" ]; then
  rc=0
  "$bin" "${args[@]}" || rc=$?
  if [ "$rc" -eq 0 ] && stop_broker; then
    say "reset: stopped the embedded broker of $BROKER_DB (pid $STOPPED_PID); the next command starts one on an empty topic"
  fi
  exit "$rc"
fi

if [ "$needs_broker" -eq 1 ] && [ "$kafka_kind" = real ]; then
  addr=$(ensure_real_kafka) || exit "$kRunShFailed"
  exec "$bin" --brokers "$addr" "${args[@]}"
fi
if [ "$needs_broker" -eq 1 ]; then
  addr=$(ensure_broker) || exit "$kRunShFailed"
  exec "$bin" --brokers "$addr" "${args[@]}"
fi
exec "$bin" "${args[@]}"
