// The subscription core and what every transport gets from it: one send queue with one
// slow-consumer rule (a frame always fits an empty queue; the node's budget), strict
// frames and query strings (an unknown key is refused, named), routes decided by their
// templates, and HTTP long-poll on the events routes. Integration parts run the real
// broker on its own nats-server and Postgres.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { SubscriberClient } from '../src/client/subscriber-client.js';
import { QueueBudget, SendQueue } from '../src/fanout/core/send-queue.js';
import { type Route, Router } from '../src/http/router.js';
import { ev, http } from './helpers/history.js';
import { SseClient } from './helpers/sse-client.js';
import { randomName, type Stack, startStack } from './helpers/stack.js';

// ---------------------------------------------------------------------------------------------
// The send queue

/** A writer that holds frames until told to write them out. */
function heldWriter() {
  const held: { frame: string; done: () => void }[] = [];
  return {
    held,
    writer: {
      write: (frame: string, done: () => void) => void held.push({ frame, done }),
      size: (f: string) => f.length,
    },
    flush() {
      for (const h of held.splice(0)) h.done();
    },
  };
}

test('send queue: any frame is taken while the queue is under its limit; the next one after it is over cuts off', () => {
  const w = heldWriter();
  const budget = new QueueBudget(1 << 30);
  let slow = 0;
  const q = new SendQueue(w.writer, { maxBytes: 100, budget, onSlow: () => slow++ });
  assert.equal(q.send('x'.repeat(1000)), true, 'one big frame into an empty queue');
  assert.equal(q.queuedBytes, 1000);
  assert.equal(budget.queued, 1000);
  w.flush();
  assert.equal(q.queuedBytes, 0);
  assert.equal(q.send('x'.repeat(60)), true);
  assert.equal(
    q.send('x'.repeat(1000)),
    true,
    'a big frame right behind a small one: under the limit, taken',
  );
  assert.equal(slow, 0);
  assert.equal(q.send('x'), false, 'at the limit: cut off');
  assert.equal(slow, 1);
  assert.equal(q.closed, true);
  assert.equal(q.send('y'), false, 'nothing after the cut-off');
  assert.equal(q.sendFinal('{"type":"error"}'), true, 'but the final frame still goes');
  assert.equal(slow, 1, 'onSlow once');
  q.dispose();
  assert.equal(budget.queued, 0, 'dispose releases what was never written');
});

test('send queue: the node budget cuts off a consumer that queues past it, never one that keeps up', () => {
  const budget = new QueueBudget(1000);
  const a = heldWriter();
  const b = heldWriter();
  const cut: string[] = [];
  const qa = new SendQueue(a.writer, { maxBytes: 10_000, budget, onSlow: () => cut.push('a') });
  const qb = new SendQueue(b.writer, { maxBytes: 10_000, budget, onSlow: () => cut.push('b') });
  assert.equal(qa.send('x'.repeat(600)), true);
  assert.equal(qa.send('x'.repeat(300)), true);
  // b's queue is empty: its frame goes even though it takes the node over its budget.
  assert.equal(qb.send('x'.repeat(500)), true);
  assert.deepEqual(cut, []);
  // a has frames queued and the node is over its budget: a is the one cut.
  assert.equal(qa.send('x'.repeat(10)), false);
  assert.deepEqual(cut, ['a']);
  b.flush();
  assert.equal(qb.send('x'.repeat(10)), true);
  qa.dispose();
  qb.dispose();
  b.flush();
  assert.equal(budget.queued, 0);
});

test('send queue: a frame shared by many queues counts once against the node budget, while any holds it', () => {
  const budget = new QueueBudget(1 << 30);
  const writers = Array.from({ length: 3 }, () => {
    const held: (() => void)[] = [];
    return {
      held,
      writer: {
        write: (_f: Buffer, done: () => void) => void held.push(done),
        size: (f: Buffer) => f.length,
      },
    };
  });
  const queues = writers.map(
    (w) => new SendQueue(w.writer, { maxBytes: 1 << 20, budget, onSlow: () => undefined }),
  );
  const shared = Buffer.alloc(1000);
  for (const q of queues) assert.equal(q.send(shared), true);
  assert.equal(budget.queued, 1000, 'one copy in memory, counted once');
  assert.equal(queues[0]?.queuedBytes, 1000, 'each queue still counts it against its own limit');
  // Its own frame counts apart.
  queues[0]?.send(Buffer.alloc(10));
  assert.equal(budget.queued, 1010);
  for (const done of writers[0]?.held.splice(0) ?? []) done();
  assert.equal(budget.queued, 1000, 'still held by the other two');
  for (const done of writers[1]?.held.splice(0) ?? []) done();
  queues[2]?.dispose();
  assert.equal(budget.queued, 0);
});

test('send queue: catch-up waits for the low watermark; close wakes the waiters', async () => {
  const w = heldWriter();
  const q = new SendQueue(w.writer, {
    maxBytes: 400,
    budget: new QueueBudget(1 << 30),
    onSlow: () => undefined,
  });
  q.send('x'.repeat(150));
  assert.equal(q.backlogged, true, 'above min(1 MiB, limit / 4)');
  let drained = false;
  const wait = q.drained().then(() => {
    drained = true;
  });
  await new Promise((r) => setImmediate(r));
  assert.equal(drained, false);
  w.flush();
  await wait;
  q.send('x'.repeat(150));
  const again = q.drained();
  q.close();
  await again;
});

// ---------------------------------------------------------------------------------------------
// The router

test('router: the route follows from the templates, not the order they were added; clashes refused; 405 lists Allow', () => {
  const h = (owner: string, method: string, path: string): Route => ({
    method,
    path,
    owner,
    handle: async () => undefined,
  });
  const routes = [
    h('a', 'GET', '/v1/threads/{thread_id}/runs/{run_id}'),
    h('b', 'GET', '/v1/threads/{thread_id}/runs/count'),
    h('c', 'GET', '/x/{p}/c'),
    h('d', 'GET', '/x/b/{q}'),
    h('e', 'DELETE', '/v1/threads/{thread_id}'),
  ];
  for (const order of [routes, [...routes].reverse()]) {
    const r = new Router().add(...order);
    const m = r.match('GET', '/v1/threads/t1/runs/count');
    assert.equal(m.kind === 'route' && m.route.owner, 'b', 'a literal beats a parameter');
    const p = r.match('GET', '/v1/threads/t1/runs/r9');
    assert.deepEqual(p.kind === 'route' && p.params, { thread_id: 't1', run_id: 'r9' });
    const x = r.match('GET', '/x/b/c');
    assert.equal(x.kind === 'route' && x.route.owner, 'd', 'the first segment that differs decides');
    assert.deepEqual(r.match('POST', '/v1/threads/t1'), { kind: 'method', allowed: ['DELETE'] });
    assert.deepEqual(
      r.match('GET', '/v1/threads//runs/r'),
      { kind: 'none' },
      'an empty segment is no parameter',
    );
  }
  assert.throws(
    () => new Router().add(h('a', 'GET', '/v1/{x}/y'), h('z', 'GET', '/v1/{other}/y')),
    /GET \/v1\/\{other\}\/y \(z\) is already served by a/,
  );
});

// ---------------------------------------------------------------------------------------------
// On the broker

let stack: Stack;
const BUFFER = 64 * 1024; // the smallest RS_WS_MAX_BUFFERED_BYTES / RS_GRPC_SUBSCRIBE_MAX_BUFFERED_BYTES

before(async () => {
  stack = await startStack({
    wsMaxBufferedBytes: BUFFER,
    grpcSubscribeMaxBufferedBytes: BUFFER,
    longPollMaxWaits: 2,
  });
});
after(async () => {
  await stack[Symbol.asyncDispose]();
});

test('one rule for an event larger than the send limit, right behind another: WebSocket, SSE and gRPC each deliver it whole', async () => {
  const t = randomName('big-');
  const big = 'b'.repeat(3 * BUFFER); // under RS_MAX_CONTENT_BYTES (256 KiB)
  await stack.client.publish(
    [ev(t, 'r', 1), ev(t, 'r', 2, { content: { content: big } }), ev(t, 'r', 3)],
    'PERSISTED',
  );
  const ws = await stack.ws();
  ws.subscribe('s', t, 0);
  await ws.waitFor((f) => f.id === 's' && f.type === 'live');
  assert.deepEqual(
    ws.events('s').map((e) => e.seq),
    [1, 2, 3],
  );
  const [, second] = ws.events('s');
  assert.equal((second?.content as { content: string } | undefined)?.content, big);
  assert.equal(
    ws.frames.some((f) => f.type === 'error'),
    false,
  );

  const sse = await SseClient.open(`${stack.httpUrl}/v1/threads/${t}/stream?after_seq=0`);
  await sse.waitFor((b) => b.event === 'live');
  assert.deepEqual(sse.ids.slice(0, 3), [1, 2, 3]);
  assert.equal(
    (JSON.parse(sse.events[1]?.data as string) as { content: { content: string } }).content.content,
    big,
  );
  sse.close();

  const client = new SubscriberClient(stack.grpcTarget);
  const sub = client.subscribe({ thread_id: t, after_seq: 0 });
  await sub.waitFor((r) => r.live != null);
  assert.deepEqual(
    sub.events.map((e) => Number(e.seq)),
    [1, 2, 3],
  );
  sub.call.cancel();
  await sub.ended;
  client.close();
});

test('strict frames: an unknown key in a WebSocket frame or query string is refused, naming it; nothing is replayed', async () => {
  const t = randomName('strict-');
  await stack.client.publish([ev(t, 'r', 1), ev(t, 'r', 2), ev(t, 'r', 3)], 'PERSISTED');
  const ws = await stack.ws();
  ws.sendRaw({ type: 'subscribe', id: 's1', thread_id: t, aftr_seq: 2 });
  const err = await ws.waitFor((f) => f.id === 's1');
  assert.equal(err.type, 'error');
  assert.equal(err.type === 'error' && err.code, 'invalid_argument');
  assert.match(err.type === 'error' ? err.message : '', /^aftr_seq: /);
  ws.sendRaw({ type: 'unsubscribe', id: 's1', thread: t });
  const err2 = await ws.waitFor((f) => f.id === 's1' && f.type === 'error' && f !== err);
  assert.match(err2.type === 'error' ? err2.message : '', /^thread: /);
  ws.sendRaw({ type: 'cancel', id: 'k', thread_id: t, run_id: 'r', reasn: 'x' });
  const err3 = await ws.waitFor((f) => f.id === 'k');
  assert.match(err3.type === 'error' ? err3.message : '', /^reasn: /);
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(ws.events('s1').length, 0, 'the misspelt subscribe replayed nothing');
  // The connection is still good.
  ws.subscribe('s2', t, 2);
  await ws.waitFor((f) => f.id === 's2' && f.type === 'live');
  assert.deepEqual(
    ws.events('s2').map((e) => e.seq),
    [3],
  );

  for (const path of [
    `/v1/threads/${t}/stream?aftr_seq=2`,
    `/v1/threads/${t}/events?aftr_seq=2`,
    `/v1/threads/${t}/runs/r/events?aftr_seq=2`,
    `/v1/threads/${t}/messages?view=chat&aftr_seq=2`,
  ]) {
    const res = await http<{ error: { code: string; message: string } }>(`${stack.httpUrl}${path}`);
    assert.equal(res.status, 400, path);
    assert.equal(res.body.error.code, 'invalid_argument', path);
    assert.match(res.body.error.message, /^aftr_seq: /, path);
  }
});

test('long-poll: answers with the first events past the cursor as they come, or empty at wait_ms', async () => {
  const t = randomName('lp-');
  await stack.client.publish([ev(t, 'r', 1), ev(t, 'other', 2)], 'PERSISTED');
  type Page = { events: { seq: number; run_id: string }[]; next_after_seq: number; has_more: boolean };
  // Past the cursor already: at once, as a page.
  const now = await http<Page>(`${stack.httpUrl}/v1/threads/${t}/events?after_seq=0&wait_ms=30000`);
  assert.deepEqual(
    now.body.events.map((e) => e.seq),
    [1, 2],
  );
  assert.equal(now.body.next_after_seq, 2);
  // Nothing past it: the request waits, and the event published meanwhile is its answer.
  const waiting = http<Page>(`${stack.httpUrl}/v1/threads/${t}/events?after_seq=2&wait_ms=30000`);
  const waitingRun = http<Page>(`${stack.httpUrl}/v1/threads/${t}/runs/r/events?after_seq=2&wait_ms=30000`);
  await new Promise((r) => setTimeout(r, 300));
  await stack.client.publish([ev(t, 'other', 3)], 'PERSISTED');
  const got = await waiting;
  assert.equal(got.status, 200);
  assert.deepEqual(
    got.body.events.map((e) => e.seq),
    [3],
  );
  assert.equal(got.body.next_after_seq, 3);
  await stack.client.publish([ev(t, 'r', 4)], 'PERSISTED');
  // A run's long-poll was not woken by another run's event; its cursor covers what it skipped.
  const run = await waitingRun;
  assert.deepEqual(
    run.body.events.map((e) => [e.seq, e.run_id]),
    [[4, 'r']],
  );
  assert.equal(run.body.next_after_seq, 4);
  // Nothing comes: empty at wait_ms, the cursor unchanged.
  const empty = await http<Page>(`${stack.httpUrl}/v1/threads/${t}/events?after_seq=4&wait_ms=100`);
  assert.deepEqual(empty.body, { events: [], next_after_seq: 4, has_more: false });
  // A page's limit applies to what a wait collects.
  const limited = http<Page>(`${stack.httpUrl}/v1/threads/${t}/events?after_seq=4&wait_ms=30000&limit=2`);
  await new Promise((r) => setTimeout(r, 300));
  await stack.client.publish([ev(t, 'r', 5), ev(t, 'r', 6), ev(t, 'r', 7)], 'PERSISTED');
  const l = await limited;
  assert.deepEqual(
    l.body.events.map((e) => e.seq),
    [5, 6],
  );
  assert.equal(l.body.has_more, true);
  assert.equal(l.body.next_after_seq, 6);
});

test('long-poll of a run that ends: its events, then the end and its status; a poll past the end answers at once', async () => {
  const t = randomName('lpe-');
  type Page = {
    events: { seq: number }[];
    next_after_seq: number;
    end?: { run_id: string; seq: number; status: string };
  };
  await stack.client.publish([ev(t, 'r', 1)], 'PERSISTED');
  const waiting = http<Page>(`${stack.httpUrl}/v1/threads/${t}/runs/r/events?after_seq=1&wait_ms=30000`);
  await new Promise((r) => setTimeout(r, 300));
  await stack.client.publish(
    [ev(t, 'r', 2), ev(t, 'r', 3, { type: 'end', category: 'LIFECYCLE', content: { status: 'failed' } })],
    'PERSISTED',
  );
  const got = await waiting;
  assert.deepEqual(
    got.body.events.map((e) => e.seq),
    [2, 3],
  );
  assert.deepEqual(got.body.end, { run_id: 'r', seq: 3, status: 'error' });
  // Polling on after the end: the same end, at once (a run's end is its answer, not a wait).
  const again = await http<Page>(
    `${stack.httpUrl}/v1/threads/${t}/runs/r/events?after_seq=${got.body.next_after_seq}&wait_ms=30000`,
  );
  assert.deepEqual(again.body, {
    events: [],
    next_after_seq: 3,
    has_more: false,
    end: { run_id: 'r', seq: 3, status: 'error' },
  });
  // A thread's poll has no end: it waits.
  const thread = await http<Page>(`${stack.httpUrl}/v1/threads/${t}/events?after_seq=3&wait_ms=100`);
  assert.equal(thread.body.end, undefined);
});

test('long-poll: wait_ms is checked, named; past RS_LONG_POLL_MAX_WAITS waiting requests a new one is refused', async () => {
  const t = randomName('lpx-');
  await stack.client.publish([ev(t, 'r', 1)], 'PERSISTED');
  for (const [q, why] of [
    ['wait_ms=-1', 'negative'],
    ['wait_ms=60001', 'over a minute'],
    ['wait_ms=soon', 'not an integer'],
    ['wait_ms=100&before_seq=1', 'with before_seq'],
  ]) {
    const res = await http<{ error: { message: string } }>(`${stack.httpUrl}/v1/threads/${t}/events?${q}`);
    assert.equal(res.status, 400, why);
    assert.match(res.body.error.message, /^wait_ms: /, why);
  }
  const held = [1, 2].map((i) =>
    http(`${stack.httpUrl}/v1/threads/${t}/events?after_seq=1&wait_ms=${2000 + i}`),
  );
  await new Promise((r) => setTimeout(r, 300));
  const third = await http<{ error: { code: string } }>(
    `${stack.httpUrl}/v1/threads/${t}/events?after_seq=1&wait_ms=100`,
  );
  assert.equal(third.status, 429);
  assert.equal(third.body.error.code, 'resource_exhausted');
  await Promise.all(held);
  // Freed: the next one waits as usual.
  const ok = await http(`${stack.httpUrl}/v1/threads/${t}/events?after_seq=1&wait_ms=50`);
  assert.equal(ok.status, 200);
});
