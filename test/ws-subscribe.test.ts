// Invariant 5: a subscriber that says "after seq N" receives exactly N+1, N+2, ... in
// order, then live, with no gap and no duplicate — or an explicit error frame.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Event } from '../src/client/ingest-client.js';
import type { ServerFrame, WireEvent } from '../src/client/ws-subscriber.js';
import { randomName, type Stack, startStack } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

let stack: Stack;
before(async () => {
  stack = await startStack({ catchupPageSize: 7 }); // small pages: catch-up crosses many page seams
});
after(async () => {
  await stack[Symbol.asyncDispose]();
});

function events(threadId: string, from: number, count: number, runId = 'run-1'): Event[] {
  return Array.from({ length: count }, (_, k) => ({
    thread_id: threadId,
    run_id: runId,
    event_id: `e${from + k}`,
    event_type: 'ai_chunk',
    category: 'MESSAGE',
    content_json: JSON.stringify({ content: `token ${from + k}`, n: from + k }),
    metadata_json: '{"id":"msg-1"}',
  }));
}

const seqsOf = (evs: WireEvent[]) => evs.map((e) => e.seq);
const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

test('disconnect at seq k, resubscribe after_seq=k: exactly k+1..N, then live, then new events', async () => {
  const t = randomName('t-');
  await stack.client.publish(events(t, 1, 30), 'PERSISTED');

  const first = await stack.ws();
  first.subscribe('a', t);
  await first.waitFor((f) => f.type === 'live' && f.id === 'a');
  assert.deepEqual(seqsOf(first.events('a')), range(1, 30));
  const k = 17;
  await first.close();

  // More events arrive while the client is away.
  await stack.client.publish(events(t, 31, 20), 'PERSISTED');

  const second = await stack.ws();
  second.subscribe('b', t, k);
  const live = await second.waitFor((f) => f.type === 'live' && f.id === 'b');
  assert.deepEqual(live, { type: 'live', id: 'b', seq: 50 });
  assert.deepEqual(seqsOf(second.events('b')), range(k + 1, 50));

  await stack.client.publish(events(t, 51, 5), 'ACCEPTED');
  await second.waitFor((f) => f.type === 'event' && f.event.seq === 55);
  assert.deepEqual(seqsOf(second.events('b')), range(k + 1, 55));
  // The live frame sits exactly between catch-up and live events.
  const order = second.frames
    .filter((f) => f.id === 'b')
    .map((f) => (f.type === 'event' ? f.event.seq : f.type));
  assert.equal(order.indexOf('live'), 50 - k);

  // Every field of the event, as the protocol defines it.
  const e = second.events('b')[0] as WireEvent;
  assert.equal(e.thread_id, t);
  assert.equal(e.run_id, 'run-1');
  assert.equal(e.event_id, `e${k + 1}`);
  assert.equal(e.event_type, 'ai_chunk');
  assert.equal(e.category, 'message');
  assert.deepEqual(e.content, { content: `token ${k + 1}`, n: k + 1 });
  assert.deepEqual(e.metadata, { id: 'msg-1' });
  assert.equal(typeof e.offset, 'number');
  assert.ok(e.offset > 0);
  assert.match(e.created_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
});

test('live and replayed copies of an event are byte-identical', async () => {
  const t = randomName('t-');
  const c = await stack.ws();
  const raw: string[] = [];
  c.ws.on('message', (d) => raw.push(d.toString()));
  c.subscribe('live', t);
  await c.waitFor((f) => f.type === 'live');
  await stack.client.publish(
    [{ ...events(t, 1, 1)[0], content_json: '{"b": 1,  "a": [1.50, "中文", {"x": null}]}' } as Event],
    'PERSISTED',
  );
  await c.waitFor((f) => f.type === 'event' && f.id === 'live');
  c.subscribe('replay', t, 0);
  await c.waitFor((f) => f.type === 'event' && f.id === 'replay');
  const body = (id: string) =>
    raw.find((r) => r.includes(`"id":"${id}"`) && r.includes('"event"'))?.replace(`"id":"${id}"`, '');
  assert.equal(body('live'), body('replay'));
  assert.ok(
    body('live')?.includes('{"b": 1,  "a": [1.50, "中文", {"x": null}]}'),
    'content keeps the producer text',
  );
});

test('subscribers joining at random moments while a thread streams all see 1..N with no gap or duplicate', async () => {
  const t = randomName('t-');
  const N = 600;
  const conns = await Promise.all(Array.from({ length: 4 }, () => stack.ws()));
  const subs: { conn: (typeof conns)[number]; id: string; after: number }[] = [];
  const producing = (async () => {
    for (let i = 1; i <= N; i += 20) {
      await stack.client.publish(events(t, i, 20), i % 40 === 1 ? 'PERSISTED' : 'ACCEPTED');
      await new Promise((r) => setTimeout(r, 2));
    }
  })();
  for (let s = 0; s < 24; s++) {
    const conn = conns[s % conns.length] as (typeof conns)[number];
    const rows = await stack.db.query(
      'SELECT coalesce(max(seq), 0)::int AS head FROM run_events WHERE thread_id = $1',
      [t],
    );
    const after = Math.max(0, (rows.rows[0].head as number) - (s % 3) * 5);
    const id = `s${s}`;
    conn.subscribe(id, t, after);
    subs.push({ conn, id, after });
    await new Promise((r) => setTimeout(r, 5 + (s % 4) * 7));
  }
  await producing;
  for (const { conn, id, after } of subs) {
    // A subscription whose cursor already equals N (it joined after the last publish) gets
    // no event: it goes live at N. Either frame says its cursor reached N.
    await conn.waitFor(
      (f) => f.id === id && ((f.type === 'event' && f.event.seq === N) || (f.type === 'live' && f.seq === N)),
    );
    assert.deepEqual(seqsOf(conn.events(id)), range(after + 1, N), `subscription ${id} after ${after}`);
    assert.equal(conn.frames.filter((f) => f.type === 'live' && f.id === id).length, 1);
  }
});

test('one connection holds many subscriptions to many threads; unsubscribe stops delivery', async () => {
  const t1 = randomName('t-');
  const t2 = randomName('t-');
  const c = await stack.ws();
  c.subscribe('x', t1);
  c.subscribe('y', t2);
  c.subscribe('z', t1, 0);
  await Promise.all(['x', 'y', 'z'].map((id) => c.waitFor((f) => f.type === 'live' && f.id === id)));
  await stack.client.publish([...events(t1, 1, 3), ...events(t2, 1, 2)], 'PERSISTED');
  await c.waitFor((f) => f.type === 'event' && f.id === 'z' && f.event.seq === 3);
  await c.waitFor((f) => f.type === 'event' && f.id === 'y' && f.event.seq === 2);
  await c.waitFor((f) => f.type === 'event' && f.id === 'x' && f.event.seq === 3);
  assert.ok(c.events('x').every((e) => e.thread_id === t1));
  assert.ok(c.events('y').every((e) => e.thread_id === t2));

  c.unsubscribe('x');
  const bye = await c.waitFor((f) => f.type === 'unsubscribed' && f.id === 'x');
  assert.deepEqual(bye, { type: 'unsubscribed', id: 'x', seq: 3 });
  await stack.client.publish(events(t1, 4, 1), 'PERSISTED');
  await c.waitFor((f) => f.type === 'event' && f.id === 'z' && f.event.seq === 4);
  assert.deepEqual(seqsOf(c.events('x')), [1, 2, 3]);
});

test('a subscription to an empty thread goes live at 0 and receives the first events', async () => {
  const t = randomName('t-');
  const c = await stack.ws();
  c.subscribe('s', t);
  assert.deepEqual(await c.waitFor((f) => f.type === 'live'), { type: 'live', id: 's', seq: 0 });
  await stack.client.publish(events(t, 1, 2), 'ACCEPTED');
  await waitFor(() => c.events('s').length === 2, { what: 'two live events' });
  assert.deepEqual(seqsOf(c.events('s')), [1, 2]);
});

test('bad subscriptions get an error frame naming the problem, and the connection stays usable', async () => {
  const t = randomName('t-');
  await stack.client.publish(events(t, 1, 3), 'PERSISTED');
  const c = await stack.ws();
  const expectError = async (send: unknown, code: string, field: RegExp) => {
    const n = c.frames.length;
    c.sendRaw(send);
    await waitFor(() => c.frames.length > n, { what: 'an answer frame' });
    const f = c.frames[n] as ServerFrame;
    assert.equal(f.type, 'error', JSON.stringify(f));
    if (f.type === 'error') {
      assert.equal(f.code, code);
      assert.match(f.message, field);
    }
  };
  await expectError(
    { type: 'subscribe', id: 'a', thread_id: t, after_seq: 4 },
    'cursor_ahead',
    /after_seq 4 .*head.*3/,
  );
  await expectError(
    { type: 'subscribe', id: 'b', thread_id: t, after_seq: -1 },
    'invalid_argument',
    /^after_seq/,
  );
  await expectError(
    { type: 'subscribe', id: 'b', thread_id: t, after_seq: '2' },
    'invalid_argument',
    /^after_seq/,
  );
  await expectError({ type: 'subscribe', id: 'b', thread_id: 'no spaces' }, 'invalid_argument', /^thread_id/);
  await expectError({ type: 'subscribe', thread_id: t }, 'invalid_argument', /^id/);
  await expectError({ type: 'dance', id: 'b' }, 'invalid_argument', /^type/);
  await expectError('{not json', 'invalid_argument', /^frame/);
  await expectError({ type: 'unsubscribe', id: 'nope' }, 'not_found', /nope/);

  c.subscribe('ok', t, 1);
  await c.waitFor((f) => f.type === 'live' && f.id === 'ok');
  assert.deepEqual(seqsOf(c.events('ok')), [2, 3]);
  await expectError({ type: 'subscribe', id: 'ok', thread_id: t }, 'invalid_argument', /already exists/);
});

test('HTTP history pages by seq cursor', async () => {
  const t = randomName('t-');
  await stack.client.publish(events(t, 1, 12), 'PERSISTED');
  const page = async (q: string) => {
    const res = await fetch(`${stack.httpUrl}/v1/threads/${t}/events?${q}`);
    return {
      status: res.status,
      body: (await res.json()) as { events: WireEvent[]; next_after_seq: number },
    };
  };
  const p1 = await page('limit=5');
  assert.deepEqual(seqsOf(p1.body.events), [1, 2, 3, 4, 5]);
  assert.equal(p1.body.next_after_seq, 5);
  const p2 = await page(`after_seq=${p1.body.next_after_seq}&limit=100`);
  assert.deepEqual(seqsOf(p2.body.events), range(6, 12));
  const p3 = await page(`after_seq=${p2.body.next_after_seq}`);
  assert.deepEqual(p3.body.events, []);
  assert.equal(p3.body.next_after_seq, 12);
  assert.equal((await page('limit=0')).status, 400);
  assert.equal((await page('after_seq=x')).status, 400);
  assert.equal((await fetch(`${stack.httpUrl}/healthz`)).status, 200);
  assert.equal((await fetch(`${stack.httpUrl}/readyz`)).status, 200);
});

test('a hole in the live feed (a lost announcement) is filled from Postgres before later events', async () => {
  const t = randomName('t-');
  await stack.client.publish(events(t, 1, 3), 'PERSISTED');
  const c = await stack.ws();
  c.subscribe('s', t);
  await c.waitFor((f) => f.type === 'live' && f.id === 's');

  // Commit seq 4 and 5 behind the broker's back: no announcement is ever made for them.
  const { storeThreadBatch } = await import('../src/persist/seq-assigner.js');
  const client = await stack.db.connect();
  try {
    const hidden = events(t, 4, 2).map((e, i) => ({
      record: {
        thread_id: t,
        run_id: 'run-1',
        event_id: e.event_id as string,
        event_type: 'ai_chunk',
        category: 'message' as const,
        user_id: '',
        created_at: new Date().toISOString(),
        content_json: e.content_json as string,
        metadata_json: '{}',
      },
      offset: 1_000_000 + i,
    }));
    await storeThreadBatch(client, t, hidden);
  } finally {
    client.release();
  }
  // The next real event is seq 6; its announcement reveals the hole.
  await stack.client.publish(events(t, 6, 1), 'PERSISTED');
  await c.waitFor((f) => f.type === 'event' && f.event.seq === 6);
  assert.deepEqual(seqsOf(c.events('s')), [1, 2, 3, 4, 5, 6]);
});

test('content with raw line breaks (pretty-printed JSON) goes live intact', async () => {
  const t = randomName('t-');
  const c = await stack.ws();
  c.subscribe('s', t);
  await c.waitFor((f) => f.type === 'live');
  const pretty = '{\n  "content": "line one",\n  "list": [\n    1,\n    2\n  ]\n}';
  await stack.client.publish(
    [{ ...events(t, 1, 1)[0], content_json: pretty } as Event, ...events(t, 2, 1)],
    'PERSISTED',
  );
  await c.waitFor((f) => f.type === 'event' && f.event.seq === 2);
  assert.deepEqual(c.events('s')[0]?.content, { content: 'line one', list: [1, 2] });
  assert.deepEqual(seqsOf(c.events('s')), [1, 2]);
});
