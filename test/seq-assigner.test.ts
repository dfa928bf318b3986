// The seq assigner against a real Postgres: the advisory lock keeps concurrent writers of
// one thread gap-free (invariant 1) and a stored event_id never takes a second seq (3).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import type { LogRecord } from '../src/domain/event.js';
import { createLogger } from '../src/logger.js';
import { migrate } from '../src/persist/migrate.js';
import { type PendingEvent, storeThreadBatch } from '../src/persist/seq-assigner.js';
import { type PostgresHandle, startPostgres } from './helpers/postgres.js';
import { expectGapFree, randomName, threadRows } from './helpers/stack.js';

let server: PostgresHandle;
let pool: pg.Pool;
let nextOffset = 1;

before(async () => {
  server = await startPostgres();
  pool = new pg.Pool({ connectionString: server.url, max: 10 });
  pool.on('error', () => undefined);
  await migrate(pool, createLogger('silent'));
});
after(async () => {
  await pool.end();
  await server[Symbol.asyncDispose]();
});

function pending(threadId: string, eventId: string, runId = 'run-1'): PendingEvent {
  const record: LogRecord = {
    thread_id: threadId,
    run_id: runId,
    event_id: eventId,
    event_type: 'ai_chunk',
    category: 'message',
    user_id: '',
    created_at: new Date().toISOString(),
    content_json: JSON.stringify({ content: eventId }),
    metadata_json: '{}',
  };
  return { record, offset: nextOffset++ };
}

async function store(threadId: string, batch: PendingEvent[]) {
  const client = await pool.connect();
  try {
    return await storeThreadBatch(client, threadId, batch);
  } finally {
    client.release();
  }
}

test('8 writers racing on one thread never collide and leave no gap', async () => {
  const threadId = randomName('t-');
  const writers = Array.from({ length: 8 }, async (_, w) => {
    for (let b = 0; b < 20; b++) {
      await store(
        threadId,
        Array.from({ length: 10 }, (_, i) => pending(threadId, `w${w}-b${b}-${i}`)),
      );
    }
  });
  // Without the lock two writers read the same head and one fails on UNIQUE (thread_id, seq).
  await Promise.all(writers);
  const rows = await threadRows(pool, threadId);
  assert.equal(expectGapFree(rows.map((r) => r.seq)), 1600);
});

test('a redelivered batch stores nothing and returns the original seqs and offsets', async () => {
  const threadId = randomName('t-');
  const batch = [pending(threadId, 'a'), pending(threadId, 'b'), pending(threadId, 'c')];
  const first = await store(threadId, batch);
  assert.deepEqual(
    first.receipts.map((r) => r.seq),
    [1, 2, 3],
  );
  const again = await store(threadId, batch);
  assert.equal(again.inserted.length, 0);
  assert.deepEqual(again.receipts, first.receipts);

  // A later message carrying an already-stored id (a retry past JetStream's dedup window).
  const retry = pending(threadId, 'b');
  const mixed = await store(threadId, [retry, pending(threadId, 'd')]);
  assert.deepEqual(
    mixed.receipts.map((r) => [r.event_id, r.seq]),
    [
      ['b', 2],
      ['d', 4],
    ],
  );
  assert.equal(mixed.receipts[0]?.offset, batch[1]?.offset, 'the duplicate reports the stored row offset');
  assert.deepEqual(
    (await threadRows(pool, threadId)).map((r) => r.event_id),
    ['a', 'b', 'c', 'd'],
  );
});

test('a repeated id inside one batch is stored once and takes one seq', async () => {
  const threadId = randomName('t-');
  const result = await store(threadId, [
    pending(threadId, 'x'),
    pending(threadId, 'x'),
    pending(threadId, 'y'),
  ]);
  assert.deepEqual(
    result.receipts.map((r) => r.seq),
    [1, 1, 2],
  );
  assert.deepEqual(
    (await threadRows(pool, threadId)).map((r) => [r.seq, r.event_id]),
    [
      [1, 'x'],
      [2, 'y'],
    ],
  );
});

test('seq continues across runs of the same thread and is independent per thread', async () => {
  const a = randomName('t-');
  const b = randomName('t-');
  await store(a, [pending(a, '1', 'run-1'), pending(a, '2', 'run-1')]);
  await store(b, [pending(b, '1', 'run-9')]);
  await store(a, [pending(a, '3', 'run-2')]);
  assert.deepEqual(
    (await threadRows(pool, a)).map((r) => [r.seq, r.run_id]),
    [
      [1, 'run-1'],
      [2, 'run-1'],
      [3, 'run-2'],
    ],
  );
  assert.deepEqual(
    (await threadRows(pool, b)).map((r) => r.seq),
    [1],
  );
});

test('migrations are safe when several processes start at once', async () => {
  const url = await server.createDatabase();
  const pools = Array.from({ length: 4 }, () => {
    const p = new pg.Pool({ connectionString: url, max: 1 });
    p.on('error', () => undefined);
    return p;
  });
  try {
    const applied = await Promise.all(pools.map((p) => migrate(p, createLogger('silent'))));
    assert.equal(
      applied.reduce((s, n) => s + n, 0),
      applied.find((n) => n > 0),
      'exactly one process applies each migration',
    );
  } finally {
    await Promise.all(pools.map((p) => p.end()));
  }
});
