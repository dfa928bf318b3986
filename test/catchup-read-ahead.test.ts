// Catch-up reads pages ahead of the one it writes, the page after next at `pageSize` seqs
// further on, as if the thread had no hole. Deleted runs leave holes of every size, so that
// guess is often wrong, and a wrong guess must be dropped, not delivered: from any cursor,
// across holes larger and smaller than a page, each remaining event comes once, in order.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import type { Event } from '../src/client/ingest-client.js';
import { NO_FILTER } from '../src/domain/filter.js';
import { readEventJsonPage } from '../src/persist/queries.js';
import { tokenEvent } from './helpers/events.js';
import { http } from './helpers/history.js';
import { randomName, type Stack, startStack } from './helpers/stack.js';

const PAGE = 10;
let stack: Stack;
before(async () => {
  stack = await startStack({ catchupPageSize: PAGE });
});
after(async () => {
  await stack[Symbol.asyncDispose]();
});

/** `n` events of `runId`, numbered from `from` within the run. */
const run = (t: string, runId: string, from: number, n: number): Event[] =>
  Array.from({ length: n }, (_, i) =>
    tokenEvent(t, from + i, { run_id: runId, event_id: `${runId}-${from + i}` }),
  );

test('a catch-up across holes of every size delivers each remaining event once, in order, from any cursor', async () => {
  const t = randomName('ahead-');
  // Kept and deleted stretches: holes of 1, 3, 9, 10, 11 and 35 seqs, at every alignment to a page.
  const stretches = [7, 1, 4, 3, 12, 9, 10, 10, 3, 11, 25, 35, 2, 1, 30];
  let kept = 0;
  let dropped = 0;
  for (const [i, n] of stretches.entries()) {
    const drop = i % 2 === 1;
    await stack.client.publish(drop ? run(t, 'gone', dropped, n) : run(t, 'kept', kept, n), 'PERSISTED');
    if (drop) dropped += n;
    else kept += n;
  }
  const del = await http(`${stack.httpUrl}/v1/threads/${t}/runs/gone`, { method: 'DELETE' });
  assert.equal(del.status, 200);
  const head = kept + dropped;
  // The seqs that remain: the kept run's, as published between the deleted stretches.
  const remaining: number[] = [];
  let seq = 0;
  for (const [i, n] of stretches.entries())
    for (let k = 0; k < n; k++) {
      seq++;
      if (i % 2 === 0) remaining.push(seq);
    }
  assert.equal(remaining.length, kept);

  const c = await stack.ws();
  const cursors = [0, 1, 5, 7, 8, 10, 12, 20, 33, 50, 63, 100, head - 1, head];
  for (const from of cursors) c.subscribe(`from-${from}`, t, from);
  for (const from of cursors) {
    const id = `from-${from}`;
    await c.waitFor((f) => f.type === 'live' && f.id === id);
    assert.deepEqual(
      c.events(id).map((e) => e.seq),
      remaining.filter((s) => s > from),
      `after_seq ${from}`,
    );
  }
});

test('pages cut by the byte budget are guessed by their own span: the pages read ahead are used, not read twice', async () => {
  // 60 events of ~4 KB to a page of 256 KiB: each page is cut far below its 500 events. A guess
  // of `pageSize` seqs on would miss every time and read each page twice.
  const budget = 256 * 1024;
  await using big = await startStack({ maxPageBytes: budget });
  const t = randomName('cut-');
  const pad = 'z'.repeat(4000);
  for (let i = 0; i < 3000; i += 500)
    await big.client.publish(
      run(t, 'r', i, 500).map((e) => ({ ...e, content_json: JSON.stringify({ i: e.event_id, pad }) })),
      'PERSISTED',
    );
  // The pages a catch-up reads, one after another, outside the broker.
  const db = new pg.Client({ connectionString: big.config.databaseUrl });
  await db.connect();
  let pages = 0;
  try {
    for (let after = 0; ; pages++) {
      const { events } = await readEventJsonPage(db, {
        threadId: t,
        afterSeq: after,
        filter: NO_FILTER,
        withTerminal: true,
        limit: big.config.catchupPageSize,
        maxBytes: budget,
      });
      if (events.length === 0) break;
      after = events.at(-1)?.seq as number;
    }
  } finally {
    await db.end();
  }
  assert.ok(pages > 30, `${pages} pages`);
  // Count the page statements the broker sends for one catch-up.
  const query = pg.Pool.prototype.query;
  let sent = 0;
  pg.Pool.prototype.query = function (this: pg.Pool, ...args: unknown[]) {
    const config = args[0] as { name?: string } | string;
    if (typeof config === 'object' && config.name?.startsWith('rs_page_')) sent++;
    return (query as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof query;
  try {
    const c = await big.ws();
    c.subscribe('s', t);
    await c.waitFor((f) => f.type === 'live', 60_000);
    assert.equal(c.events('s').length, 3000);
  } finally {
    pg.Pool.prototype.query = query;
  }
  // Each page once, and the reads ahead past the last one (an empty page ends it).
  assert.ok(sent <= pages + 3, `${sent} statements for ${pages} pages`);
});
