// History at the store level, against a real Postgres: runs and the thread head are kept
// in the persister's own transaction, a thread-batch costs the same statements whatever
// its size, deletion horizons drop replayed events, and a deleted tail's seqs are never reused.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import type { CategoryName, LogRecord, StoredEvent } from '../src/domain/event.js';
import { classify } from '../src/domain/run-lifecycle.js';
import { createLogger } from '../src/logger.js';
import { deleteRows } from '../src/persist/deletions.js';
import { migrate } from '../src/persist/migrate.js';
import { headSeq } from '../src/persist/queries.js';
import { countMessages, getRun, runDeltas } from '../src/persist/runs.js';
import { type PendingEvent, storeThreadBatch } from '../src/persist/seq-assigner.js';
import { type PostgresHandle, startPostgres } from './helpers/postgres.js';
import { randomName } from './helpers/stack.js';

let server: PostgresHandle;
let pool: pg.Pool;
let nextOffset = 1;

before(async () => {
  server = await startPostgres();
  pool = new pg.Pool({ connectionString: server.url, max: 6 });
  pool.on('error', () => undefined);
  await migrate(pool, createLogger('silent'));
});
after(async () => {
  await pool.end();
  await server[Symbol.asyncDispose]();
});

function rec(
  threadId: string,
  runId: string,
  id: string,
  type = 'ai_chunk',
  category: CategoryName = 'message',
  content: unknown = { content: id },
  user = '',
): LogRecord {
  return {
    thread_id: threadId,
    run_id: runId,
    event_id: id,
    event_type: type,
    category,
    user_id: user,
    created_at: new Date().toISOString(),
    content_json: JSON.stringify(content),
    metadata_json: '{}',
  };
}

function pend(record: LogRecord, offset = nextOffset++): PendingEvent {
  return { record, offset };
}

async function store(threadId: string, batch: PendingEvent[], client?: pg.ClientBase) {
  const c = client ?? (await pool.connect());
  try {
    return await storeThreadBatch(c, threadId, batch);
  } finally {
    if (!client) (c as pg.PoolClient).release();
  }
}

test('a thread-batch is one transaction of a fixed number of statements, whatever its size', async () => {
  // Counts the statements a batch sends (a real client, only observed).
  const countStatements = async (threadId: string, batch: PendingEvent[]): Promise<number> => {
    const client = await pool.connect();
    const original = client.query.bind(client) as (...a: unknown[]) => unknown;
    let n = 0;
    (client as unknown as { query: (...a: unknown[]) => unknown }).query = (...a: unknown[]) => {
      n++;
      return original(...a);
    };
    try {
      await storeThreadBatch(client, threadId, batch);
    } finally {
      (client as unknown as { query: unknown }).query = original;
      client.release();
    }
    return n;
  };
  const one = randomName('t-');
  const many = randomName('t-');
  const small = await countStatements(one, [pend(rec(one, 'r1', 'e1'))]);
  const big = await countStatements(
    many,
    Array.from({ length: 1000 }, (_, i) =>
      pend(
        rec(
          many,
          `r${i % 3}`,
          `e${i}`,
          i % 10 === 0 ? 'llm_start' : 'ai_chunk',
          i % 10 === 0 ? 'trace' : 'message',
        ),
      ),
    ),
  );
  assert.equal(big, small, '1,000 events cost the statements of 1');
  assert.ok(big <= 7, `${big} statements`);

  // All 1,000 rows and the three runs were written by one transaction (no head is kept: deletions.ts).
  const xmins = await pool.query(
    `SELECT xmin::text AS x FROM run_events WHERE thread_id = $1
     UNION SELECT xmin::text FROM runs WHERE thread_id = $1`,
    [many],
  );
  assert.equal(xmins.rowCount, 1, 'one transaction id');
  const runs = await pool.query(
    'SELECT run_id, event_count::int, message_count::int, trace_count::int FROM runs WHERE thread_id = $1 ORDER BY run_id',
    [many],
  );
  assert.equal(
    runs.rows.reduce((s, r) => s + (r.event_count as number), 0),
    1000,
  );
  assert.equal(
    runs.rows.reduce((s, r) => s + (r.trace_count as number), 0),
    100,
  );
  assert.equal(await headSeq(pool, many), 1000);
});

test('run status follows the lifecycle events, across batches', async () => {
  const t = randomName('t-');
  const status = async (run: string) => (await getRun(pool, t, run))?.status;

  // pending → running (any activity) → interrupted → resumed → cancelled
  await store(t, [pend(rec(t, 'a', 'a1', 'run_pending', 'lifecycle', {}))]);
  assert.equal(await status('a'), 'pending');
  await store(t, [pend(rec(t, 'a', 'a2', 'llm_start', 'trace', {}))]);
  assert.equal(await status('a'), 'running');
  await store(t, [pend(rec(t, 'a', 'a3', 'interrupted', 'lifecycle', { reason: 'human input' }))]);
  const interrupted = await getRun(pool, t, 'a');
  assert.equal(interrupted?.status, 'interrupted');
  assert.equal(interrupted?.end_seq, 3);
  assert.deepEqual(JSON.parse(interrupted?.outcome_json ?? 'null'), { reason: 'human input' });
  assert.ok(interrupted?.ended_at);
  await store(t, [pend(rec(t, 'a', 'a4', 'run_start', 'lifecycle', { resumed: true }))]);
  const resumed = await getRun(pool, t, 'a');
  assert.equal(resumed?.status, 'running');
  assert.equal(resumed?.end_seq, null);
  assert.equal(resumed?.ended_at, null);
  assert.deepEqual(JSON.parse(resumed?.metadata_json ?? '{}'), { resumed: true });
  await store(t, [pend(rec(t, 'a', 'a5', 'run_cancelled', 'lifecycle', {}))]);
  assert.equal(await status('a'), 'cancelled');
  // A pending event after the run ran does not move it back.
  await store(t, [pend(rec(t, 'a', 'a6', 'pending', 'lifecycle', {}))]);
  assert.equal(await status('a'), 'cancelled');

  // The fixture's vocabulary: `metadata` starts, `end` with content.status, `error` fails.
  await store(t, [
    pend(rec(t, 'b', 'b1', 'metadata', 'lifecycle', { run_id: 'b', assistant_id: 'agent' })),
    pend(rec(t, 'b', 'b2', 'ai_chunk')),
    pend(rec(t, 'c', 'c1', 'metadata', 'lifecycle', { run_id: 'c' })),
    pend(rec(t, 'b', 'b3', 'end', 'lifecycle', { status: 'success' })),
    pend(rec(t, 'c', 'c2', 'error', 'lifecycle', { status: 'error', message: 'timeout' })),
  ]);
  const b = await getRun(pool, t, 'b');
  assert.equal(b?.status, 'success');
  assert.deepEqual(JSON.parse(b?.metadata_json ?? '{}'), { run_id: 'b', assistant_id: 'agent' });
  assert.deepEqual(
    [b?.first_seq, b?.last_seq, b?.end_seq, b?.event_count, b?.lifecycle_count],
    [7, 10, 10, 3, 2],
  );
  assert.equal(await status('c'), 'error');
  // The demo agent's vocabulary: run_start / run_end with content.status.
  await store(t, [
    pend(rec(t, 'd', 'd1', 'run_start', 'lifecycle', {})),
    pend(rec(t, 'd', 'd2', 'run_end', 'lifecycle', { status: 'interrupted' })),
  ]);
  assert.equal(await status('d'), 'interrupted');
  // A run whose first event is not lifecycle is running.
  await store(t, [pend(rec(t, 'e', 'e1', 'human_message'))]);
  assert.equal(await status('e'), 'running');
});

test('status rules as a pure fold (end statuses, pending-only batches)', () => {
  assert.deepEqual(classify('lifecycle', 'end', '{"status":"failed"}'), {
    kind: 'terminal',
    status: 'error',
  });
  assert.deepEqual(classify('lifecycle', 'end', '{"status":"canceled"}'), {
    kind: 'terminal',
    status: 'cancelled',
  });
  assert.deepEqual(classify('lifecycle', 'end', '"done"'), { kind: 'terminal', status: 'success' });
  assert.deepEqual(classify('lifecycle', 'run_error', '{}'), { kind: 'terminal', status: 'error' });
  assert.deepEqual(classify('message', 'end', '{}'), { kind: 'other' }, 'only lifecycle events count');
  const e = (seq: number, type: string, category: CategoryName): StoredEvent => ({
    ...rec('t', 'r', `x${seq}`, type, category, {}),
    seq,
    offset: seq,
  });
  assert.equal(runDeltas([e(1, 'run_pending', 'lifecycle')])[0]?.status, 'pending');
  assert.equal(runDeltas([e(1, 'run_pending', 'lifecycle')])[0]?.explicit, false);
  const d = runDeltas([
    e(1, 'run_start', 'lifecycle'),
    e(2, 'end', 'lifecycle'),
    e(3, 'ai_chunk', 'message'),
  ])[0];
  assert.equal(d?.status, 'success', 'an event after the end does not reopen the run');
  assert.equal(d?.end_seq, 2);
});

test('deleting the tail keeps the head: the next event takes head+1, never a reused seq', async () => {
  const t = randomName('t-');
  await store(t, [
    pend(rec(t, 'r1', 'a')),
    pend(rec(t, 'r1', 'b')),
    pend(rec(t, 'r2', 'c')),
    pend(rec(t, 'r2', 'd')),
  ]);
  const gone = await deleteRows(pool, { threadId: t, runId: 'r2', logHorizon: nextOffset - 1 });
  assert.deepEqual([gone.events, gone.runs, gone.head], [2, 1, 4]);
  assert.equal(await headSeq(pool, t), 4);
  const r = await store(t, [pend(rec(t, 'r3', 'e'))]);
  assert.equal(r.receipts[0]?.seq, 5);
  // Deleting everything keeps the head too.
  await deleteRows(pool, { threadId: t, logHorizon: nextOffset - 1 });
  assert.equal((await pool.query('SELECT 1 FROM run_events WHERE thread_id = $1', [t])).rowCount, 0);
  assert.equal(await headSeq(pool, t), 5);
  const again = await store(t, [pend(rec(t, 'r4', 'f'))]);
  assert.equal(again.receipts[0]?.seq, 6);
});

test('a replay after deletion cannot resurrect deleted events: messages at or below the horizon are dropped', async () => {
  const t = randomName('t-');
  const r1 = [pend(rec(t, 'r1', 'a')), pend(rec(t, 'r1', 'b'))];
  const r2 = [pend(rec(t, 'r2', 'c')), pend(rec(t, 'r2', 'd'))];
  const inFlight = pend(rec(t, 'r1', 'late')); // accepted into the log before the delete, not yet stored
  await store(t, [...r1, ...r2]);
  const horizon = inFlight.offset;
  await deleteRows(pool, { threadId: t, runId: 'r1', logHorizon: horizon });

  // The persister restarts from an old checkpoint and meets r1 and r2 again, then the late one.
  const replay = await store(t, [...r1, ...r2, inFlight, pend(rec(t, 'r1', 'after'))]);
  assert.deepEqual(
    replay.receipts.map((x) => [x.event_id, x.seq]),
    [
      ['a', 0],
      ['b', 0],
      ['c', 3],
      ['d', 4],
      ['late', 0],
      ['after', 5],
    ],
    'deleted run: seq 0, not stored; the other run: duplicates; past the horizon: new',
  );
  const rows = await pool.query('SELECT event_id FROM run_events WHERE thread_id = $1 ORDER BY seq', [t]);
  assert.deepEqual(
    rows.rows.map((x) => x.event_id),
    ['c', 'd', 'after'],
  );
  const run = await getRun(pool, t, 'r1');
  assert.deepEqual(
    [run?.event_count, run?.first_seq],
    [1, 5],
    'the run record starts again with the new event',
  );

  // A thread delete covers every run.
  await deleteRows(pool, { threadId: t, logHorizon: nextOffset - 1 });
  const replay2 = await store(t, [...r2, pend(rec(t, 'r9', 'new'))]);
  assert.deepEqual(
    replay2.receipts.map((x) => x.seq),
    [0, 0, 6],
  );
});

test('a user-scoped delete removes only a thread or run wholly of that user', async () => {
  const t = randomName('t-');
  await store(t, [
    pend(rec(t, 'r1', 'a', 'ai_chunk', 'message', {}, 'alice')),
    pend(rec(t, 'r2', 'b', 'ai_chunk', 'message', {}, 'bob')),
  ]);
  await assert.rejects(
    deleteRows(pool, { threadId: t, userId: 'alice', logHorizon: 0 }),
    (err: Error) => err.name === 'PermissionDeniedError' && /other users/.test(err.message),
  );
  assert.equal((await pool.query('SELECT 1 FROM run_events WHERE thread_id = $1', [t])).rowCount, 2);
  const ok = await deleteRows(pool, { threadId: t, runId: 'r1', userId: 'alice', logHorizon: 0 });
  assert.equal(ok.events, 1);
  await assert.rejects(deleteRows(pool, { threadId: t, runId: 'r2', userId: 'alice', logHorizon: 0 }));
});

test('user-scoped counts are exact, from counters for single-user runs and from rows for mixed ones', async () => {
  const t = randomName('t-');
  const m = (run: string, id: string, user: string, category: CategoryName = 'message') =>
    pend(rec(t, run, id, category === 'message' ? 'ai_chunk' : 'llm_start', category, {}, user));
  await store(t, [m('solo', 's1', 'alice'), m('solo', 's2', 'alice'), m('solo', 's3', 'alice', 'trace')]);
  await store(t, [m('mixed', 'm1', 'alice'), m('mixed', 'm2', 'bob')]);
  // Mixed only across batches: the first batch is bob's alone.
  await store(t, [m('later', 'l1', 'bob')]);
  await store(t, [m('later', 'l2', 'alice'), m('later', 'l3', 'alice')]);
  // '' is a user of its own: a run of unknown users that later gets alice's events is mixed.
  await store(t, [m('anon', 'a1', '')]);
  await store(t, [m('anon', 'a2', 'alice')]);
  const flags = await pool.query(
    'SELECT run_id, user_id, users_mixed FROM runs WHERE thread_id = $1 ORDER BY run_id',
    [t],
  );
  assert.deepEqual(
    flags.rows.map((r) => [r.run_id, r.user_id, r.users_mixed]),
    [
      ['anon', 'alice', true],
      ['later', 'bob', true],
      ['mixed', 'alice', true],
      ['solo', 'alice', false],
    ],
  );
  const exact = async (user: string, run?: string) =>
    Number(
      (
        await pool.query(
          `SELECT count(*) AS n FROM run_events WHERE thread_id = $1 AND category = 1 AND user_id = $2
             AND ($3::text IS NULL OR run_id = $3)`,
          [t, user, run ?? null],
        )
      ).rows[0]?.n,
    );
  for (const user of ['alice', 'bob', 'carol']) {
    assert.equal(await countMessages(pool, t, undefined, user), await exact(user), user);
    for (const run of ['solo', 'mixed', 'later', 'anon']) {
      assert.equal(await countMessages(pool, t, run, user), await exact(user, run), `${user} in ${run}`);
    }
  }
  assert.equal(await countMessages(pool, t, undefined, 'alice'), 6);
  assert.equal(await countMessages(pool, t), 9);
});
