// An open category set: a producer may file an event under any category name; it is stored
// and returned as given on every surface (History over HTTP and gRPC, WebSocket, gRPC
// Subscribe), every category filter takes any name, and message, trace and lifecycle keep
// their meaning (run counts, a run's end, the message count).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { Publisher } from '@runstream/client/node';
import type { Event } from '../src/client/ingest-client.js';
import { SubscriberClient } from '../src/client/subscriber-client.js';
import type { WireEvent } from '../src/client/ws-subscriber.js';
import { HistoryClient } from '../src/history/client.js';
import { http } from './helpers/history.js';
import { randomName, type Stack, startStack } from './helpers/stack.js';

let stack: Stack;
let history: HistoryClient;
let subscriber: SubscriberClient;
before(async () => {
  stack = await startStack();
  history = new HistoryClient(stack.grpcTarget);
  subscriber = new SubscriberClient(stack.grpcTarget);
});
after(async () => {
  history.close();
  subscriber.close();
  await stack[Symbol.asyncDispose]();
});

/** Event n of run r, filed by enum (`MESSAGE`) or by name (anything else). */
function ev(t: string, run: string, n: number, type: string, category: string): Event {
  const byEnum = ['MESSAGE', 'TRACE', 'LIFECYCLE'].includes(category);
  return {
    thread_id: t,
    run_id: run,
    event_id: `${run}-${n}`,
    event_type: type,
    ...(byEnum ? { category: category as 'MESSAGE' } : { category_name: category }),
    content_json: JSON.stringify({ n }),
  };
}

/** A run mixing the known categories (by enum and by name) with three others. */
function run(t: string, r: string): Event[] {
  return [
    ev(t, r, 1, 'run_start', 'LIFECYCLE'),
    ev(t, r, 2, 'human_message', 'message'),
    ev(t, r, 3, 'llm_start', 'TRACE'),
    ev(t, r, 4, 'summarize', 'middleware'),
    ev(t, r, 5, 'ai_chunk', 'MESSAGE'),
    ev(t, r, 6, 'task_started', 'subagent_task'),
    ev(t, r, 7, 'audit', 'audit_log2'),
    ev(t, r, 8, 'task_done', 'subagent_task'),
    ev(t, r, 9, 'run_end', 'lifecycle'),
  ];
}
const CATS = [
  'lifecycle',
  'message',
  'trace',
  'middleware',
  'message',
  'subagent_task',
  'audit_log2',
  'subagent_task',
  'lifecycle',
];

test('any category name is stored and returned as given on History, and every category filter takes any name', async () => {
  const t = randomName('cat-');
  const acks = await stack.client.publish(run(t, 'r1'), 'PERSISTED');
  assert.deepEqual(
    acks.map((a) => a.seq),
    [1, 2, 3, 4, 5, 6, 7, 8, 9],
  );

  const all = await http<{ events: WireEvent[] }>(`${stack.httpUrl}/v1/threads/${t}/events`);
  assert.equal(all.status, 200);
  assert.deepEqual(
    all.body.events.map((e) => e.category),
    CATS,
  );

  const only = async (q: string) =>
    (await http<{ events: WireEvent[] }>(`${stack.httpUrl}/v1/threads/${t}/events?${q}`)).body.events.map(
      (e) => e.seq,
    );
  assert.deepEqual(await only('categories=subagent_task'), [6, 8]);
  assert.deepEqual(await only('categories=message,middleware'), [2, 4, 5]);
  assert.deepEqual(await only('categories=lifecycle,audit_log2&before_seq=10'), [9, 7, 1]);
  assert.deepEqual(await only('categories=nothing_here'), []);
  assert.deepEqual(
    (
      await http<{ events: WireEvent[] }>(
        `${stack.httpUrl}/v1/threads/${t}/runs/r1/events?categories=middleware`,
      )
    ).body.events.map((e) => e.seq),
    [4],
  );

  // gRPC: the name is always in category_name; the enum only for the known three.
  const page = await history.listEvents({ thread_id: t });
  assert.deepEqual(
    page.events.map((e) => e.category_name),
    CATS,
  );
  assert.deepEqual(
    page.events.map((e) => e.category),
    CATS.map((c) =>
      c === 'message'
        ? 'MESSAGE'
        : c === 'trace'
          ? 'TRACE'
          : c === 'lifecycle'
            ? 'LIFECYCLE'
            : 'CATEGORY_UNSPECIFIED',
    ),
  );
  const byName = await history.listEvents({
    thread_id: t,
    categories: ['TRACE'],
    category_names: ['subagent_task'],
  });
  assert.deepEqual(
    byName.events.map((e) => e.seq),
    [3, 6, 8],
  );

  // The known three keep their meaning: messages are message events only, and the run ended.
  const count = await http<{ count: number }>(`${stack.httpUrl}/v1/threads/${t}/messages/count`);
  assert.equal(count.body.count, 2);
  const messages = await http<{ events: WireEvent[] }>(`${stack.httpUrl}/v1/threads/${t}/messages`);
  assert.deepEqual(
    messages.body.events.map((e) => e.seq),
    [2, 5],
  );
  const r = await http<Record<string, unknown>>(`${stack.httpUrl}/v1/threads/${t}/runs/r1`);
  assert.equal(r.body.status, 'success');
  assert.equal(r.body.end_seq, 9);
  assert.equal(r.body.event_count, 9);
  assert.equal(r.body.message_count, 2);
  assert.equal(r.body.trace_count, 1);
  assert.equal(r.body.lifecycle_count, 2);

  // The known categories are stored as they always were (a number, no name).
  const { rows } = await stack.db.query<{ seq: string; category: number; category_name: string | null }>(
    'SELECT seq, category, category_name FROM run_events WHERE thread_id = $1 ORDER BY seq',
    [t],
  );
  assert.deepEqual(
    rows.map((x) => [Number(x.seq), x.category, x.category_name]),
    [
      [1, 3, null],
      [2, 1, null],
      [3, 2, null],
      [4, 0, 'middleware'],
      [5, 1, null],
      [6, 0, 'subagent_task'],
      [7, 0, 'audit_log2'],
      [8, 0, 'subagent_task'],
      [9, 3, null],
    ],
  );
});

test('subscribers get any category as given, filter by any name, and a run subscription still ends', async () => {
  const t = randomName('cat-');
  const events = run(t, 'r1');
  await stack.client.publish(events.slice(0, 4), 'PERSISTED');

  const ws = await stack.ws();
  ws.sendRaw({ type: 'subscribe', id: 'all', thread_id: t });
  ws.sendRaw({
    type: 'subscribe',
    id: 'f',
    thread_id: t,
    run_id: 'r1',
    categories: ['subagent_task', 'middleware'],
  });
  const grpcAll = subscriber.subscribe({ thread_id: t });
  const grpcRun = subscriber.subscribe({ thread_id: t, run_id: 'r1', category_names: ['subagent_task'] });
  await ws.waitFor((f) => f.type === 'live' && f.id === 'f');
  await ws.waitFor((f) => f.type === 'live' && f.id === 'all');
  await grpcAll.waitFor((r) => r.live != null);
  await grpcRun.waitFor((r) => r.live != null);
  // Catch-up (seq 1-4) came from Postgres; the rest arrives live.
  await stack.client.publish(events.slice(4), 'PERSISTED');

  await ws.waitFor((f) => f.type === 'end' && f.id === 'f');
  await ws.waitFor((f) => f.type === 'event' && f.id === 'all' && f.event.seq === 9);
  assert.deepEqual(
    ws.events('all').map((e) => e.category),
    CATS,
  );
  assert.deepEqual(
    ws.events('f').map((e) => [e.seq, e.category]),
    [
      [4, 'middleware'],
      [6, 'subagent_task'],
      [8, 'subagent_task'],
    ],
  );

  const end = await grpcRun.ended;
  assert.equal(end.code, 0, end.details);
  assert.deepEqual(
    grpcRun.events.map((e) => [e.seq, e.category, e.category_name]),
    [
      [6, 'CATEGORY_UNSPECIFIED', 'subagent_task'],
      [8, 'CATEGORY_UNSPECIFIED', 'subagent_task'],
    ],
  );
  await grpcAll.waitFor((r) => r.event?.seq === 9);
  assert.deepEqual(
    grpcAll.events.map((e) => e.category_name),
    CATS,
  );
  grpcAll.cancel();
});

test('a bad category name is refused naming the field, and nothing of the request is stored', async () => {
  const t = randomName('cat-');
  const good = ev(t, 'r1', 1, 'x', 'middleware');
  const cases: [Partial<Event>, RegExp][] = [
    [{ category_name: 'Middleware' }, /events\[1\]\.category_name: must be a lower-case identifier/],
    [{ category_name: '9lives' }, /events\[1\]\.category_name/],
    [{ category_name: 'has-dash' }, /events\[1\]\.category_name/],
    [{ category_name: 'a'.repeat(65) }, /events\[1\]\.category_name/],
    [
      { category_name: 'trace', category: 'MESSAGE' },
      /events\[1\]\.category: is MESSAGE but category_name is "trace"/,
    ],
    [{ category_name: 'middleware', category: 'LIFECYCLE' }, /events\[1\]\.category/],
    [
      { category_name: '', category: 'CATEGORY_UNSPECIFIED' },
      /events\[1\]\.category: must be MESSAGE, TRACE or LIFECYCLE, or category_name set/,
    ],
  ];
  for (const [patch, message] of cases) {
    await assert.rejects(
      stack.client.publish([good, { ...ev(t, 'r1', 2, 'x', 'other'), ...patch }], 'PERSISTED'),
      (err: Error & { code?: number }) => {
        assert.equal(err.code, 3, err.message); // INVALID_ARGUMENT
        assert.match(err.message, message);
        return true;
      },
    );
  }
  // A known name given both ways is fine.
  await stack.client.publish([{ ...ev(t, 'r1', 3, 'x', 'trace'), category: 'TRACE' }], 'PERSISTED');
  const page = await history.listEvents({ thread_id: t });
  assert.deepEqual(
    page.events.map((e) => [e.event_id, e.category, e.category_name]),
    [['r1-3', 'TRACE', 'trace']],
  );

  for (const [q, field] of [
    ['categories=Middleware', 'categories'],
    ['categories=a-b', 'categories'],
  ]) {
    const res = await http<{ error: { code: string; message: string } }>(
      `${stack.httpUrl}/v1/threads/${t}/events?${q}`,
    );
    assert.equal(res.status, 400);
    assert.match(res.body.error.message, new RegExp(`^${field}: `));
  }
  // Each list is refused under its own name.
  await assert.rejects(history.listEvents({ thread_id: t, category_names: ['No'] }), /category_names: "No"/);
  const badNames = subscriber.subscribe({ thread_id: t, category_names: ['middleware', 'Not_A_Name'] });
  const ended = await badNames.ended;
  assert.equal(ended.code, grpc.status.INVALID_ARGUMENT);
  assert.match(ended.details, /^category_names: "Not_A_Name" is not a category name/);
  await assert.rejects(
    history.listEvents({ thread_id: t, categories: ['CATEGORY_UNSPECIFIED'] }),
    /categories/,
  );
  const ws = await stack.ws();
  ws.sendRaw({ type: 'subscribe', id: 'bad', thread_id: t, categories: ['Bad name'] });
  const err = await ws.waitFor((f) => f.type === 'error' && f.id === 'bad');
  assert.match(JSON.stringify(err), /categories/);
});

test("the TypeScript client's publisher sends any category by name", async () => {
  const t = randomName('cat-');
  await using pub = new Publisher({ target: stack.grpcTarget, ack: 'PERSISTED' });
  const acks = await Promise.all(
    ['trace', 'subagent_task'].map((category, i) =>
      pub.publish({ threadId: t, runId: 'r1', eventType: 'x', category, content: { i } }),
    ),
  );
  assert.deepEqual(
    acks.map((a) => a.seq),
    [1, 2],
  );
  const page = await http<{ events: WireEvent[] }>(`${stack.httpUrl}/v1/threads/${t}/events`);
  assert.deepEqual(
    page.body.events.map((e) => e.category),
    ['trace', 'subagent_task'],
  );
});
