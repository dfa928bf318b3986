// Catch-up reads pages ahead of the one it writes, the page after next at `pageSize` seqs
// further on, as if the thread had no hole. Deleted runs leave holes of every size, so that
// guess is often wrong, and a wrong guess must be dropped, not delivered: from any cursor,
// across holes larger and smaller than a page, each remaining event comes once, in order.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Event } from '../src/client/ingest-client.js';
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

function run(t: string, runId: string, from: number, n: number): Event[] {
  return Array.from({ length: n }, (_, i) => ({
    thread_id: t,
    run_id: runId,
    event_id: `${runId}-${from + i}`,
    event_type: 'ai_chunk',
    category: 'MESSAGE',
    content_json: JSON.stringify({ i: from + i }),
  }));
}

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
