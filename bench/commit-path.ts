/**
 * The persister's commit path alone: `node dist/bench/commit-path.js [--rounds=N] [--sizes=1,10,50]`.
 *
 * Calls `storeBatch` (src/persist/batch-assigner.ts) as the persister does, with its fence
 * (a held partition lease whose position each batch moves), on a fresh database with batches shaped as the fixed-rate scenarios make them (one
 * event per thread for up to 100 threads, then several per thread), and reports per batch
 * size the median latency of a batch (all its statements' round trips included)
 * and, per event, the main thread's busy time in this process (the pg client: encoding,
 * text-array escaping, the statements' replies) and Postgres' CPU. No broker, no NATS: what the commit path costs by itself.
 */
import { parseArgs } from 'node:util';
import pg from 'pg';
import type { LogRecord } from '../src/domain/event.js';
import { createLogger } from '../src/logger.js';
import { type BatchFence, storeBatch } from '../src/persist/batch-assigner.js';
import { migrate } from '../src/persist/migrate.js';
import type { PendingEvent } from '../src/persist/seq-assigner.js';
import { startServers } from '../test/helpers/stack.js';
import { makeThreads, nextTokenEvent } from './lib/payload.js';
import { schedSnapshot, usPerRequest } from './lib/schedstat.js';
import { median } from './lib/stats.js';

const { values: args } = parseArgs({
  options: {
    rounds: { type: 'string', default: '200' },
    sizes: { type: 'string', default: '1,10,50,100,500' },
  },
});
const ROUNDS = Number(args.rounds);
const SIZES = args.sizes.split(',').map(Number);
const THREADS = 100;
/** The one partition lease the batches are fenced with. */
const SCOPE = { stream: 'bench-log', member: 'bench-persister', leaseMs: 3_600_000 };
const EPOCH = 1;

async function main(): Promise<void> {
  await using servers = await startServers({ own: true });
  const url = await servers.pg.createDatabase();
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  pool.on('error', () => undefined);
  await migrate(pool, createLogger('silent'));
  await pool.query(
    `INSERT INTO log_partitions (stream, partition, owner, epoch, expires_at) VALUES ($1, 0, $2, $3, 'infinity')`,
    [SCOPE.stream, SCOPE.member, EPOCH],
  );
  const threads = makeThreads(THREADS);
  let offset = 0;
  const batchOf = (size: number): Map<string, PendingEvent[]> => {
    const groups = new Map<string, PendingEvent[]>();
    for (let i = 0; i < size; i++) {
      const t = threads[i % THREADS] as (typeof threads)[number];
      const e = nextTokenEvent(t);
      const record: LogRecord = {
        thread_id: e.thread_id,
        run_id: e.run_id,
        event_id: e.event_id,
        event_type: 'ai_chunk',
        category: 'message',
        user_id: '',
        created_at: new Date().toISOString(),
        content_json: e.content_json,
        metadata_json: e.metadata_json,
      };
      const g = groups.get(record.thread_id) ?? [];
      g.push({ record, offset: ++offset });
      groups.set(record.thread_id, g);
    }
    return groups;
  };
  const fenceOf = (groups: Map<string, PendingEvent[]>): BatchFence => {
    let upto = 0;
    for (const g of groups.values()) for (const p of g) upto = Math.max(upto, p.offset);
    return { scope: SCOPE, entries: [{ partition: 0, epoch: EPOCH, upto }] };
  };
  const client = await pool.connect();
  client.on('error', () => undefined);
  try {
    process.stdout.write(`commit path (storeBatch), ${ROUNDS} batches per size, ${THREADS} threads\n`);
    process.stdout.write(
      'events/batch  batch p50 ms  p99 ms   client busy µs/event  postgres CPU µs/event\n',
    );
    for (const size of SIZES) {
      // Warm up: plans prepared, first pages in the cache.
      for (let i = 0; i < 20; i++) {
        const b = batchOf(size);
        await storeBatch(client, b, fenceOf(b));
      }
      const batches = Array.from({ length: ROUNDS }, () => {
        const b = batchOf(size);
        return { b, fence: fenceOf(b) };
      });
      const ms: number[] = [];
      const before = schedSnapshot([]);
      // The client's time apart, as the main thread's busy time (event-loop utilisation): a
      // snapshot reads all of /proc, and the helper threads work for the servers' output.
      const own = performance.eventLoopUtilization();
      for (const { b, fence } of batches) {
        const t0 = performance.now();
        await storeBatch(client, b, fence);
        ms.push(performance.now() - t0);
      }
      const ownUs = performance.eventLoopUtilization(own);
      const cpu = usPerRequest(before, schedSnapshot([]), ROUNDS * size);
      const clientUs = Math.round((ownUs.active * 1000) / (ROUNDS * size));
      ms.sort((a, b) => a - b);
      const p99 = ms[Math.min(ms.length - 1, Math.floor(ms.length * 0.99))] ?? Number.NaN;
      process.stdout.write(
        `${String(size).padStart(12)}  ${median(ms).toFixed(2).padStart(12)}  ${p99.toFixed(2).padStart(6)}` +
          `   ${String(clientUs).padStart(20)}  ${String(cpu?.postgres ?? '?').padStart(21)}\n`,
      );
    }
  } finally {
    client.release();
    await pool.end();
  }
}

main().then(
  () => process.exit(),
  (err: unknown) => {
    process.stderr.write(
      `commit-path failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    process.exit(1);
  },
);
