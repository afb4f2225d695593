#!/usr/bin/env bash
# The kill soak of the WAL relay: kill-soak.sh --source wal. Injects seeded kill -9s of a writer
# and of relay --source wal while they run side by side on the PostgreSQL server at
# $OUTBOX_PG_URL (a schema of its own), at least one of them standing at the failpoint
# relay.wal.after_ack_before_confirm (the batch acknowledged by the broker, the slot's LSN not
# confirmed). Expects what kill-soak.sh says for --source wal: every kill lands, check --history
# valid with 0 lost and 0 phantom, duplicated > 0 and each duplicate an id a killed WAL relay had
# sent. Skipped (exit 77) when OUTBOX_PG_URL is unset.
exec bash "$(dirname "$0")/kill-soak.sh" --source wal "$@"
