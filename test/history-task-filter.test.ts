// History's metadata.task_id filter (DeerFlow's list_events(task_id=…)): only events whose
// metadata holds that string as task_id, with every other filter and both paging directions,
// on HTTP and gRPC; bad values are refused naming the parameter.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Event } from '../src/client/ingest-client.js';
import type { WireEvent } from '../src/client/ws-subscriber.js';
import { HistoryClient } from '../src/history/client.js';
import { http } from './helpers/history.js';
import { randomName, type Stack, startStack } from './helpers/stack.js';

let stack: Stack;
let history: HistoryClient;
let T: string;

/** Seq i: run r1 for odd i, r2 for even; metadata.task_id cycles through TASKS. */
const TASKS: unknown[] = ['t1', 't2', 1, undefined, '1', 't1'];
const N = 60;
function events(t: string): Event[] {
  return Array.from({ length: N }, (_, k) => {
    const i = k + 1;
    const task = TASKS[k % TASKS.length];
    return {
      thread_id: t,
      run_id: i % 2 === 1 ? 'r1' : 'r2',
      event_id: `e${i}`,
      event_type: i % 3 === 0 ? 'tool_call' : 'ai_chunk',
      category: 'TRACE',
      content_json: JSON.stringify({ i }),
      metadata_json: JSON.stringify(task === undefined ? { other: 'x' } : { task_id: task, id: `m${i}` }),
    };
  });
}
const model = (pred: (i: number, task: unknown) => boolean) =>
  Array.from({ length: N }, (_, k) => k + 1).filter((i) => pred(i, TASKS[(i - 1) % TASKS.length]));

before(async () => {
  stack = await startStack();
  history = new HistoryClient(stack.grpcTarget);
  T = randomName('task-');
  await stack.client.publish(events(T), 'PERSISTED');
});
after(async () => {
  history.close();
  await stack[Symbol.asyncDispose]();
});

interface Page {
  events: WireEvent[];
  next_after_seq?: number;
  next_before_seq?: number;
  has_more: boolean;
}
const get = (path: string) => http<Page>(`${stack.httpUrl}/v1/threads/${T}${path}`);

/** Every page of a query, following its cursor. */
async function walk(path: string, descending = false): Promise<number[]> {
  const out: number[] = [];
  let cursor = descending ? `before_seq=${N + 1}` : 'after_seq=0';
  for (;;) {
    const { status, body } = await get(`${path}&limit=4&${cursor}`);
    assert.equal(status, 200, JSON.stringify(body));
    out.push(...body.events.map((e) => e.seq));
    if (!body.has_more) return out;
    cursor = descending ? `before_seq=${body.next_before_seq}` : `after_seq=${body.next_after_seq}`;
  }
}

test('metadata.task_id pages hold exactly the events of that task, with the other filters, both ways', async () => {
  const t1 = model((_, task) => task === 't1');
  assert.deepEqual(await walk('/events?metadata.task_id=t1'), t1);
  assert.deepEqual(await walk('/events?metadata.task_id=t1', true), [...t1].reverse());
  // A string filter matches the string "1", not the number 1.
  assert.deepEqual(
    await walk('/events?metadata.task_id=1'),
    model((_, task) => task === '1'),
  );
  assert.deepEqual(await walk('/events?metadata.task_id=nobody'), []);
  assert.deepEqual(
    await walk('/runs/r1/events?metadata.task_id=t1&event_types=tool_call'),
    model((i, task) => task === 't1' && i % 2 === 1 && i % 3 === 0),
  );
  assert.deepEqual(
    await walk('/events?metadata.task_id=t2&run_id=r2&categories=trace'),
    model((i, task) => task === 't2' && i % 2 === 0),
  );
  // The events come whole, metadata and all.
  const { body } = await get('/events?metadata.task_id=t2&limit=1');
  assert.deepEqual(body.events[0]?.metadata, { task_id: 't2', id: 'm2' });

  const grpcPage = await history.listEvents({ thread_id: T, metadata_task_id: 't1', limit: 1000 });
  assert.deepEqual(
    grpcPage.events.map((e) => e.seq),
    t1,
  );
  // On gRPC an empty metadata_task_id is no filter (proto cannot tell it from unset).
  const everything = await history.listEvents({ thread_id: T, metadata_task_id: '', limit: 1000 });
  assert.equal(everything.events.length, N);
});

test('a bad metadata.task_id is refused naming the parameter', async () => {
  for (const [q, field] of [
    ['metadata.task_id=', 'metadata.task_id'],
    [`metadata.task_id=${'x'.repeat(257)}`, 'metadata.task_id'],
    ['metadata.task_id=a&metadata.task_id=b', 'metadata.task_id'],
    ['metadata.task_id=t1&wait_ms=100', 'wait_ms'],
    ['metadata.other=t1', 'metadata.other'],
    // Postgres text cannot hold U+0000: refused here, not an internal error there.
    ['metadata.task_id=a%00b', 'metadata.task_id'],
  ] as [string, string][]) {
    const res = await http<{ error: { code: string; message: string } }>(
      `${stack.httpUrl}/v1/threads/${T}/events?${q}`,
    );
    assert.equal(res.status, 400, q);
    assert.equal(res.body.error.code, 'invalid_argument', q);
    assert.ok(res.body.error.message.includes(field), `${q}: ${res.body.error.message}`);
  }
  await assert.rejects(
    history.listEvents({ thread_id: T, metadata_task_id: 'x'.repeat(257) }),
    /metadata_task_id: is longer than 256 characters/,
  );
  await assert.rejects(
    history.listEvents({ thread_id: T, metadata_task_id: 'a\u0000b' }),
    /metadata_task_id: must not contain/,
  );
});
