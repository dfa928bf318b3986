/**
 * Baseline B-pg: what Postgres alone does with the same rows and the same seq protocol,
 * no broker in between. The rows the broker would store (same events, same shape) go
 * into a scratch table created `LIKE run_events INCLUDING ALL` (same columns, keys and
 * indexes), in batches of one thread's events, each in one transaction that runs the
 * broker's statements (src/persist/seq-assigner.ts): pg_advisory_xact_lock on the
 * thread, the head seq plus the already-stored event_ids, then one `unnest` insert with
 * seq = head + ordinality. Threads are split over the connections, so each thread's
 * batches go in order, as the persister's do.
 */
import pg from 'pg';
import { createLogger } from '../../src/logger.js';
import { migrate } from '../../src/persist/migrate.js';
import type { Servers } from '../../test/helpers/stack.js';
import { type CpuMs, coresUsed, cpuPerEvent, cpuSnapshot } from '../lib/cpu.js';
import { makeThreads, nextTokenEvent } from '../lib/payload.js';

export const SCRATCH_TABLE = 'bench_raw_events';

export interface PgBaselineOptions {
  readonly events: number;
  readonly threads: number;
  readonly batchSize: number;
  readonly connections: number;
}

export interface PgBaselineResult {
  readonly events: number;
  readonly stored: number;
  readonly batches: number;
  readonly ms: number;
  readonly eventsPerS: number;
  readonly cores: CpuMs | undefined;
  /** CPU time per stored row, µs, per process role. */
  readonly cpuUsPerEvent: Omit<CpuMs, 'other'> | undefined;
}

const LOCK_SQL = 'SELECT pg_advisory_xact_lock(hashtextextended($1, 0))';
const EXISTING_SQL = `
  SELECT NULL::text AS event_id, COALESCE(max(seq), 0)::int8 AS seq, NULL::int8 AS stream_offset
    FROM ${SCRATCH_TABLE} WHERE thread_id = $1
  UNION ALL
  SELECT event_id, seq, stream_offset
    FROM ${SCRATCH_TABLE} WHERE thread_id = $1 AND event_id = ANY($2::text[])`;
const INSERT_SQL = `
  INSERT INTO ${SCRATCH_TABLE}
    (thread_id, seq, event_id, run_id, event_type, category, user_id, created_at, content, metadata, stream_offset)
  SELECT $1, $2::int8 + x.ord, x.event_id, x.run_id, x.event_type, x.category, x.user_id, x.created_at,
         x.content::json, x.metadata::json, x.stream_offset
    FROM unnest($3::text[], $4::text[], $5::text[], $6::int2[], $7::text[], $8::timestamptz[],
                $9::text[], $10::text[], $11::int8[])
         WITH ORDINALITY AS x(event_id, run_id, event_type, category, user_id, created_at,
                              content, metadata, stream_offset, ord)`;

/** One thread's batch, as the columns of the insert. */
interface Batch {
  readonly threadId: string;
  readonly eventId: string[];
  readonly runId: string[];
  readonly eventType: string[];
  readonly category: number[];
  readonly userId: string[];
  readonly createdAt: string[];
  readonly content: string[];
  readonly metadata: string[];
  readonly offset: number[];
}

export async function runPgBaseline(servers: Servers, o: PgBaselineOptions): Promise<PgBaselineResult> {
  const databaseUrl = await servers.pg.createDatabase();
  const pool = new pg.Pool({ connectionString: databaseUrl, max: o.connections });
  pool.on('error', () => undefined);
  try {
    await migrate(pool, createLogger('warn'));
    await pool.query(`CREATE TABLE ${SCRATCH_TABLE} (LIKE run_events INCLUDING ALL)`);

    // Rows first, so the clock measures Postgres, not the generator.
    const threads = makeThreads(o.threads);
    const perThread = Math.ceil(o.events / o.threads);
    const queues: Batch[][] = Array.from({ length: o.connections }, () => []);
    const createdAt = new Date().toISOString();
    let offset = 0;
    let total = 0;
    for (let done = 0; done < perThread; done += o.batchSize) {
      for (const t of threads) {
        const n = Math.min(o.batchSize, perThread - done, o.events - total);
        if (n <= 0) continue;
        const b: Batch = {
          threadId: t.threadId,
          eventId: [],
          runId: [],
          eventType: [],
          category: [],
          userId: [],
          createdAt: [],
          content: [],
          metadata: [],
          offset: [],
        };
        for (let i = 0; i < n; i++) {
          const e = nextTokenEvent(t);
          b.eventId.push(e.event_id);
          b.runId.push(e.run_id);
          b.eventType.push(e.event_type);
          b.category.push(1);
          b.userId.push('');
          b.createdAt.push(createdAt);
          b.content.push(e.content_json);
          b.metadata.push(e.metadata_json);
          b.offset.push(++offset);
        }
        total += n;
        queues[t.index % o.connections]?.push(b);
      }
    }

    const clients = await Promise.all(queues.map(() => pool.connect()));
    try {
      const cpuBefore = cpuSnapshot([]);
      const t0 = performance.now();
      await Promise.all(
        clients.map(async (client, c) => {
          for (const b of queues[c] ?? []) await storeBatch(client, b);
        }),
      );
      const ms = performance.now() - t0;
      const cpuAfter = cpuSnapshot([]);
      const { rows } = await (clients[0] as pg.PoolClient).query<{ n: string }>(
        `SELECT count(*) AS n FROM ${SCRATCH_TABLE}`,
      );
      return {
        events: total,
        stored: Number(rows[0]?.n ?? 0),
        batches: queues.reduce((n, q) => n + q.length, 0),
        ms,
        eventsPerS: (total / ms) * 1000,
        cores: coresUsed(cpuBefore, cpuAfter, ms),
        cpuUsPerEvent: cpuPerEvent(cpuBefore, cpuAfter, total),
      };
    } finally {
      for (const c of clients) c.release();
    }
  } finally {
    await pool.end();
    const name = decodeURIComponent(new URL(databaseUrl).pathname.slice(1));
    await servers.db.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`).catch(() => undefined);
  }
}

async function storeBatch(client: pg.PoolClient, b: Batch): Promise<void> {
  await client.query('BEGIN');
  try {
    await client.query({ name: 'b_lock', text: LOCK_SQL, values: [b.threadId] });
    const existing = await client.query<{ event_id: string | null; seq: string }>({
      name: 'b_existing',
      text: EXISTING_SQL,
      values: [b.threadId, b.eventId],
    });
    let head = 0;
    for (const row of existing.rows) {
      if (row.event_id === null) head = Number(row.seq);
      else throw new Error(`event ${row.event_id} of ${b.threadId} is already stored`);
    }
    await client.query({
      name: 'b_insert',
      text: INSERT_SQL,
      values: [
        b.threadId,
        head,
        b.eventId,
        b.runId,
        b.eventType,
        b.category,
        b.userId,
        b.createdAt,
        b.content,
        b.metadata,
        b.offset,
      ],
    });
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  }
}
