#!/usr/bin/env bash
# Issue 12, leader mode on PostgreSQL — kill -9 of the leader mid-batch; the standby takes over.
# Injects and expects what leader-kill-takeover.sh says, on a PostgreSQL outbox at $OUTBOX_PG_URL
# in a schema of its own, the lease judged on the server's clock; plus a closing status: the lease
# row at token 2 and no live leader. Skipped (exit 77) only when OUTBOX_PG_URL is unset;
# scripts/test.sh sets it.
exec bash "$(dirname "$0")/leader-kill-takeover.sh" --postgres "$@"
