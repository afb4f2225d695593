#!/usr/bin/env bash
# Issue 12, crash kinds on PostgreSQL: the crash sweep (crash-sweep.sh, every failpoint x hit
# count, kill -9 of the lab process at the point) with the outbox on the PostgreSQL server at
# $OUTBOX_PG_URL, in a schema of its own. Injects and expects what crash-sweep.sh says: every cell
# fires, 0 lost and 0 phantom per cell. Skipped (exit 77) only when OUTBOX_PG_URL is unset;
# scripts/test.sh sets it. The server itself does not crash here: the shared one serves.
exec bash "$(dirname "$0")/crash-sweep.sh" --postgres "$@"
