#!/usr/bin/python3
"""Turns the raw output of Kafka's Java console consumer into one JSON line per record, bytes as
hex, in the form of tools/kafkajs-reader/read.js. The console consumer writes key, value and
header values as the raw bytes it fetched (no deserializer given); run it with the separators
below, bytes no record of the lab contains, so any payload, UTF-8 or not, splits cleanly:

  scripts/kafka.sh console-consumer ... \
    --formatter-property print.partition=true --formatter-property print.offset=true \
    --formatter-property print.headers=true --formatter-property print.key=true \
    --formatter-property key.separator=$'\\x1f' --formatter-property line.separator=$'\\x1c' \
    --formatter-property headers.separator=$'\\x1e' \
  | /usr/bin/python3 to-json.py

A header is printed name:value (the ':' is fixed in Kafka's DefaultMessageFormatter); the name
ends at the first ':', so a header name holding ':' would split wrongly (the lab's never do).

Reads stdin, writes stdout; exits 1 on a record it cannot split (the reason on stderr).
With --text it prints instead what the console consumer shows with its default separators (tab
between fields, ',' between headers, a newline per record), bytes that are not UTF-8 and control
bytes escaped as \\xNN.
"""
import json
import sys

FIELD, RECORD, HEADER, HEADER_NAME = b"\x1f", b"\x1c", b"\x1e", b":"


def fail(why):
    print(f"console-consumer-to-json: error: {why}", file=sys.stderr)
    sys.exit(1)


def headers_of(raw):
    if raw == b"NO_HEADERS":
        return []
    headers = []
    for entry in raw.split(HEADER):
        name, separator, value = entry.partition(HEADER_NAME)
        if not separator:
            fail(f"header without a name separator: {entry!r}")
        headers.append([name.decode("utf-8"), value.hex()])
    return headers


def text(data):
    shown = data.decode("utf-8", "backslashreplace")
    shown = "".join(c if c >= " " or c in "\x1c\x1e\x1f" else f"\\x{ord(c):02x}" for c in shown)
    return shown.replace("\x1f", "\t").replace("\x1e", ",").replace("\x1c", "\n")


def main():
    data = sys.stdin.buffer.read()
    if sys.argv[1:] == ["--text"]:
        sys.stdout.write(text(data))
        return
    for raw in data.split(RECORD):
        if not raw:
            continue
        fields = raw.split(FIELD)
        if len(fields) != 5:
            fail(f"{len(fields)} fields, expected 5 (partition, offset, headers, key, value): {raw!r}")
        partition, offset, headers, key, value = fields
        if not partition.startswith(b"Partition:") or not offset.startswith(b"Offset:"):
            fail(f"no Partition:/Offset: prefix: {raw!r}")
        print(json.dumps({
            "partition": int(partition[len(b"Partition:"):]),
            "offset": int(offset[len(b"Offset:"):]),
            "key": key.hex(),
            "value": value.hex(),
            "headers": headers_of(headers),
        }, separators=(",", ":")))


if __name__ == "__main__":
    main()
