// storeBatch's fast path (rs_store_rows, migrations 0009-0011: a whole batch in ONE statement)
// against a real Postgres: it must store exactly what the multi-statement transaction
// (storeBatchInTransaction) stores — rows, heads, runs, partition positions, receipts — fall
// back to that transaction whenever the batch holds a stored event or deleted history (no gap,
// nothing stored twice: invariants 1 and 3), fence like it (FencedError, nothing stored) and
// fail on bad data with the same SQLSTATE (poison.ts), and never read a whole table.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import type { LogRecord } from '../src/domain/event.js';
import { createLogger } from '../src/logger.js';
import { type BatchFence, storeBatch, storeBatchInTransaction } from '../src/persist/batch-assigner.js';
import { deleteRows } from '../src/persist/deletions.js';
import { FencedError, partitionPositions } from '../src/persist/leases.js';
import { migrate } from '../src/persist/migrate.js';
import { rejectionOf } from '../src/persist/poison.js';
import type { PendingEvent, ThreadBatchResult } from '../src/persist/seq-assigner.js';
import { type PostgresHandle, startPostgres } from './helpers/postgres.js';
import { expectGapFree, randomName, threadRows } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

let server: PostgresHandle;
/** Stored with storeBatch (the fast path where it fits). */
let pool: pg.Pool;
/** The twin: the same batches stored with the multi-statement transaction. */
let twin: pg.Pool;
let nextOffset = 1;
let clock = Date.parse('2026-01-01T00:00:00.000Z');

const STREAM = 'fast-path-log';
const MEMBER = 'persister-1';
const EPOCH = 7;
const scope = { stream: STREAM, member: MEMBER, leaseMs: 60_000 };

before(async () => {
  server = await startPostgres();
  pool = new pg.Pool({ connectionString: server.url, max: 4 });
  twin = new pg.Pool({ connectionString: await server.createDatabase(), max: 4 });
  pool.on('error', () => undefined);
  twin.on('error', () => undefined);
  for (const db of [pool, twin]) {
    await migrate(db, createLogger('silent'));
    await db.query(
      `INSERT INTO log_partitions (stream, partition, last_offset, owner, epoch, expires_at)
       SELECT $1, p, 0, $2, $3, 'infinity' FROM generate_series(0, 3) p`,
      [STREAM, MEMBER, EPOCH],
    );
  }
});
after(async () => {
  await pool.end();
  await twin.end();
  await server[Symbol.asyncDispose]();
});

function pending(
  threadId: string,
  eventId: string,
  runId = 'run-1',
  opts: { type?: string; category?: LogRecord['category']; user?: string; content?: unknown } = {},
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

/** A run's worth of varied events: lifecycle start and end, messages, traces, several users. */
function runEvents(threadId: string, runId: string, n: number, tag: string, end = false): PendingEvent[] {
  return Array.from({ length: n }, (_, i) => {
    const id = `${runId}-${tag}-${i}`;
    if (i === 0) return pending(threadId, id, runId, { type: 'run_pending', category: 'lifecycle' });
    if (i === 1)
      return pending(threadId, id, runId, {
        type: 'run_start',
        category: 'lifecycle',
        content: { model: tag },
        user: 'u1',
      });
    if (end && i === n - 1)
      return pending(threadId, id, runId, {
        type: 'end',
        category: 'lifecycle',
        content: { status: 'failed' },
      });
    if (i % 3 === 0) return pending(threadId, id, runId, { category: 'trace', user: i % 2 ? 'u2' : 'u1' });
    return pending(threadId, id, runId, { user: i % 4 === 0 ? '' : 'u1' });
  });
}

/** The fence of a batch: partition 0 moved to its last offset. */
function fenceOf(groups: Map<string, PendingEvent[]>): BatchFence {
  const upto = Math.max(0, ...[...groups.values()].flat().map((p) => p.offset));
  return { scope, entries: [{ partition: 0, epoch: EPOCH, upto }] };
}

/** Runs `fn` with a client of `db` whose queries are recorded (their text, in order). */
async function recording<T>(db: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<[T, string[]]> {
  const client = await db.connect();
  const texts: string[] = [];
  const query = client.query;
  client.query = ((...args: unknown[]) => {
    const q = args[0] as string | { text: string };
    texts.push(typeof q === 'string' ? q : q.text);
    return (query as (...a: unknown[]) => unknown).apply(client, args);
  }) as typeof client.query;
  try {
    return [await fn(client), texts];
  } finally {
    client.query = query;
    client.release();
  }
}

/** Everything the persister writes for these threads, comparable across databases. */
async function dump(db: pg.Pool, threads: string[]): Promise<unknown> {
  const q = async (sql: string, values: unknown[] = [threads]) => (await db.query(sql, values)).rows;
  return {
    events: await q(`SELECT thread_id, seq, event_id, run_id, event_type, category, user_id, created_at,
                            content::text, metadata::text, stream_offset, category_name, created_at_text
                       FROM run_events WHERE thread_id = ANY($1) ORDER BY thread_id, seq`),
    runs: await q(`SELECT thread_id, run_id, user_id, users_mixed, status, first_seq, last_seq, end_seq,
                          event_count, message_count, trace_count, lifecycle_count, started_at, updated_at,
                          ended_at, metadata::text, outcome::text
                     FROM runs WHERE thread_id = ANY($1) ORDER BY thread_id, run_id`),
    heads: await q(`SELECT thread_id, head_seq, deleted_upto_offset, run_deleted_upto_offset
                      FROM thread_heads WHERE thread_id = ANY($1) ORDER BY thread_id`),
    positions: await q(
      'SELECT partition, last_offset FROM log_partitions WHERE stream = $1 ORDER BY partition',
      [STREAM],
    ),
  };
}

/**
 * Stores `groups` with storeBatch on `pool` and with the transaction on `twin`, checks both
 * give the same results and rows, and returns the results and storeBatch's queries.
 */
async function both(
  groups: Map<string, PendingEvent[]>,
  threads: string[],
): Promise<[Map<string, ThreadBatchResult>, string[]]> {
  const [mine, texts] = await recording(pool, (c) => storeBatch(c, groups, fenceOf(groups)));
  const theirs = await recording(twin, (c) => storeBatchInTransaction(c, groups, fenceOf(groups)));
  assert.deepEqual(mine, theirs[0], 'the fast path returns what the transaction returns');
  assert.deepEqual(await dump(pool, threads), await dump(twin, threads), 'same rows, runs, heads, positions');
  return [mine, texts];
}

const FAST = /rs_store_rows/;

test('a batch of new events of several threads is stored in ONE query, as the transaction stores it', async () => {
  const t = Array.from({ length: 5 }, () => randomName('ft-'));
  const [t0, t1, t2, t3, t4] = t as [string, string, string, string, string];
  // Round 1: new threads, several runs each, one run ended.
  const r1 = new Map<string, PendingEvent[]>([
    [t0, [...runEvents(t0, 'run-a', 6, 'a'), ...runEvents(t0, 'run-b', 5, 'b', true)]],
    [t1, runEvents(t1, 'run-a', 3, 'a')],
    [t2, [pending(t2, 'only')]],
    [t3, []],
  ]);
  const [first, q1] = await both(r1, t);
  assert.equal(q1.length, 1, `one round trip, got: ${q1.join(' | ')}`);
  assert.match(q1[0] ?? '', FAST);
  assert.deepEqual(
    first.get(t0)?.receipts.map((r) => r.seq),
    Array.from({ length: 11 }, (_, i) => i + 1),
  );
  assert.deepEqual(first.get(t3), { inserted: [], receipts: [] });

  // Round 2: the same threads go on (runs updated, heads above 0), a new thread, one event per thread.
  const r2 = new Map<string, PendingEvent[]>([
    [t2, [pending(t2, 'next', 'run-1', { user: 'u9' })]],
    [t0, [pending(t0, 'more-a', 'run-a'), ...runEvents(t0, 'run-c', 4, 'c', true)]],
    [t1, [pending(t1, 'end', 'run-a', { type: 'run_end', category: 'lifecycle', content: {} })]],
    [t4, [pending(t4, 'x')]],
  ]);
  const [second, q2] = await both(r2, t);
  assert.equal(q2.length, 1, `one round trip, got: ${q2.join(' | ')}`);
  assert.deepEqual(
    second.get(t0)?.inserted.map((e) => e.seq),
    [12, 13, 14, 15, 16],
  );
  assert.deepEqual(
    second.get(t2)?.receipts.map((r) => r.seq),
    [2],
  );
  assert.equal(expectGapFree((await threadRows(pool, t0)).map((r) => r.seq)), 16);
  const positions = await partitionPositions(pool, STREAM);
  assert.equal(positions.get(0), nextOffset - 1, 'the fence moved the position');
});

test('the fast path reads the heads after its locks: a writer it waited for is seen committed', async () => {
  const t = randomName('fl-');
  await recording(pool, (c) => storeBatch(c, new Map([[t, [pending(t, 'e1')]]])));
  // Another writer of the thread holds its lock and has stored seq 2, not committed yet.
  const other = await pool.connect();
  try {
    await other.query('BEGIN');
    await other.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [t]);
    await other.query(
      `INSERT INTO run_events (thread_id, seq, event_id, run_id, event_type, category, user_id, created_at,
                               content, metadata, stream_offset)
       SELECT thread_id, 2, 'e2', run_id, event_type, category, user_id, created_at, content, metadata, $2
         FROM run_events WHERE thread_id = $1 AND seq = 1`,
      [t, nextOffset++],
    );
    const [result, texts] = await recording(pool, async (c) => {
      // The statement starts (its own snapshot taken) and waits for the lock.
      const storing = storeBatch(c, new Map([[t, [pending(t, 'e3')]]]));
      await waitFor(
        async () =>
          ((await pool.query("SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"))
            .rowCount ?? 0) > 0,
        { what: 'the fast path to wait for the lock' },
      );
      await other.query('COMMIT');
      return storing;
    });
    assert.equal(texts.length, 1);
    assert.deepEqual(
      result.get(t)?.receipts.map((r) => r.seq),
      [3],
      'the head read after the lock',
    );
  } finally {
    other.release();
  }
  assert.equal(expectGapFree((await threadRows(pool, t)).map((r) => r.seq)), 3);
});

test('a batch with a redelivered event falls back to the transaction: no gap, nothing twice', async () => {
  const [a, b] = [randomName('fr-'), randomName('fr-')];
  const r1 = new Map([
    [a, [pending(a, 'e1'), pending(a, 'e2')]],
    [b, [pending(b, 'e1')]],
  ]);
  const [first] = await both(r1, [a, b]);
  const again = r1.get(a)?.[1] as PendingEvent;
  const r2 = new Map([
    [b, [pending(b, 'e2')]],
    [a, [{ ...again, offset: nextOffset++ }, pending(a, 'e3')]],
  ]);
  const [second, texts] = await both(r2, [a, b]);
  assert.match(texts[0] ?? '', FAST, 'the fast path was tried first');
  assert.ok(texts.includes('BEGIN') && texts.includes('COMMIT'), 'then the transaction stored it');
  assert.deepEqual(
    second.get(a)?.receipts.map((r) => [r.event_id, r.seq, r.offset]),
    [
      ['e2', 2, first.get(a)?.receipts[1]?.offset],
      ['e3', 3, r2.get(a)?.[1]?.offset],
    ],
  );
  assert.deepEqual(
    second.get(a)?.inserted.map((e) => e.event_id),
    ['e3'],
  );
  assert.deepEqual(
    (await threadRows(pool, a)).map((r) => [r.seq, r.event_id]),
    [
      [1, 'e1'],
      [2, 'e2'],
      [3, 'e3'],
    ],
  );
  assert.deepEqual(
    (await threadRows(pool, b)).map((r) => [r.seq, r.event_id]),
    [
      [1, 'e1'],
      [2, 'e2'],
    ],
  );
});

test('a batch under a deletion horizon falls back and drops what the transaction drops', async () => {
  const [a, b] = [randomName('fd-'), randomName('fd-')];
  const r1 = new Map([
    [a, [...runEvents(a, 'run-a', 3, 'a'), ...runEvents(a, 'run-b', 3, 'b')]],
    [b, runEvents(b, 'run-a', 4, 'a')],
  ]);
  await both(r1, [a, b]);
  const horizon = nextOffset - 1;
  for (const db of [pool, twin]) {
    await deleteRows(db, { threadId: a, logHorizon: horizon });
    await deleteRows(db, { threadId: b, runId: 'run-a', logHorizon: horizon });
  }
  // Replays of the deleted past, and new events after it.
  const r2 = new Map([
    [a, [...(r1.get(a) ?? []).slice(0, 2), pending(a, 'new-a')]],
    [b, [...(r1.get(b) ?? []).slice(2), pending(b, 'new-b', 'run-a'), pending(b, 'other', 'run-z')]],
  ]);
  const [second, texts] = await both(r2, [a, b]);
  assert.match(texts[0] ?? '', FAST, 'the fast path was tried first');
  assert.ok(texts.includes('BEGIN'), 'then the transaction stored it');
  assert.deepEqual(
    second.get(a)?.receipts.map((r) => r.seq),
    [0, 0, 7],
  );
  assert.deepEqual(
    second.get(b)?.receipts.map((r) => r.seq),
    [0, 0, 5, 6],
  );
  // After the deletion, new events take the fast path again.
  const [, q3] = await both(new Map([[a, [pending(a, 'later')]]]), [a, b]);
  assert.equal(q3.length, 1);
  assert.deepEqual(
    (await threadRows(pool, a)).map((r) => r.seq),
    [7, 8],
  );
});

test('a lost lease: FencedError naming the lost partition, nothing stored, no position moved', async () => {
  const t = randomName('ff-');
  const before = await partitionPositions(pool, STREAM);
  const groups = new Map([[t, [pending(t, 'e1')]]]);
  const upto = nextOffset;
  const fence: BatchFence = {
    scope,
    entries: [
      { partition: 1, epoch: EPOCH, upto },
      { partition: 2, epoch: EPOCH - 1, upto }, // taken over: its epoch moved on
      { partition: 3, epoch: EPOCH, upto },
    ],
  };
  const [err, texts] = await recording(pool, (c) =>
    storeBatch(c, groups, fence).then(
      () => undefined,
      (e) => e,
    ),
  );
  assert.ok(err instanceof FencedError, String(err));
  assert.deepEqual(err.lost, [{ partition: 2, epoch: EPOCH - 1, upto }]);
  assert.equal(texts.length, 1, 'decided by the fast path alone');
  assert.deepEqual(await threadRows(pool, t), []);
  assert.deepEqual(await partitionPositions(pool, STREAM), before, 'the held leases did not move either');
  // The transaction says the same.
  const slow = await recording(pool, (c) =>
    storeBatchInTransaction(c, groups, fence).then(
      () => undefined,
      (e) => e,
    ),
  );
  assert.deepEqual(slow[0], err);
});

/** A batch of two threads whose second event of `t` has `content_json`. */
function withContent(t: string, content_json: string): Map<string, PendingEvent[]> {
  const p = pending(t, 'bad');
  const u = randomName('fp-');
  return new Map([
    [t, [pending(t, 'fine'), { ...p, record: { ...p.record, content_json } }]],
    [u, [pending(u, 'other')]],
  ]);
}

/** Stores `groups` both ways, each expected to fail: their errors, and the fast path's queries. */
async function failBoth(
  groups: Map<string, PendingEvent[]>,
): Promise<{ fast: unknown; slow: unknown; texts: string[] }> {
  const failure = (p: Promise<unknown>) =>
    p.then(
      () => undefined,
      (e: unknown) => e,
    );
  const [fast, texts] = await recording(pool, (c) => failure(storeBatch(c, groups, fenceOf(groups))));
  const [slow] = await recording(twin, (c) => failure(storeBatchInTransaction(c, groups, fenceOf(groups))));
  return { fast, slow, texts };
}

const sqlstate = (e: unknown) => (e as { code?: string } | undefined)?.code;

test('bad data fails the fast path with the SQLSTATE the transaction fails with', async () => {
  // Not JSON; JSON too deep for Postgres; a NUL character (refused by the text input itself).
  for (const content of ['{"no":', `${'['.repeat(20_000)}${']'.repeat(20_000)}`, '"nul \u0000"']) {
    const t = randomName('fp-');
    const { fast, slow, texts } = await failBoth(withContent(t, content));
    assert.match(texts[0] ?? '', FAST);
    assert.equal(texts.length, 1, 'no fallback on bad data');
    assert.ok(sqlstate(slow), `the transaction fails on ${content.slice(0, 20)}`);
    assert.equal(sqlstate(fast), sqlstate(slow), content.slice(0, 20));
    assert.deepEqual(rejectionOf(fast), rejectionOf(slow));
    assert.deepEqual(await threadRows(pool, t), [], 'nothing stored');
  }
});

test('texts travel joined and come back exactly: empty, NULL, quotes, escapes, "NULL", non-ASCII', async () => {
  // Each column of the fast path is one text split by rs_split_column (migration 0011): what
  // the transaction stores from real arrays must be what the fast path stores.
  const t = randomName('fj-');
  const u = randomName('fj-');
  const contents = [
    '""',
    '"a \\"quoted\\" \\\\ backslash, {brace} and, comma"',
    '{"k":"NULL","n":null,"e":"","emoji":"🙂 ü 张邦昌","nl":"a\\nb"}',
    '[ 1 ,\n\t2 ]',
    'null',
  ];
  const events = contents.map((content_json, i) => {
    const p = pending(t, i === 0 ? 'NULL' : `j${i}`, i % 2 ? 'NULL' : 'run-j', {
      category: (i === 2 ? 'custom_cat' : 'message') as LogRecord['category'],
      user: i === 3 ? 'NULL' : '',
    });
    const record: LogRecord = {
      ...p.record,
      content_json,
      metadata_json: i === 1 ? '{"traceparent":"00-\\"x\\"","z":"{,}"}' : '{}',
      ...(i === 4 ? { created_at_text: '2026-01-01T00:00:00.123456+00:00' } : {}),
    };
    return { ...p, record };
  });
  // A thread whose one event has an empty user: one element, the empty text.
  const groups = new Map<string, PendingEvent[]>([
    [t, events],
    [u, [pending(u, 'alone', 'run-u', { user: '' })]],
  ]);
  const [, texts] = await both(groups, [t, u]);
  assert.equal(texts.length, 1, `one round trip, got: ${texts.join(' | ')}`);
  assert.match(texts[0] ?? '', FAST);
  const rows = (
    await pool.query<{ event_id: string; content: string; user_id: string; category_name: string | null }>(
      'SELECT event_id, content::text AS content, user_id, category_name FROM run_events WHERE thread_id = $1 ORDER BY seq',
      [t],
    )
  ).rows;
  assert.deepEqual(
    rows.map((r) => r.content),
    contents,
  );
  assert.deepEqual(
    rows.map((r) => [r.event_id, r.user_id, r.category_name]),
    [
      ['NULL', '', null],
      ['j1', '', null],
      ['j2', '', 'custom_cat'],
      ['j3', 'NULL', null],
      ['j4', '', null],
    ],
  );
});

test('a text holding a separator sends the batch down the slow path, which refuses it as the transaction does', async () => {
  // Ingest never writes such a text (JSON holds no raw control character), but a message put on
  // the log by something else can: split at it, its column would not line up with the others.
  for (const content_json of ['"a\x1eb"', '\x1f', '{"x":"\x1e"}\x1e{}', '"\x1e"']) {
    const t = randomName('fx-');
    const { fast, slow, texts } = await failBoth(withContent(t, content_json));
    assert.ok(sqlstate(slow), `the transaction refuses ${JSON.stringify(content_json)}`);
    assert.equal(sqlstate(fast), sqlstate(slow), JSON.stringify(content_json));
    assert.deepEqual(rejectionOf(fast), rejectionOf(slow));
    assert.match(texts[0] ?? '', FAST);
    // The NULL marker alone in a column that cannot be NULL is only that text, refused as JSON.
    if (content_json.includes('\x1e'))
      assert.ok(texts.length > 1, `fell back to the transaction: ${texts.join(' | ')}`);
    assert.deepEqual(await threadRows(pool, t), [], 'nothing stored');
  }
});

test('the fast path reads no table whole, even when its tables were never analysed', async () => {
  // A database of its own: run_events, runs and thread_heads as a new deployment (or a restore)
  // has them, with no statistics. The function's statements are planned once per session and
  // those plans kept until an ANALYZE: one that scans a table makes every batch cost the whole history.
  const fresh = new pg.Pool({ connectionString: await server.createDatabase(), max: 1 });
  fresh.on('error', () => undefined);
  try {
    await migrate(fresh, createLogger('silent'));
    await fresh.query(
      `INSERT INTO log_partitions (stream, partition, last_offset, owner, epoch, expires_at)
       SELECT $1, p, 0, $2, $3, 'infinity' FROM generate_series(0, 3) p`,
      [STREAM, MEMBER, EPOCH],
    );
    const threads = Array.from({ length: 20 }, () => randomName('fs-'));
    const round = (n: number) =>
      new Map(
        threads.map((t) => [t, [pending(t, `e${n}`, `run-${n % 3}`), pending(t, `f${n}`, `run-${n % 3}`)]]),
      );
    const client = await fresh.connect();
    try {
      // Past PL/pgSQL's five custom plans: the generic plans are made, on tables still small.
      for (let n = 0; n < 12; n++) {
        const groups = round(n);
        await storeBatch(client, groups, fenceOf(groups));
      }
      await client.query("LOAD 'auto_explain'");
      await client.query(
        'SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on; SET client_min_messages = log',
      );
      const plans: string[] = [];
      client.on('notice', (m) => plans.push(m.message ?? ''));
      const groups = round(12);
      const result = await storeBatch(client, groups, fenceOf(groups));
      // One event stored before, in a batch of new ones: found, and the batch goes the slow way.
      const again = new Map([[threads[0] as string, [pending(threads[0] as string, 'e12', 'run-0')]]]);
      again.set(threads[1] as string, [pending(threads[1] as string, 'g1', 'run-0')]);
      const second = await storeBatch(client, again, fenceOf(again));
      await client.query('RESET client_min_messages');
      const fast = plans.filter(
        (p) =>
          /PL\/pgSQL function rs_store_rows|rs_store_rows\(/.test(p) || /Query Text: (WITH|SELECT)/.test(p),
      );
      assert.ok(fast.length >= 4, `the function's statements were explained (${plans.length} plans)`);
      for (const p of fast) assert.doesNotMatch(p, /Seq Scan on (run_events|runs|thread_heads)\b/, p);
      assert.deepEqual(
        result.get(threads[0] as string)?.receipts.map((r) => r.seq),
        [25, 26],
      );
      assert.deepEqual(
        second.get(threads[0] as string)?.receipts.map((r) => r.seq),
        [25],
        'the stored event keeps its seq, and takes no new one',
      );
      assert.deepEqual(
        second.get(threads[1] as string)?.receipts.map((r) => r.seq),
        [27],
      );
    } finally {
      client.release();
    }
  } finally {
    await fresh.end();
  }
});
