// Every History read on both transports (gRPC runstream.v1.History and HTTP /v1/threads),
// against a real broker: cursor paging both ways across runs, filters, user scope,
// messages, counts, runs, and the errors for bad input.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import type { Event } from '../src/client/ingest-client.js';
import type { WireEvent } from '../src/client/ws-subscriber.js';
import type { Event__Output } from '../src/gen/runstream/v1/Event.js';
import { HistoryClient } from '../src/history/client.js';
import { ev, http } from './helpers/history.js';
import { randomName, type Stack, startStack } from './helpers/stack.js';

let stack: Stack;
let client: HistoryClient;
let T: string;

interface Model {
  seq: number;
  run: string;
  category: 'message' | 'trace' | 'lifecycle';
  type: string;
  user: string;
}
const model: Model[] = [];

/** Three runs on one thread: r1 and r2 of alice (r2 fails), r3 of bob. */
function dataset(t: string): Event[] {
  const out: Event[] = [];
  const add = (
    run: string,
    type: string,
    category: Event['category'],
    user: string,
    content: unknown = {},
  ) => {
    const e = ev(t, run, out.length + 1, { type, category, user, content });
    out.push(e);
    model.push({
      seq: out.length,
      run,
      category: String(category).toLowerCase() as Model['category'],
      type,
      user,
    });
  };
  add('r1', 'run_start', 'LIFECYCLE', 'alice', { assistant_id: 'agent' });
  add('r1', 'human_message', 'MESSAGE', 'alice', { content: 'hi' });
  add('r1', 'llm_start', 'TRACE', 'alice');
  for (let i = 0; i < 4; i++) add('r1', 'ai_chunk', 'MESSAGE', 'alice', { content: `a${i}` });
  add('r1', 'tool_call', 'TRACE', 'alice', { call_id: 'c1', name: 'search', arguments: '{}' });
  add('r1', 'tool_result', 'MESSAGE', 'alice', { call_id: 'c1', content: 'found' });
  add('r1', 'run_end', 'LIFECYCLE', 'alice', { status: 'success' });
  add('r2', 'metadata', 'LIFECYCLE', 'alice', { run_id: 'r2' });
  add('r2', 'human_message', 'MESSAGE', 'alice', { content: 'again' });
  for (let i = 0; i < 3; i++) add('r2', 'ai_chunk', 'MESSAGE', 'alice', { content: `b${i}` });
  add('r2', 'llm_end', 'TRACE', 'alice');
  add('r2', 'error', 'LIFECYCLE', 'alice', { status: 'error', message: 'model timeout' });
  add('r3', 'run_start', 'LIFECYCLE', 'bob');
  for (let i = 0; i < 5; i++) add('r3', 'ai_chunk', 'MESSAGE', 'bob', { content: `c${i}` });
  add('r3', 'run_end', 'LIFECYCLE', 'bob', { status: 'success' });
  return out;
}

before(async () => {
  stack = await startStack();
  client = new HistoryClient(stack.grpcTarget);
  T = randomName('th-');
  await stack.client.publish(dataset(T), 'PERSISTED');
});
after(async () => {
  client.close();
  await stack[Symbol.asyncDispose]();
});

const seqs = (p: (m: Model) => boolean) => model.filter(p).map((m) => m.seq);
const ALL = () => seqs(() => true);

interface HttpPage {
  events: WireEvent[];
  next_after_seq?: number;
  next_before_seq?: number;
  has_more: boolean;
}

/** Walks every page of an HTTP list; returns the seqs in delivery order and the pages. */
async function walkHttp(path: string, query: Record<string, string | number>, descending = false) {
  const order: number[] = [];
  const pages: HttpPage[] = [];
  let cursor: number | undefined = descending ? Number(query.before_seq) : Number(query.after_seq ?? 0);
  for (let i = 0; i < 100; i++) {
    const q = new URLSearchParams(Object.entries(query).map(([k, v]): [string, string] => [k, String(v)]));
    q.set(descending ? 'before_seq' : 'after_seq', String(cursor));
    const { status, body } = await http<HttpPage>(`${stack.httpUrl}${path}?${q}`);
    assert.equal(status, 200, JSON.stringify(body));
    pages.push(body);
    order.push(...body.events.map((e) => e.seq));
    cursor = descending ? body.next_before_seq : body.next_after_seq;
    assert.equal(typeof cursor, 'number', 'the next cursor is in the page');
    if (!body.has_more) return { order, pages };
  }
  throw new Error('paging did not end');
}

type GrpcList = (req: Record<string, unknown>) => Promise<{
  events: Event__Output[];
  next_after_seq: number;
  next_before_seq: number;
  has_more: boolean;
}>;

async function walkGrpc(list: GrpcList, req: Record<string, unknown>, descending = false) {
  const order: number[] = [];
  let cursor = Number(descending ? req.before_seq : (req.after_seq ?? 0));
  for (let i = 0; i < 100; i++) {
    const page = await list({ ...req, [descending ? 'before_seq' : 'after_seq']: cursor });
    order.push(...page.events.map((e) => e.seq));
    cursor = descending ? page.next_before_seq : page.next_after_seq;
    if (!page.has_more) return order;
  }
  throw new Error('paging did not end');
}

describe('ListEvents', () => {
  test('HTTP: ascending pages across runs deliver every seq once, in order, with the next cursor', async () => {
    const { order, pages } = await walkHttp(`/v1/threads/${T}/events`, { limit: 5 });
    assert.deepEqual(order, ALL());
    assert.equal(pages.length, 5);
    assert.ok(pages.slice(0, -1).every((p) => p.has_more && p.events.length === 5));
    assert.equal(pages.at(-1)?.next_after_seq, 24);
    // The event JSON is the one client-facing form.
    const first = pages[0]?.events[0] as WireEvent;
    assert.deepEqual(
      [first.seq, first.thread_id, first.run_id, first.event_type, first.category, first.user_id],
      [1, T, 'r1', 'run_start', 'lifecycle', 'alice'],
    );
    assert.deepEqual(first.content, { assistant_id: 'agent' });
    // The spine's response shape still works: `events` and `next_after_seq` without a limit.
    const legacy = await http<HttpPage>(`${stack.httpUrl}/v1/threads/${T}/events?after_seq=20`);
    assert.deepEqual(
      legacy.body.events.map((e) => e.seq),
      [21, 22, 23, 24],
    );
    assert.equal(legacy.body.next_after_seq, 24);
    // After the end: an empty page keeps the cursor.
    const end = await http<HttpPage>(`${stack.httpUrl}/v1/threads/${T}/events?after_seq=24`);
    assert.deepEqual([end.body.events.length, end.body.next_after_seq, end.body.has_more], [0, 24, false]);
  });

  test('HTTP: before_seq pages descend ("load earlier") down to seq 1', async () => {
    const { order, pages } = await walkHttp(`/v1/threads/${T}/events`, { limit: 7, before_seq: 25 }, true);
    assert.deepEqual(order, ALL().reverse());
    assert.equal(pages[0]?.next_before_seq, 18);
    assert.equal(pages.at(-1)?.has_more, false);
    // after_seq with before_seq: a window, newest first.
    const win = await http<HttpPage>(`${stack.httpUrl}/v1/threads/${T}/events?after_seq=5&before_seq=9`);
    assert.deepEqual(
      win.body.events.map((e) => e.seq),
      [8, 7, 6],
    );
  });

  test('gRPC: the same pages both ways', async () => {
    const list: GrpcList = (r) => client.listEvents(r);
    assert.deepEqual(await walkGrpc(list, { thread_id: T, limit: 4 }), ALL());
    assert.deepEqual(await walkGrpc(list, { thread_id: T, limit: 6, before_seq: 25 }, true), ALL().reverse());
    const page = await client.listEvents({ thread_id: T, limit: 2 });
    const e = page.events[0] as Event__Output;
    assert.deepEqual(
      [e.seq, e.run_id, e.category, e.user_id, JSON.parse(e.content_json)],
      [1, 'r1', 'LIFECYCLE', 'alice', { assistant_id: 'agent' }],
    );
    assert.ok(e.offset > 0);
    assert.ok(Number(e.created_at?.seconds) > 1_600_000_000);
    assert.deepEqual([page.next_after_seq, page.has_more], [2, true]);
  });

  test('filters on both transports: run, categories, event types, user; paging inside a filter', async () => {
    const cases: { q: Record<string, string>; g: Record<string, unknown>; want: number[] }[] = [
      { q: { run_id: 'r2' }, g: { run_id: 'r2' }, want: seqs((m) => m.run === 'r2') },
      { q: { categories: 'trace' }, g: { categories: ['TRACE'] }, want: seqs((m) => m.category === 'trace') },
      {
        q: { categories: 'message,lifecycle', event_types: 'ai_chunk' },
        g: { categories: ['MESSAGE', 'LIFECYCLE'], event_types: ['ai_chunk'] },
        want: seqs((m) => m.type === 'ai_chunk'),
      },
      {
        q: { event_types: 'run_start,run_end' },
        g: { event_types: ['run_start', 'run_end'] },
        want: seqs((m) => m.type === 'run_start' || m.type === 'run_end'),
      },
      { q: { user_id: 'bob' }, g: { user_id: 'bob' }, want: seqs((m) => m.user === 'bob') },
      {
        q: { run_id: 'r1', categories: 'message' },
        g: { run_id: 'r1', categories: ['MESSAGE'] },
        want: seqs((m) => m.run === 'r1' && m.category === 'message'),
      },
    ];
    for (const c of cases) {
      assert.ok(c.want.length > 0);
      const up = await walkHttp(`/v1/threads/${T}/events`, { ...c.q, limit: 2 });
      assert.deepEqual(up.order, c.want, `HTTP ${JSON.stringify(c.q)}`);
      const down = await walkHttp(`/v1/threads/${T}/events`, { ...c.q, limit: 3, before_seq: 25 }, true);
      assert.deepEqual(down.order, [...c.want].reverse(), `HTTP desc ${JSON.stringify(c.q)}`);
      const g = await walkGrpc((r) => client.listEvents(r), { thread_id: T, ...c.g, limit: 2 });
      assert.deepEqual(g, c.want, `gRPC ${JSON.stringify(c.g)}`);
    }
    // The run path is the run filter.
    const byPath = await walkHttp(`/v1/threads/${T}/runs/r3/events`, { limit: 4 });
    assert.deepEqual(
      byPath.order,
      seqs((m) => m.run === 'r3'),
    );
  });
});

describe('ListMessages, ListMessagesByRun, CountMessages', () => {
  const messages = () => seqs((m) => m.category === 'message');

  test('thread messages (category message) both ways, on both transports', async () => {
    assert.deepEqual((await walkHttp(`/v1/threads/${T}/messages`, { limit: 3 })).order, messages());
    assert.deepEqual(
      (await walkHttp(`/v1/threads/${T}/messages`, { limit: 4, before_seq: 25 }, true)).order,
      messages().reverse(),
    );
    assert.deepEqual(await walkGrpc((r) => client.listMessages(r), { thread_id: T, limit: 5 }), messages());
    assert.deepEqual(
      await walkGrpc((r) => client.listMessages(r), { thread_id: T, limit: 5, before_seq: 25 }, true),
      messages().reverse(),
    );
  });

  test('a run’s messages on both transports', async () => {
    const want = seqs((m) => m.run === 'r1' && m.category === 'message');
    assert.deepEqual((await walkHttp(`/v1/threads/${T}/runs/r1/messages`, { limit: 2 })).order, want);
    assert.deepEqual(
      await walkGrpc((r) => client.listMessagesByRun(r), { thread_id: T, run_id: 'r1', limit: 2 }),
      want,
    );
    await assert.rejects(client.listMessagesByRun({ thread_id: T }), { code: grpc.status.INVALID_ARGUMENT });
  });

  test('counts of a thread, a run, a user, on both transports', async () => {
    const count = (p: (m: Model) => boolean) => model.filter((m) => m.category === 'message' && p(m)).length;
    const h = async (path: string) => (await http<{ count: number }>(`${stack.httpUrl}${path}`)).body.count;
    assert.equal(
      await h(`/v1/threads/${T}/messages/count`),
      count(() => true),
    );
    assert.equal(
      await h(`/v1/threads/${T}/messages/count?run_id=r2`),
      count((m) => m.run === 'r2'),
    );
    assert.equal(
      await h(`/v1/threads/${T}/runs/r2/messages/count`),
      count((m) => m.run === 'r2'),
    );
    assert.equal(
      await h(`/v1/threads/${T}/messages/count?user_id=bob`),
      count((m) => m.user === 'bob'),
    );
    assert.equal(await h(`/v1/threads/${T}/messages/count?user_id=bob&run_id=r1`), 0);
    assert.equal(
      await client.countMessages({ thread_id: T }),
      count(() => true),
    );
    assert.equal(
      await client.countMessages({ thread_id: T, run_id: 'r1' }),
      count((m) => m.run === 'r1'),
    );
    assert.equal(
      await client.countMessages({ thread_id: T, user_id: 'alice' }),
      count((m) => m.user === 'alice'),
    );
    assert.equal(await client.countMessages({ thread_id: randomName('none-') }), 0);
  });
});

describe('runs', () => {
  test('GetRun on both transports: status, seqs, counts, times, metadata, outcome', async () => {
    const { status, body } = await http<Record<string, unknown>>(`${stack.httpUrl}/v1/threads/${T}/runs/r2`);
    assert.equal(status, 200);
    assert.deepEqual(
      {
        status: body.status,
        first_seq: body.first_seq,
        last_seq: body.last_seq,
        end_seq: body.end_seq,
        event_count: body.event_count,
        message_count: body.message_count,
        trace_count: body.trace_count,
        lifecycle_count: body.lifecycle_count,
        user_id: body.user_id,
        metadata: body.metadata,
        outcome: body.outcome,
      },
      {
        status: 'error',
        first_seq: 11,
        last_seq: 17,
        end_seq: 17,
        event_count: 7,
        message_count: 4,
        trace_count: 1,
        lifecycle_count: 2,
        user_id: 'alice',
        metadata: { run_id: 'r2' },
        outcome: { status: 'error', message: 'model timeout' },
      },
    );
    assert.match(String(body.started_at), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    assert.ok(body.ended_at);
    const g = await client.getRun({ thread_id: T, run_id: 'r1' });
    assert.deepEqual(
      [g.status, g.first_seq, g.last_seq, g.end_seq, g.event_count],
      ['RUN_STATUS_SUCCESS', 1, 10, 10, 10],
    );
    assert.deepEqual(JSON.parse(g.outcome_json), { status: 'success' });
    assert.ok(g.ended_at);
    const missing = await http<{ error: { code: string } }>(`${stack.httpUrl}/v1/threads/${T}/runs/nope`);
    assert.deepEqual([missing.status, missing.body.error.code], [404, 'not_found']);
    await assert.rejects(client.getRun({ thread_id: T, run_id: 'nope' }), { code: grpc.status.NOT_FOUND });
    // Scoped to another user, the run is not there.
    await assert.rejects(client.getRun({ thread_id: T, run_id: 'r1', user_id: 'bob' }), {
      code: grpc.status.NOT_FOUND,
    });
  });

  test('ListRuns: newest first, paged by before_seq, filtered by status and user, on both transports', async () => {
    type RunsPage = {
      runs: { run_id: string; status: string }[];
      next_before_seq: number | null;
      has_more: boolean;
    };
    const p1 = await http<RunsPage>(`${stack.httpUrl}/v1/threads/${T}/runs?limit=2`);
    assert.deepEqual(
      p1.body.runs.map((r) => r.run_id),
      ['r3', 'r2'],
    );
    assert.deepEqual([p1.body.next_before_seq, p1.body.has_more], [11, true]);
    const p2 = await http<RunsPage>(`${stack.httpUrl}/v1/threads/${T}/runs?limit=2&before_seq=11`);
    assert.deepEqual(
      p2.body.runs.map((r) => r.run_id),
      ['r1'],
    );
    assert.equal(p2.body.has_more, false);
    const failed = await http<RunsPage>(`${stack.httpUrl}/v1/threads/${T}/runs?status=error`);
    assert.deepEqual(
      failed.body.runs.map((r) => [r.run_id, r.status]),
      [['r2', 'error']],
    );
    const bobs = await http<RunsPage>(`${stack.httpUrl}/v1/threads/${T}/runs?user_id=bob`);
    assert.deepEqual(
      bobs.body.runs.map((r) => r.run_id),
      ['r3'],
    );
    const g = await client.listRuns({ thread_id: T });
    assert.deepEqual(
      g.runs.map((r) => [r.run_id, r.status]),
      [
        ['r3', 'RUN_STATUS_SUCCESS'],
        ['r2', 'RUN_STATUS_ERROR'],
        ['r1', 'RUN_STATUS_SUCCESS'],
      ],
    );
    const gs = await client.listRuns({ thread_id: T, statuses: ['RUN_STATUS_SUCCESS'], limit: 1 });
    assert.deepEqual([gs.runs.map((r) => r.run_id), gs.has_more, gs.next_before_seq], [['r3'], true, 18]);
    const gs2 = await client.listRuns({ thread_id: T, statuses: ['RUN_STATUS_SUCCESS'], before_seq: 18 });
    assert.deepEqual(
      gs2.runs.map((r) => r.run_id),
      ['r1'],
    );
    const empty = await http<RunsPage>(`${stack.httpUrl}/v1/threads/${randomName('none-')}/runs`);
    assert.deepEqual([empty.status, empty.body.runs, empty.body.has_more], [200, [], false]);
  });
});

describe('errors', () => {
  test('bad input is refused with 400 / INVALID_ARGUMENT naming the field; wrong methods with 405', async () => {
    const bad = async (path: string, field: RegExp) => {
      const { status, body } = await http<{ error: { code: string; message: string } }>(
        `${stack.httpUrl}${path}`,
      );
      assert.equal(status, 400, path);
      assert.equal(body.error.code, 'invalid_argument');
      assert.match(body.error.message, field, path);
    };
    await bad(`/v1/threads/${T}/events?limit=0`, /^limit:/);
    await bad(`/v1/threads/${T}/events?limit=1001`, /^limit:/);
    await bad(`/v1/threads/${T}/events?after_seq=-1`, /^after_seq:/);
    await bad(`/v1/threads/${T}/events?before_seq=x`, /^before_seq:/);
    await bad(`/v1/threads/${T}/events?categories=Chat`, /^categories: "Chat"/);
    await bad(`/v1/threads/${T}/events?run_id=a.b`, /^run_id:/);
    await bad(`/v1/threads/bad%20id/events`, /^thread_id:/);
    await bad(`/v1/threads/${T}/messages?view=tree`, /^view:/);
    await bad(`/v1/threads/${T}/runs?status=done`, /^statuses:/);
    await bad(`/v1/threads/${T}/events?user_id=a%2Fb`, /^user_id:/);

    const g = async (p: Promise<unknown>, field: RegExp) => {
      await assert.rejects(p, (err: grpc.ServiceError) => {
        assert.equal(err.code, grpc.status.INVALID_ARGUMENT);
        assert.match(err.details, field);
        return true;
      });
    };
    await g(client.listEvents({ thread_id: T, limit: 5000 }), /^limit:/);
    await g(client.listEvents({ thread_id: '' }), /^thread_id:/);
    await g(client.listEvents({ thread_id: T, categories: ['CATEGORY_UNSPECIFIED'] }), /^categories:/);
    await g(client.listEvents({ thread_id: T, event_types: ['bad type'] }), /^event_types:/);
    await g(client.deleteRun({ thread_id: T }), /^run_id:/);

    const wrong = await http<{ error: { code: string } }>(`${stack.httpUrl}/v1/threads/${T}/runs/r1`, {
      method: 'POST',
    });
    assert.deepEqual([wrong.status, wrong.body.error.code], [405, 'method_not_allowed']);
    assert.equal(wrong.headers.get('allow'), 'GET, DELETE');
  });
});

describe('bulk', () => {
  test('a Publish of 1,000 events is stored whole: runs, counts and one 1,000-event page agree', async () => {
    const t = randomName('bulk-');
    const events = Array.from({ length: 1000 }, (_, i) =>
      ev(t, `r${Math.floor(i / 400)}`, i, i % 5 === 0 ? { type: 'llm_start', category: 'TRACE' } : {}),
    );
    const acks = await stack.client.publish(events, 'PERSISTED');
    assert.deepEqual(
      acks.map((a) => a.seq),
      Array.from({ length: 1000 }, (_, i) => i + 1),
    );
    const page = await client.listEvents({ thread_id: t, limit: 1000 });
    assert.equal(page.events.length, 1000);
    assert.equal(page.has_more, false);
    const runs = (await client.listRuns({ thread_id: t })).runs;
    assert.deepEqual(
      runs.map((r) => [r.run_id, r.event_count, r.first_seq, r.last_seq]),
      [
        ['r2', 200, 801, 1000],
        ['r1', 400, 401, 800],
        ['r0', 400, 1, 400],
      ],
    );
    assert.equal(await client.countMessages({ thread_id: t }), 800);
  });
});
