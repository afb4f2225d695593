#!/usr/bin/env bash
# Broker outages never park rows, on PostgreSQL: relay-outage.sh's cases A (leader relay) and B
# (claims relay --until-empty) with the outbox in a schema of its own on $OUTBOX_PG_URL.
# Injects and expects what relay-outage.sh says for A and B. Skipped (exit 77) without
# OUTBOX_PG_URL.
OUTAGE_BACKEND=postgres
# shellcheck source-path=SCRIPTDIR source=relay-outage.sh
. "$(dirname "$0")/relay-outage.sh"
