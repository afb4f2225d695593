#!/usr/bin/env bash
# Delayed publish on PostgreSQL: relay-delayed.sh with the outbox in a schema of its own on
# $OUTBOX_PG_URL, not_before written and judged on the server's clock. Injects and expects what
# relay-delayed.sh says, in both coordination modes. Skipped (exit 77) without OUTBOX_PG_URL.
DELAY_BACKEND=postgres
# shellcheck source-path=SCRIPTDIR source=relay-delayed.sh
. "$(dirname "$0")/relay-delayed.sh"
