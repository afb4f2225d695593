#!/usr/bin/python3
# The relay a team writes in Python when the chapter's per-row loop is too slow: the bench's
# comparator (outbox-lab bench, "whole processes"). Each page: read up to 1,000 unpublished rows,
# produce them all, flush, mark the acknowledged ones published in ONE transaction; until a page
# comes back empty. Debian's python3-confluent-kafka and the standard sqlite3, nothing else.
# Takes the options the bench gives every drain child: --db --brokers --topic --synchronous
# --busy-timeout (e.g. 5000ms) and -X name=value (librdkafka properties).
import argparse
import sqlite3
import time

from confluent_kafka import Producer

parser = argparse.ArgumentParser()
for option in ("--db", "--brokers", "--topic"):
    parser.add_argument(option, required=True)
parser.add_argument("--synchronous", default="full")
parser.add_argument("--busy-timeout", default="5000ms")
parser.add_argument("--batch-size", type=int, default=1000)
parser.add_argument("-X", action="append", default=[])
args = parser.parse_args()

db = sqlite3.connect(args.db, isolation_level=None)  # explicit BEGIN / COMMIT below
db.execute("PRAGMA journal_mode = WAL")
db.execute(f"PRAGMA synchronous = {args.synchronous}")
db.execute(f"PRAGMA busy_timeout = {int(args.busy_timeout.removesuffix('ms'))}")
run_id = db.execute("SELECT run_id FROM outbox_run WHERE id = 1").fetchone()[0]
config = {"bootstrap.servers": args.brokers, "acks": "all"}
config.update(x.split("=", 1) for x in args.X)
producer = Producer(config)

while True:
    page = db.execute("SELECT id, event_id, event_type, payload FROM outbox "
                      "WHERE published = 0 ORDER BY id LIMIT ?", (args.batch_size,)).fetchall()
    if not page:
        break
    acked = []
    for row_id, event_id, event_type, payload in page:
        producer.produce(args.topic, key=event_id, value=payload,
                         headers={"event_id": event_id, "event_type": event_type,
                                  "outbox_id": str(row_id), "run_id": run_id},
                         on_delivery=lambda err, msg, row_id=row_id: err or acked.append(row_id))
    producer.flush()
    now_ms = int(time.time() * 1000)
    db.execute("BEGIN")
    db.executemany("UPDATE outbox SET published = 1, published_at = ? WHERE id = ?",
                   [(now_ms, row_id) for row_id in acked])
    db.execute("COMMIT")
    if len(acked) != len(page):
        raise SystemExit(f"python relay: {len(page) - len(acked)} of {len(page)} deliveries failed")
