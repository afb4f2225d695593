#!/usr/bin/python3
"""Reads every record of a topic with confluent-kafka-python and prints one JSON line per record,
bytes as hex, in the form of tools/kafkajs-reader/read.js:

  {"partition":0,"offset":3,"key":"6576...","value":"7b22...","headers":[["event_id","6576..."],...]}

Debian's python3-confluent-kafka wraps librdkafka (confluent_kafka.libversion() names it), so
this is a second librdkafka client with Python's own decoding of what it hands over: weaker
evidence than kafkajs or Kafka's Java consumer, which share no code with the lab.

  /usr/bin/python3 read.py --brokers HOST:PORT --topic T --count N [--timeout-ms MS]

Reads every partition from its beginning to its end (no consumer group). Exits 0 when it read
exactly N records, 1 when it read another number within the timeout (default 30000 ms), 2 on bad
arguments, 3 when the client reports an error.
"""
import argparse
import json
import sys
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition


def hexed(data):
    return None if data is None else data.hex()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--timeout-ms", type=int, default=30000)
    args = parser.parse_args()
    if args.count <= 0 or args.timeout_ms <= 0:
        parser.error("--count and --timeout-ms must be positive")

    consumer = Consumer({
        "bootstrap.servers": args.brokers,
        "group.id": "outbox-lab-confluent-reader",  # required by the client; nothing is committed
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
    })
    deadline = time.monotonic() + args.timeout_ms / 1000
    try:
        metadata = consumer.list_topics(args.topic, timeout=args.timeout_ms / 1000)
        topic = metadata.topics[args.topic]
        if topic.error is not None:
            raise KafkaException(topic.error)
        partitions = sorted(topic.partitions)
        consumer.assign([TopicPartition(args.topic, p, 0) for p in partitions])
        at_end = set()
        read = 0
        while len(at_end) < len(partitions) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == -191:  # KafkaError._PARTITION_EOF
                    at_end.add(message.partition())
                    continue
                raise KafkaException(message.error())
            at_end.discard(message.partition())
            print(json.dumps({
                "partition": message.partition(),
                "offset": message.offset(),
                "key": hexed(message.key()),
                "value": hexed(message.value()),
                "headers": [[name, hexed(value)] for name, value in (message.headers() or [])],
            }, separators=(",", ":")), flush=True)
            read += 1
    except KafkaException as error:
        print(f"confluent-kafka-reader: error: {error}", file=sys.stderr)
        return 3
    finally:
        consumer.close()
    if read != args.count or len(at_end) < len(partitions):
        print(f"confluent-kafka-reader: error: read {read} records, expected {args.count}"
              f"{'' if len(at_end) == len(partitions) else ' (not at the end within the timeout)'}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
