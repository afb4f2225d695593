#!/usr/bin/env bash
# The crash sweep of the WAL relay: crash-sweep.sh --postgres --source wal. Injects a kill -9 of
# relay --source wal at each relay.wal.* failpoint (after receive, after produce, after the ack
# and before the LSN confirm), at hits 1 and 3, with the outbox on the PostgreSQL server at
# $OUTBOX_PG_URL (wal_level=logical, scripts/postgres.sh) in a schema of its own. Expects what
# crash-sweep.sh says: every cell fires, 0 lost and 0 phantom, and duplicates only from the batch
# killed before its confirm (at most 7; at relay.wal.after_receive the batch before, when the kill
# beats its confirm message to the walsender). Skipped (exit 77) when
# OUTBOX_PG_URL is unset.
exec bash "$(dirname "$0")/crash-sweep.sh" --postgres --source wal "$@"
