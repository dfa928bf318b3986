// storeBatch (one transaction for a whole multi-thread batch) against a real Postgres:
// storing many threads at once must give exactly what storing each thread alone, one
// after another, gives (storeThreadBatch), and concurrent batches with overlapping
// threads must neither deadlock nor collide (invariants 1 and 3).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import type { LogRecord } from '../src/domain/event.js';
import { createLogger } from '../src/logger.js';
import { storeBatch } from '../src/persist/batch-assigner.js';
import { deleteRows } from '../src/persist/deletions.js';
import { migrate } from '../src/persist/migrate.js';
import { type PendingEvent, storeThreadBatch, type ThreadBatchResult } from '../src/persist/seq-assigner.js';
import { type PostgresHandle, startPostgres } from './helpers/postgres.js';
import { expectGapFree, randomName, threadRows } from './helpers/stack.js';

let server: PostgresHandle;
/** Stored with storeBatch. */
let pool: pg.Pool;
/** The twin: the same batches stored one thread at a time with storeThreadBatch. */
let twin: pg.Pool;
let nextOffset = 1;
let clock = Date.parse('2026-01-01T00:00:00.000Z');

before(async () => {
  server = await startPostgres();
  pool = new pg.Pool({ connectionString: server.url, max: 10 });
  twin = new pg.Pool({ connectionString: await server.createDatabase(), max: 10 });
  pool.on('error', () => undefined);
  twin.on('error', () => undefined);
  await migrate(pool, createLogger('silent'));
  await migrate(twin, createLogger('silent'));
});
after(async () => {
  await pool.end();
  await twin.end();
  await server[Symbol.asyncDispose]();
});

type Category = LogRecord['category'];

function pending(
  threadId: string,
  eventId: string,
  runId = 'run-1',
  opts: { type?: string; category?: Category; user?: string; content?: unknown } = {},
): PendingEvent {
  clock += 7;
  const record: LogRecord = {
    thread_id: threadId,
    run_id: runId,
    event_id: eventId,
    event_type: opts.type ?? 'ai_chunk',
    category: opts.category ?? 'message',
    user_id: opts.user ?? '',
    created_at: new Date(clock).toISOString(),
    content_json: JSON.stringify(opts.content ?? { content: eventId }),
    metadata_json: '{}',
  };
  return { record, offset: nextOffset++ };
}

async function batchStore(
  db: pg.Pool,
  groups: Map<string, PendingEvent[]>,
): Promise<Map<string, ThreadBatchResult>> {
  const client = await db.connect();
  try {
    return await storeBatch(client, groups);
  } finally {
    client.release();
  }
}

async function perThreadStore(
  db: pg.Pool,
  groups: Map<string, PendingEvent[]>,
): Promise<Map<string, ThreadBatchResult>> {
  const out = new Map<string, ThreadBatchResult>();
  const client = await db.connect();
  try {
    for (const [t, batch] of groups) out.set(t, await storeThreadBatch(client, t, batch));
  } finally {
    client.release();
  }
  return out;
}

/** Everything the persister writes for these threads, comparable across databases. */
async function dump(db: pg.Pool, threads: string[]): Promise<unknown> {
  const q = async (sql: string) => (await db.query(sql, [threads])).rows;
  return {
    events: await q(`SELECT thread_id, seq, event_id, run_id, event_type, category, user_id, created_at,
                            content::text, metadata::text, stream_offset
                       FROM run_events WHERE thread_id = ANY($1) ORDER BY thread_id, seq`),
    runs: await q(`SELECT thread_id, run_id, user_id, users_mixed, status, first_seq, last_seq, end_seq,
                          event_count, message_count, trace_count, lifecycle_count, started_at, updated_at,
                          ended_at, metadata::text, outcome::text
                     FROM runs WHERE thread_id = ANY($1) ORDER BY thread_id, run_id`),
    heads: await q(`SELECT thread_id, head_seq, deleted_upto_offset, run_deleted_upto_offset
                      FROM thread_heads WHERE thread_id = ANY($1) ORDER BY thread_id`),
    runDeletions: await q(`SELECT thread_id, run_id, deleted_upto_offset
                             FROM run_deletions WHERE thread_id = ANY($1) ORDER BY thread_id, run_id`),
  };
}

/** A run's worth of varied events: lifecycle, messages, traces, users. */
function runEvents(threadId: string, runId: string, n: number, tag: string): PendingEvent[] {
  const out: PendingEvent[] = [];
  for (let i = 0; i < n; i++) {
    const id = `${runId}-${tag}-${i}`;
    if (i === 0 && tag !== 'c')
      out.push(pending(threadId, id, runId, { type: 'run_pending', category: 'lifecycle' }));
    else if (i === 1)
      out.push(
        pending(threadId, id, runId, {
          type: 'run_start',
          category: 'lifecycle',
          content: { model: tag },
          user: 'u1',
        }),
      );
    else if (i === n - 1 && tag === 'b')
      out.push(
        pending(threadId, id, runId, { type: 'end', category: 'lifecycle', content: { status: 'failed' } }),
      );
    else if (i % 3 === 0)
      out.push(pending(threadId, id, runId, { category: 'trace', user: i % 2 ? 'u2' : 'u1' }));
    else out.push(pending(threadId, id, runId, { user: i % 4 === 0 ? '' : 'u1' }));
  }
  return out;
}

/** Interleaves several runs' events the way the log would (round-robin). */
function interleave(...lists: PendingEvent[][]): PendingEvent[] {
  const out: PendingEvent[] = [];
  for (let i = 0; lists.some((l) => i < l.length); i++)
    for (const l of lists) if (i < l.length) out.push(l[i] as PendingEvent);
  return out;
}

async function both(
  groups: Map<string, PendingEvent[]>,
  threads: string[],
): Promise<Map<string, ThreadBatchResult>> {
  const mine = await batchStore(pool, groups);
  const theirs = await perThreadStore(twin, groups);
  assert.deepEqual(mine, theirs, 'storeBatch returns what storeThreadBatch returns, per thread');
  assert.deepEqual(await dump(pool, threads), await dump(twin, threads), 'same rows, runs and heads');
  return mine;
}

test('a multi-thread batch stores exactly what per-thread storage stores', async () => {
  const t = Array.from({ length: 6 }, () => randomName('bt-'));
  const [t0, t1, t2, t3, t4, t5] = t as [string, string, string, string, string, string];

  // Round 1: five threads, several runs each, interleaved.
  const r1 = new Map<string, PendingEvent[]>();
  for (const th of [t0, t1, t2, t3, t4])
    r1.set(th, interleave(runEvents(th, 'run-a', 6, 'a'), runEvents(th, 'run-b', 5, 'b')));
  const first = await both(r1, t);
  for (const [th, res] of first) assert.equal(expectGapFree(res.inserted.map((e) => e.seq)), 11, th);

  // Deletions between rounds, the same on both databases: t1 whole, run-b of t2.
  const horizon = nextOffset - 1;
  for (const db of [pool, twin]) {
    await deleteRows(db, { threadId: t1, logHorizon: horizon });
    await deleteRows(db, { threadId: t2, runId: 'run-b', logHorizon: horizon });
  }

  // Round 2: redeliveries, within-batch repeats, replays of deleted events, new events of
  // deleted threads and runs, a new thread, more runs.
  const r2 = new Map<string, PendingEvent[]>();
  const again = (th: string) => r1.get(th) as PendingEvent[];
  const repeat = pending(t0, 'rep', 'run-c');
  r2.set(t0, [
    ...again(t0).slice(3, 6),
    repeat,
    ...runEvents(t0, 'run-a', 4, 'c'),
    { ...repeat, offset: nextOffset++ },
    pending(t0, 'run-a-a-1', 'run-a'), // a later message with a stored id
    ...runEvents(t0, 'run-c', 3, 'b'),
  ]);
  r2.set(t1, [...again(t1).slice(0, 4), ...runEvents(t1, 'run-a', 3, 'c'), again(t1)[5] as PendingEvent]);
  r2.set(t2, interleave(again(t2), runEvents(t2, 'run-b', 4, 'c'), runEvents(t2, 'run-a', 3, 'c')));
  r2.set(t5, interleave(runEvents(t5, 'run-x', 5, 'a'), runEvents(t5, 'run-y', 4, 'b')));
  r2.set(t4, []);
  r2.set(t3, [...again(t3)]);
  const second = await both(r2, t);

  const seqs = (th: string) => second.get(th)?.receipts.map((r) => r.seq);
  // t0: the 3 redelivered keep their seqs; the repeat takes one seq; the stored id too.
  const s0 = seqs(t0) as number[];
  assert.deepEqual(s0.slice(0, 3), [4, 5, 6]);
  assert.equal(s0[3], 12);
  assert.equal(s0[8], 12, 'a repeat within the batch takes no seq');
  assert.equal(
    s0[9],
    first.get(t0)?.receipts.find((r) => r.event_id === 'run-a-a-1')?.seq,
    'a stored id takes no seq',
  );
  assert.deepEqual(
    second.get(t0)?.inserted.map((e) => e.seq),
    [12, 13, 14, 15, 16, 17, 18, 19],
  );
  // t1 deleted whole: replays get seq 0, new events continue above the old head.
  assert.deepEqual(seqs(t1), [0, 0, 0, 0, 12, 13, 14, 0]);
  // t2: run-b's replays dropped, run-a's are duplicates.
  for (const [i, p] of again(t2).entries()) {
    const r = second.get(t2)?.receipts.find((x) => x.event_id === p.record.event_id && x.offset === p.offset);
    if (p.record.run_id === 'run-b') assert.equal(r?.seq, 0);
    else assert.equal(r?.seq, first.get(t2)?.receipts[i]?.seq);
  }
  assert.equal(second.get(t3)?.inserted.length, 0);
  assert.deepEqual(second.get(t4), { inserted: [], receipts: [] });
  assert.equal(expectGapFree(second.get(t5)?.inserted.map((e) => e.seq) ?? []), 9);
  assert.equal(expectGapFree((await threadRows(pool, t0)).map((r) => r.seq)), 19);
});

test('concurrent batches over overlapping threads in opposite orders neither deadlock nor collide', async () => {
  const threads = Array.from({ length: 12 }, () => randomName('bc-'));
  const ROUNDS = 25;
  const PER = 4;
  const writer = async (w: number, order: string[]) => {
    for (let b = 0; b < ROUNDS; b++) {
      const groups = new Map<string, PendingEvent[]>();
      for (const th of order)
        groups.set(
          th,
          Array.from({ length: PER }, (_, i) => pending(th, `w${w}-b${b}-${i}`)),
        );
      const results = await batchStore(pool, groups);
      for (const r of results.values()) assert.ok(r.receipts.every((x) => x.seq > 0));
    }
  };
  const forward = threads.slice(0, 9);
  const backward = threads.slice(3).reverse();
  const shuffled = [...threads].sort(() => Math.random() - 0.5);
  await Promise.all([writer(0, forward), writer(1, backward), writer(2, shuffled), writer(3, backward)]);
  for (const th of threads) {
    const writers = [forward, backward, shuffled, backward].filter((o) => o.includes(th)).length;
    const rows = await threadRows(pool, th);
    assert.equal(expectGapFree(rows.map((r) => r.seq)), writers * ROUNDS * PER, th);
  }
  // No head is kept beside the rows (only a deletion keeps one): a thread's head is its top row.
  const kept = await pool.query('SELECT 1 FROM thread_heads WHERE thread_id = ANY($1)', [threads]);
  assert.equal(kept.rowCount, 0);
});

test('duplicates and repeats inside a multi-thread batch take no seq', async () => {
  const a = randomName('bd-');
  const b = randomName('bd-');
  const first = await batchStore(
    pool,
    new Map([
      [a, [pending(a, 'x'), pending(a, 'y')]],
      [b, [pending(b, 'x')]],
    ]),
  );
  assert.deepEqual(
    first.get(a)?.receipts.map((r) => r.seq),
    [1, 2],
  );
  assert.deepEqual(
    first.get(b)?.receipts.map((r) => r.seq),
    [1],
  );
  const again = await batchStore(
    pool,
    new Map([
      [b, [pending(b, 'x'), pending(b, 'z'), pending(b, 'z'), pending(b, 'w')]],
      [a, [pending(a, 'y'), pending(a, 'q'), pending(a, 'x'), pending(a, 'q')]],
    ]),
  );
  assert.deepEqual(
    again.get(a)?.receipts.map((r) => [r.event_id, r.seq]),
    [
      ['y', 2],
      ['q', 3],
      ['x', 1],
      ['q', 3],
    ],
  );
  assert.deepEqual(
    again.get(b)?.receipts.map((r) => [r.event_id, r.seq]),
    [
      ['x', 1],
      ['z', 2],
      ['z', 2],
      ['w', 3],
    ],
  );
  assert.equal(again.get(a)?.receipts[0]?.offset, first.get(a)?.receipts[1]?.offset, 'stored row offset');
  assert.deepEqual(
    (await threadRows(pool, a)).map((r) => [r.seq, r.event_id]),
    [
      [1, 'x'],
      [2, 'y'],
      [3, 'q'],
    ],
  );
  assert.deepEqual(
    (await threadRows(pool, b)).map((r) => [r.seq, r.event_id]),
    [
      [1, 'x'],
      [2, 'z'],
      [3, 'w'],
    ],
  );
  assert.deepEqual(await batchStore(pool, new Map()), new Map());
});
