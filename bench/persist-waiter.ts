/**
 * What a PERSISTED ack costs ingest past the log: `node dist/bench/persist-waiter.js
 * [--requests=N] [--rounds=N]`.
 *
 * Times, in ns a request, ingest's PersistWaiter (src/ingest/persist-waiter.ts) and its receipt
 * feed (log/thread-feed.ts, as roles/ingest.ts sets them up) for PERSISTED requests of one
 * event (the rule at token rates): prepare, wait, the receipt through a real nats-server (the
 * persister's message, published from this process), the answer, the release; 100 threads,
 * 50 requests in flight. No broker, no Postgres: the receipts are published as a commit would.
 * The median of the rounds is reported.
 */
import { parseArgs } from 'node:util';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import type pg from 'pg';
import type { LogRecord } from '../src/domain/event.js';
import type { Receipt } from '../src/domain/receipt.js';
import { PersistWaiter } from '../src/ingest/persist-waiter.js';
import { decodeReceipts, encodeReceipts } from '../src/log/announcements.js';
import { Subjects } from '../src/log/subjects.js';
import { ThreadFeeds } from '../src/log/thread-feed.js';
import { createLogger } from '../src/logger.js';
import { RECEIPT_LINGER_MS } from '../src/roles/ingest.js';
import { startNatsServer } from '../test/helpers/nats-server.js';
import { logRecord } from '../test/helpers/records.js';
import { median } from './lib/stats.js';

const { values: args } = parseArgs({
  options: {
    requests: { type: 'string', default: '100000' },
    rounds: { type: 'string', default: '7' },
  },
});
const REQUESTS = Number(args.requests);
const ROUNDS = Number(args.rounds);
const THREADS = 100;
const IN_FLIGHT = 50;

const subjects = new Subjects('bench');

const record = (i: number): LogRecord =>
  logRecord(`thread-${i % THREADS}`, 'run-1', `0193a5b2-7c1e-7d3a-9f00-${String(i).padStart(12, '0')}`);

async function round(waiter: PersistWaiter, nc: NatsConnection, from: number): Promise<number> {
  const one = async (i: number): Promise<void> => {
    const r = record(i);
    const pending = await waiter.prepare([r]);
    try {
      const answer = pending.wait([{ seq: i, duplicate: false }]);
      nc.publish(
        subjects.receipts(r.thread_id),
        Buffer.from(encodeReceipts([{ event_id: r.event_id, seq: i + 1, offset: i }])),
      );
      await answer;
    } finally {
      pending.dispose();
    }
  };
  const started = process.hrtime.bigint();
  const inFlight: Promise<void>[] = [];
  for (let i = from; i < from + REQUESTS; i++) {
    inFlight.push(one(i));
    if (inFlight.length === IN_FLIGHT) {
      await Promise.all(inFlight);
      inFlight.length = 0;
    }
  }
  await Promise.all(inFlight);
  return Number(process.hrtime.bigint() - started) / REQUESTS;
}

async function main(): Promise<void> {
  await using nats = await startNatsServer();
  const nc = await connect({ servers: nats.url });
  const feeds = new ThreadFeeds<Receipt[]>(
    nc,
    (t) => subjects.receipts(t),
    decodeReceipts,
    createLogger('silent'),
  );
  // No lookup in Postgres happens (every receipt comes at once), so no pool is needed.
  const waiter = new PersistWaiter(feeds, undefined as unknown as pg.Pool, 30_000, {
    lingerMs: RECEIPT_LINGER_MS,
  });
  await round(waiter, nc, 0); // warm-up
  const ns: number[] = [];
  for (let r = 1; r <= ROUNDS; r++) {
    ns.push(await round(waiter, nc, r * REQUESTS));
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  await nc.close();
  console.log(
    `PERSISTED waiter and receipt feed, one event a request: ${median(ns).toFixed(0)} ns a request (median of ${ROUNDS}; ${ns.map((x) => x.toFixed(0)).join(', ')})`,
  );
}

await main();
