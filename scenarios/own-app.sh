#!/usr/bin/env bash
# Your own application writes the outbox: the Python sample of docs/writing-to-the-outbox.md,
# run as given, ends valid.
# Injects: nothing; runs that Python block (extracted from the doc, unchanged) after
#          `reset`, then an application with its own `orders` table instead of business_loan.
# Expects: the sample commits one loan and its event; relay --until-empty publishes it; check is
#          valid (exit 0). With orders: check without --business-table says "atomicity skipped"
#          and is valid; with --business-table orders --business-key id it judges atomicity
#          (valid), and an order committed without its outbox row is an atomicity finding
#          (INVALID, exit 1) naming the order.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || die "python3 is required"

start_broker
cd "$TMP" || die "cd $TMP"
sample=$TMP/sample.py
# The doc's block after "Python (`sqlite3` from the standard library", as given.
awk '/Python \(`sqlite3` from the standard library/ {found=1} found && /^```python$/ {inside=1; next}
     inside && /^```$/ {exit} inside {print}' "$REPO_DIR/docs/writing-to-the-outbox.md" >"$sample"
grep -q 'data/outbox.db' "$sample" || die "no Python sample writing data/outbox.db in docs/writing-to-the-outbox.md"

step "the doc's Python sample, after reset, ends valid"
DB=data/outbox.db
run reset
expect_rc 0 "reset data/outbox.db"
echo "\$ python3 sample.py"
python3 "$sample" || fail "the doc's Python sample failed (exit $?)"
run relay --until-empty
expect_rc 0 "relay --until-empty"
run check
expect_rc 0 "check after the sample"
expect_line '^\[check\] ok=1 lost=0 duplicated=0 phantom=0 atomicity=0 ' "$OUT"
expect_line '^\[check\] valid$' "$OUT"

step "an application with its own orders table"
DB=$TMP/orders.db
run reset
expect_rc 0 "reset orders.db"
echo "\$ python3  # CREATE TABLE orders; two orders, each with its event, one transaction each"
python3 - "$DB" <<'PY' || fail "the orders application failed"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("CREATE TABLE orders(id TEXT PRIMARY KEY, total INTEGER NOT NULL)")
for n in (1, 2):
    db.execute("BEGIN IMMEDIATE")
    db.execute("INSERT INTO orders(id, total) VALUES (?, ?)", (f"O-{n}", 100 * n))
    db.execute("INSERT INTO outbox(event_id, aggregate_id, event_type, payload) VALUES (?, ?, ?, ?)",
               (f"order-evt-{n}", f"O-{n}", "OrderPlaced", f'{{"orderId": "O-{n}"}}'))
    db.execute("COMMIT")
PY
run relay --until-empty
expect_rc 0 "relay --until-empty on orders"
run check
expect_rc 0 "check without --business-table"
expect_line '^\[check\] atomicity skipped: business_loan is empty' "$OUT"
run verify
expect_rc 0 "verify without --business-table"
expect_line '^\[verify\] atomicity skipped' "$OUT"
expect_no_line 'lost for good' "$OUT"
run check --business-table orders --business-key id
expect_rc 0 "check --business-table orders --business-key id"
expect_no_line 'atomicity skipped' "$OUT"
echo "\$ sqlite3: an order committed without its outbox row"
python3 -c "import sqlite3,sys; db=sqlite3.connect(sys.argv[1]); db.execute(\"INSERT INTO orders VALUES ('O-3', 300)\"); db.commit()" "$DB"
run check --business-table orders --business-key id
expect_rc 1 "check with an order without an event"
expect_line '^\[check\] atomicity: orders row O-3 has no outbox row$' "$OUT"
run check --business-table orders
expect_rc 2 "--business-table without --business-key"

finish
