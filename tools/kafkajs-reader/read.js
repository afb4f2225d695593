#!/usr/bin/env node
// Reads every record of a topic with kafkajs (https://kafka.js.org), a Kafka client written in
// JavaScript that implements the protocol itself, without librdkafka. One JSON line per record
// on stdout, bytes as hex so nothing is lost or re-encoded:
//   {"partition":0,"offset":"3","key":"6576742d31303031","value":"7b22...",
//    "headers":[["event_id","6576742d31303031"],...]}
// headers in the record's order (kafkajs keeps them in a plain object: a name sent twice would
// come back as an array, printed as one entry per value). key/value null for a null key/value.
//
//   node read.js --brokers HOST:PORT --topic T --count N [--timeout-ms MS]
//
// Exits 0 after N records, 1 when fewer arrived within the timeout (default 30000 ms; the
// records read so far are printed), 2 on bad arguments, 3 when kafkajs fails (its error on stderr,
// e.g. "KafkaJSNotImplemented: LZ4 compression not implemented").
'use strict';

const { Kafka, logLevel } = require('kafkajs');

function parseArgs(argv) {
  const args = { timeoutMs: 30000 };
  for (let i = 0; i < argv.length; i += 2) {
    const [name, value] = [argv[i], argv[i + 1]];
    if (value === undefined) usage(`${name} needs a value`);
    if (name === '--brokers') args.brokers = value.split(',');
    else if (name === '--topic') args.topic = value;
    else if (name === '--count') args.count = Number(value);
    else if (name === '--timeout-ms') args.timeoutMs = Number(value);
    else usage(`unknown argument '${name}'`);
  }
  if (!args.brokers || !args.topic || !(args.count > 0) || !(args.timeoutMs > 0))
    usage('--brokers, --topic and a positive --count are required');
  return args;
}

function usage(why) {
  process.stderr.write(`kafkajs-reader: error: ${why}\n` +
    'usage: node read.js --brokers HOST:PORT --topic T --count N [--timeout-ms MS]\n');
  process.exit(2);
}

const hex = (buffer) => (buffer === null || buffer === undefined ? null : buffer.toString('hex'));

function headerEntries(headers) {
  const entries = [];
  for (const [name, value] of Object.entries(headers || {})) {
    for (const one of Array.isArray(value) ? value : [value]) entries.push([name, hex(one)]);
  }
  return entries;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  // kafkajs logs with console.log by default; stdout carries only records here.
  const toStderr = () => ({ namespace, label, log }) =>
    process.stderr.write(`kafkajs ${label} ${namespace}: ${log.message}${log.error ? ` (${log.error})` : ''}\n`);
  const kafka = new Kafka({
    clientId: 'outbox-lab-kafkajs-reader',
    brokers: args.brokers,
    logLevel: logLevel.ERROR,
    logCreator: toStderr,
    retry: { retries: 3 },
  });
  // A group of its own per run: it starts from the beginning and commits nothing anyone reads.
  const consumer = kafka.consumer({ groupId: `outbox-lab-kafkajs-reader-${process.pid}-${Date.now()}` });
  let read = 0;
  let done;
  const finished = new Promise((resolve) => { done = resolve; });
  const timer = setTimeout(() => done(false), args.timeoutMs);
  let failure = null;
  consumer.on(consumer.events.CRASH, (event) => {
    failure = event.payload.error;
    done(false);
  });
  try {
    await consumer.connect();
    await consumer.subscribe({ topics: [args.topic], fromBeginning: true });
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        if (read >= args.count) return;
        process.stdout.write(JSON.stringify({
          partition,
          offset: message.offset,
          key: hex(message.key),
          value: hex(message.value),
          headers: headerEntries(message.headers),
        }) + '\n');
        read += 1;
        if (read === args.count) done(true);
      },
    });
    await finished;
  } catch (error) {
    failure = error;
  }
  clearTimeout(timer);
  await consumer.disconnect().catch(() => {});
  if (failure) {
    process.stderr.write(`kafkajs-reader: error: ${failure.name}: ${failure.message}\n`);
    process.exit(3);
  }
  if (read < args.count) {
    process.stderr.write(`kafkajs-reader: error: ${read} of ${args.count} records within ${args.timeoutMs} ms\n`);
    process.exit(1);
  }
}

main();
