#!/usr/bin/env bash
# A throwaway PostgreSQL 15 server for the lab, from Debian's postgresql-15, without Docker (issue 12).
#
#   scripts/postgres.sh start    initdb (first time) and start; prints the connection URL
#   scripts/postgres.sh stop     a clean shutdown (pg_ctl stop -m fast)
#   scripts/postgres.sh crash    the server's own crash: pg_ctl stop -m immediate (no checkpoint;
#                                the next start replays the WAL, as after a power cut of the server)
#   scripts/postgres.sh url      the connection URL (exit 3 when the server is not running)
#   scripts/postgres.sh status   running or not (exit 0 / 3), with the data directory
#   scripts/postgres.sh destroy  stop it and delete its directory
#
# Environment:
#   OUTBOX_PG_DIR   where the cluster lives (default ${TMPDIR:-/tmp}/outbox-lab-pg): data/, the
#                   unix socket in sock/, the server log in server.log
#   OUTBOX_PG_PORT  the loopback TCP port (default 55432)
#
# The cluster listens on 127.0.0.1 only and on a unix socket in its own directory, trusts local
# connections (a lab, never a server with data worth a password), and keeps fsync=on and
# synchronous_commit=on: a commit the server acknowledged survives its crash, as in production.
# It runs with wal_level=logical, max_replication_slots=20 and max_wal_senders=20 (the WAL relay,
# relay --source wal, reads a logical replication slot) and max_slot_wal_keep_size=1GB (a slot
# whose relay stays down cannot pin more WAL than that: the slot is invalidated instead of the
# disk filling). These are -c options of every start, so a cluster created before them gets them
# at its next start (scripts/postgres.sh stop, then start; wal_level needs a restart).
# initdb refuses to run as root, so as root the cluster belongs to the `postgres` user that the
# Debian package creates. Exit codes: 0 ok, 2 usage, 3 not running, 4 no PostgreSQL 15 installed
# (run scripts/install-deps.sh), 5 the server did not start (its log's tail is
# printed).
set -euo pipefail

PG_BIN=/usr/lib/postgresql/15/bin
DIR=${OUTBOX_PG_DIR:-${TMPDIR:-/tmp}/outbox-lab-pg}
case $DIR in /*) ;; *) DIR=$PWD/$DIR ;; esac  # as_owner runs from /
PORT=${OUTBOX_PG_PORT:-55432}
DATA=$DIR/data
SOCK=$DIR/sock
LOG=$DIR/server.log
USER_NAME=outbox
DB_NAME=outbox_lab

err() { echo "outbox-lab: error: postgres.sh: $1" >&2; exit "${2:-1}"; }

[ -x "$PG_BIN/pg_ctl" ] ||
  err "PostgreSQL 15 is not installed ($PG_BIN/pg_ctl missing); run scripts/install-deps.sh" 4

# as_owner CMD...: run CMD as the cluster's owner (postgres when we are root, else ourselves).
# From /: the postgres user may not enter the caller's working directory, and PostgreSQL's tools
# then print `could not change directory to "...": Permission denied` on every call.
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    (cd / && runuser -u postgres -- "$@")
  else
    "$@"
  fi
}

# Logical decoding for the WAL relay (docs/wal-relay.md); see the header.
LOGICAL_OPTS="-c wal_level=logical -c max_replication_slots=20 -c max_wal_senders=20 -c max_slot_wal_keep_size=1GB"

url() { echo "postgresql://$USER_NAME@127.0.0.1:$PORT/$DB_NAME"; }

running() { as_owner "$PG_BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; }

start() {
  if [ ! -f "$DATA/PG_VERSION" ]; then
    mkdir -p "$DIR" "$SOCK"
    [ "$(id -u)" -eq 0 ] && chown -R postgres:postgres "$DIR"
    as_owner "$PG_BIN/initdb" -D "$DATA" -U "$USER_NAME" --auth=trust -E UTF8 --locale=C.UTF-8 \
      >"$DIR/initdb.log" 2>&1 || { tail -n 5 "$DIR/initdb.log" >&2; err "initdb failed in $DATA" 5; }
  fi
  if ! running; then
    # -w: pg_ctl returns once the server accepts connections (or after its own 60 s timeout).
    as_owner "$PG_BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $PORT -k $SOCK -c fsync=on -c synchronous_commit=on $LOGICAL_OPTS" \
      start >/dev/null 2>&1 || { tail -n 5 "$LOG" >&2 || true; err "the server did not start (log: $LOG)" 5; }
  fi
  if ! as_owner "$PG_BIN/psql" -h "$SOCK" -p "$PORT" -U "$USER_NAME" -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'" | grep -q 1; then
    as_owner "$PG_BIN/createdb" -h "$SOCK" -p "$PORT" -U "$USER_NAME" "$DB_NAME"
  fi
  url
}

case ${1:-} in
  start) start ;;
  stop)
    running && as_owner "$PG_BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
    echo "[postgres] stopped ($DATA)"
    ;;
  crash)
    running || err "not running ($DATA)" 3
    as_owner "$PG_BIN/pg_ctl" -D "$DATA" -m immediate -w stop >/dev/null
    echo "[postgres] crashed: stop -m immediate, no shutdown checkpoint ($DATA)"
    ;;
  url) running || err "not running ($DATA); run scripts/postgres.sh start" 3; url ;;
  status)
    if running; then echo "[postgres] running: $(url) (data $DATA)"; else echo "[postgres] not running ($DATA)"; exit 3; fi
    ;;
  destroy)
    running && as_owner "$PG_BIN/pg_ctl" -D "$DATA" -m immediate -w stop >/dev/null
    rm -rf "$DIR"
    echo "[postgres] destroyed $DIR"
    ;;
  -h | --help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) err "usage: postgres.sh start|stop|crash|url|status|destroy (see --help)" 2 ;;
esac
