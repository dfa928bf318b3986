// The live chat view ("view": "chat" on a WebSocket subscribe, ?view=chat on the SSE
// stream): a client that starts from History's chat view at any seq N, subscribes after N
// and applies the frames, across reconnects, ends with exactly History's chat view. Deltas,
// not whole messages. Real broker, nats-server and Postgres.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { type ChatFrameData, ChatView, type ChatViewMessage } from '../src/client/chat-view.js';
import type { Event } from '../src/client/ingest-client.js';
import type { ServerFrame, WsConnection } from '../src/client/ws-subscriber.js';
import { CHAT_VIEW_MAX_STATE } from '../src/fanout/core/chat-view.js';
import { ev, fixtureEvents, http } from './helpers/history.js';
import { SseClient } from './helpers/sse-client.js';
import { randomName, type Stack, startStack } from './helpers/stack.js';

let stack: Stack;

before(async () => {
  stack = await startStack();
});
after(async () => {
  await stack[Symbol.asyncDispose]();
});

const R1 = 'run-01J8Z'; // the fixture's first run
const A = 'run-x';
const B = 'run-y';

/**
 * After the recorded runs: anonymous chunks grouping across another run's events and a
 * trace event, a named message going on after other messages and replaced whole, a
 * result before its call (not named), a list of calls, a result whose call is in another
 * run (not named), and a straggler of the first run continuing its message and naming a
 * result from a call far back.
 */
export function extras(t: string): Event[] {
  let n = 0;
  const e = (
    run: string,
    type: string,
    content: unknown,
    metadata: unknown = {},
    category?: Event['category'],
  ) =>
    ev(t, run, ++n, {
      type,
      content,
      metadata,
      category: category ?? (type === 'tool_call' || type === 'llm_end' ? 'TRACE' : 'MESSAGE'),
    });
  return [
    e(A, 'human_message', { content: 'hi' }, { id: 'h-x' }),
    e(A, 'ai_chunk', { content: 'a1' }),
    e(A, 'ai_chunk', 'a2'),
    e(A, 'llm_end', { usage: {} }),
    e(B, 'ai_chunk', { content: 'b1' }, { id: 'm-b' }),
    e(A, 'ai_chunk', [{ type: 'text', text: 'a3' }]),
    e(A, 'tool_result', { call_id: 'c-late', content: 'early result' }),
    e(A, 'tool_call', { call_id: 'c-late', name: 'late_tool', arguments: { x: 1 } }),
    e(B, 'ai_chunk', { content: 'b2' }, { id: 'm-b' }),
    e(B, 'ai_message', { content: 'B whole' }, { id: 'm-b' }),
    e(
      B,
      'tool_call',
      {
        tool_calls: [
          { id: 'c-b1', name: 't1', args: {} },
          { id: 'c-b2', name: 't2', arguments: 'raw' },
        ],
      },
      { id: 'm-b' },
    ),
    e(B, 'tool_result', { call_id: 'c-b2', content: 'r2' }),
    e(A, 'tool_result', { call_id: 'c-b1', content: 'cross-run', is_error: true }),
    e(A, 'system_message', 'sys'),
    e(A, 'ai_chunk', { content: 'a4' }),
    e(A, 'ai_chunk', { content: 'a5' }),
    e(A, 'end', { status: 'success' }, {}, 'LIFECYCLE'),
    e(R1, 'ai_chunk', { content: ' PS' }, { id: 'msg-a1' }),
    e(R1, 'tool_result', { call_id: 'call_00_a', content: 'again' }),
    // One call id twice in a list: the last names the result. An id-less call names nothing.
    e(B, 'tool_call', {
      tool_calls: [
        { id: 'c-dup', name: 'first' },
        { id: 'c-dup', name: 'last' },
      ],
    }),
    e(B, 'human_message', 'between'),
    e(B, 'tool_result', { call_id: 'c-dup', content: 'dup result' }),
    e(B, 'tool_call', { name: 'idless' }),
    e(B, 'tool_result', { content: 'no call id' }),
  ];
}

interface ChatPageJson {
  messages: ChatViewMessage[];
  has_more: boolean;
  next_after_seq?: number;
}

/**
 * History's chat view now, ascending. A page ends after `limit` messages, and an assistant
 * message going on past the end of its page goes on in a later one as a part with the same
 * id: parts from later pages are appended (docs/api.md, the chat projection).
 */
async function historyNow(t: string, run?: string): Promise<ChatViewMessage[]> {
  const base = `${stack.httpUrl}/v1/threads/${t}${run === undefined ? '' : `/runs/${run}`}/messages?view=chat&limit=1000`;
  const out: { m: ChatViewMessage; page: number }[] = [];
  let after = 0;
  for (let page = 0; ; page++) {
    const r = await http<ChatPageJson>(`${base}&after_seq=${after}`);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    for (const m of r.body.messages) {
      const part = out.find(
        (o) =>
          o.page < page &&
          o.m.role === 'assistant' &&
          o.m.role === m.role &&
          o.m.id === m.id &&
          o.m.run_id === m.run_id,
      );
      if (part) {
        part.m.content += m.content;
        part.m.tool_calls = [...(part.m.tool_calls ?? []), ...(m.tool_calls ?? [])];
        part.m.last_seq = m.last_seq;
        part.m.event_count += m.event_count;
      } else out.push({ m, page });
    }
    if (!r.body.has_more) return out.map((o) => o.m);
    after = r.body.next_after_seq as number;
  }
}

/** History's chat view at seq n: the one page before n + 1, put back in ascending order. */
async function historyAt(t: string, n: number, run?: string): Promise<ChatViewMessage[]> {
  if (n === 0) return [];
  const base = `${stack.httpUrl}/v1/threads/${t}${run === undefined ? '' : `/runs/${run}`}/messages?view=chat`;
  const r = await http<ChatPageJson>(`${base}&limit=1000&before_seq=${n + 1}`);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.has_more, false, 'the test thread fits one page');
  return r.body.messages.reverse();
}

type ChatWsFrame = Extract<ServerFrame, { type: 'chat' }>;

/**
 * Subscribes `conn` to the chat view after the view's cursor and applies frames until live
 * at `head` (or past it), until `stopAfter` frames, or until the run ends (`ended`).
 */
async function wsViewFrom(
  conn: WsConnection,
  id: string,
  t: string,
  view: ChatView,
  head: number,
  o: { run?: string; stopAfter?: number } = {},
): Promise<{ frames: ChatWsFrame[]; ended: number | undefined }> {
  const frames: ChatWsFrame[] = [];
  let caughtUp = false;
  let ended: number | undefined;
  let resolveDone: () => void = () => undefined;
  const done = new Promise<void>((r) => {
    resolveDone = r;
  });
  const off = conn.onFrame((f) => {
    if (f.id !== id) return;
    if (f.type === 'chat') {
      frames.push(f);
      view.apply(f);
      if (o.stopAfter !== undefined && frames.length >= o.stopAfter) resolveDone();
    } else if (f.type === 'live') {
      view.advance(f.seq);
      caughtUp = true;
    } else if (f.type === 'end') {
      ended = f.seq;
      view.advance(f.seq);
      resolveDone();
      return;
    } else if (f.type === 'error') {
      assert.fail(`chat view error: ${JSON.stringify(f)}`);
    }
    if (caughtUp && view.cursor >= head) resolveDone();
  });
  conn.sendRaw({
    type: 'subscribe',
    id,
    thread_id: t,
    after_seq: view.cursor,
    view: 'chat',
    ...(o.run === undefined ? {} : { run_id: o.run }),
  });
  await done;
  off();
  if (ended === undefined) {
    conn.unsubscribe(id);
    await conn.waitFor((f) => f.type === 'unsubscribed' && f.id === id);
  }
  return { frames, ended };
}

async function publishAll(events: Event[]): Promise<number> {
  const acks = await stack.client.publish(events, 'PERSISTED');
  return Math.max(...acks.map((a) => a.seq));
}

test('WebSocket: from History at every seq N, the frames after N give exactly History’s chat view', async () => {
  const t = randomName('cv-');
  const head = await publishAll([...fixtureEvents(t), ...extras(t)]);
  const final = await historyNow(t);
  // The reference at N is sound: at the head it is the ascending view.
  assert.deepEqual(await historyAt(t, head), final);
  // The rules the extras exercise, as History has them.
  const byId = (id: string) => final.filter((m) => m.id === id);
  assert.equal(byId('m-b')[0]?.content, 'B whole');
  assert.deepEqual(
    byId('m-b')[0]?.tool_calls?.map((c) => c.name),
    ['t1', 't2'],
  );
  assert.equal(byId('c-late')[0]?.name, '', 'a result before its call is not named by it');
  assert.equal(byId('c-b1')[0]?.name, '', 'a call of another run does not name a result');
  assert.equal(byId('c-b2')[0]?.name, 't2');
  assert.equal(byId('msg-a1')[0]?.content.endsWith(' PS'), true);
  assert.deepEqual(
    byId('call_00_a').map((m) => m.name),
    ['web_search', 'web_search'],
  );
  assert.equal(byId('c-dup')[0]?.name, 'last', 'the last call with the id in its event');
  assert.equal(final.find((m) => m.content === 'no call id')?.name, '', 'no call id: not named');
  const anon = final.filter((m) => m.run_id === A && m.role === 'assistant').map((m) => m.content);
  assert.deepEqual(anon, ['a1a2a3', '', 'a4a5']);

  const conn = await stack.ws();
  for (let n = 0; n <= head; n++) {
    const view = new ChatView(await historyAt(t, n), n);
    await wsViewFrom(conn, `n${n}`, t, view, head);
    assert.deepEqual(view.messages, final, `resumed after seq ${n}`);
  }
  // A run's view ends with the run's end: from any cursor, it is History's view of the run
  // at its end (the first run's stragglers after its end are not part of its subscription).
  for (const [run, endSeq] of [
    [R1, 25],
    ['run-01J90', 33],
  ] as const) {
    for (let n = 0; n <= head; n += 3) {
      const view = new ChatView(await historyAt(t, Math.min(n, endSeq), run), n);
      const { ended } = await wsViewFrom(conn, `r${run}${n}`, t, view, head, { run });
      assert.equal(ended, endSeq);
      assert.deepEqual(view.messages, await historyAt(t, endSeq, run), `run ${run} resumed after seq ${n}`);
    }
  }
});

test('WebSocket: frames are deltas; live, and across reconnects every few frames, the view stays exact', async () => {
  const t = randomName('cvl-');
  const events = [...fixtureEvents(t), ...extras(t)];
  const conn = await stack.ws();
  const view = new ChatView();
  // Live from the start: the producer publishes while the client reads.
  const frames = wsViewFrom(conn, 'live', t, view, events.length);
  for (const e of events) await stack.client.publish([e], 'PERSISTED');
  const { frames: all } = await frames;
  assert.deepEqual(view.messages, await historyNow(t));
  // A chunk's frame carries the chunk, never the message so far.
  const chunks = all.filter((f) => f.message.role === 'assistant' && f.append !== undefined);
  assert.ok(chunks.length > 20);
  for (const f of chunks) assert.equal(f.content, undefined, JSON.stringify(f));
  const longest = Math.max(...view.messages.map((m) => m.content.length));
  for (const f of chunks) assert.ok((f.append as string).length < longest, JSON.stringify(f));
  // A message's metadata comes with its first frame only.
  for (const f of all) {
    const first = f.seq === f.message.first_seq;
    assert.equal('metadata' in f.message, first, JSON.stringify(f));
  }

  // Again on a fresh thread, dropping the connection every 3 frames and resuming after the cursor.
  const t2 = randomName('cvr-');
  const events2 = [...fixtureEvents(t2), ...extras(t2)];
  const producer = (async () => {
    for (const e of events2) await stack.client.publish([e], 'PERSISTED');
  })();
  const view2 = new ChatView();
  let reconnects = 0;
  while (view2.cursor < events2.length) {
    const c = await stack.ws();
    await wsViewFrom(c, `k${reconnects}`, t2, view2, events2.length, { stopAfter: 3 });
    await c.close();
    reconnects++;
  }
  await producer;
  assert.ok(reconnects > 3, `reconnected ${reconnects} times`);
  assert.deepEqual(view2.messages, await historyNow(t2));
});

/** Reads an SSE chat view until it is live at `head` (or `stopAfter` frames); returns the last id read. */
async function sseViewFrom(
  t: string,
  view: ChatView,
  head: number,
  o: { lastEventId?: string | undefined; stopAfter?: number } = {},
): Promise<string> {
  const query = o.lastEventId === undefined ? `?view=chat&after_seq=${view.cursor}` : '?view=chat';
  const s = await SseClient.open(
    `${stack.httpUrl}/v1/threads/${t}/stream${query}`,
    o.lastEventId === undefined ? {} : { 'last-event-id': o.lastEventId },
  );
  assert.equal(s.status, 200, s.body);
  let applied = 0;
  let live = false;
  // The id an EventSource that dispatched the blocks up to here would send on reconnect.
  let lastEventId = o.lastEventId ?? '';
  for (let i = 0; ; i++) {
    if (i >= s.blocks.length) await s.waitFor((b) => s.blocks.indexOf(b) >= i, 'another block');
    const b = s.blocks[i];
    if (b?.id !== undefined) lastEventId = b.id;
    if (b?.event === 'chat') {
      view.apply(JSON.parse(b.data as string) as ChatFrameData);
      applied++;
    } else if (b?.event === 'live') {
      view.advance((JSON.parse(b.data as string) as { seq: number }).seq);
      live = true;
    } else if (b?.event === 'error') {
      assert.fail(`chat view error: ${b.data}`);
    }
    if ((live && view.cursor >= head) || (o.stopAfter !== undefined && applied >= o.stopAfter)) break;
  }
  s.close();
  return lastEventId;
}

test('SSE ?view=chat: from any seq, and by Last-Event-ID across reconnects, History’s chat view', async () => {
  const t = randomName('cvs-');
  const head = await publishAll([...fixtureEvents(t), ...extras(t)]);
  const final = await historyNow(t);
  for (let n = 0; n <= head; n += 4) {
    const view = new ChatView(await historyAt(t, n), n);
    await sseViewFrom(t, view, head);
    assert.deepEqual(view.messages, final, `resumed after seq ${n}`);
  }
  // An EventSource's reconnects: each carries the last id it saw.
  const view = new ChatView();
  let lastEventId: string | undefined;
  let rounds = 0;
  while (view.cursor < head) {
    lastEventId = await sseViewFrom(t, view, head, { lastEventId, stopAfter: 5 });
    rounds++;
  }
  assert.ok(rounds > 3);
  assert.deepEqual(view.messages, final);
});

test('a view over more messages than it keeps state for drops it and goes on exactly', async () => {
  const t = randomName('cvb-');
  const n = CHAT_VIEW_MAX_STATE + 100;
  const events: Event[] = [];
  for (let i = 0; i < n; i++) {
    events.push(ev(t, 'big', i, { metadata: { id: `m${i}` }, content: { content: `x${i}` } }));
  }
  // Messages begun long before go on after the view's state was dropped.
  for (const i of [0, 7, n - 1, 1000]) {
    events.push(ev(t, 'big', n + i, { metadata: { id: `m${i}` }, content: { content: `+${i}` } }));
  }
  events.push(ev(t, 'big', 3 * n, { type: 'ai_chunk', content: 'anon' }));
  for (let i = 0; i < events.length; i += 500)
    await stack.client.publish(events.slice(i, i + 500), 'PERSISTED');
  const conn = await stack.ws();
  const view = new ChatView();
  await wsViewFrom(conn, 'big', t, view, events.length);
  const final = await historyNow(t);
  assert.equal(final.length, n + 1);
  assert.equal(final.find((m) => m.id === 'm7')?.content, 'x7+7');
  assert.deepEqual(view.messages, final);
});

test('a chat view cut off as too slow resumes after the last frame it got; nothing goes out after unsubscribed', async () => {
  await using small = await startStack({ wsMaxBufferedBytes: 64 * 1024 });
  const t = randomName('cvc-');
  const slow = await small.ws();
  slow.sendRaw({ type: 'subscribe', id: 'c', thread_id: t, view: 'chat' });
  await slow.waitFor((f) => f.type === 'live');
  const socket = (slow.ws as unknown as { _socket: import('node:net').Socket })._socket;
  socket.pause();
  // More than the kernel's socket buffers hold, so the broker's own queue fills.
  const N = 4000;
  const pad = 'x'.repeat(4000);
  for (let i = 0; i < N; i += 500) {
    await small.client.publish(
      Array.from({ length: 500 }, (_, k) =>
        ev(t, 'r', i + k, { type: 'human_message', content: `m${i + k} ${pad}` }),
      ),
      'PERSISTED',
    );
  }
  await new Promise((r) => setTimeout(r, 500));
  socket.resume();
  await slow.closed;
  const cut = slow.frames.find((f) => f.type === 'error' && f.code === 'slow_consumer');
  assert.ok(cut?.type === 'error', JSON.stringify(slow.frames.at(-1)));
  const got = slow.frames.flatMap((f) => (f.type === 'chat' ? [f.seq] : []));
  assert.ok(got.length > 0 && got.length < N, `${got.length} frames before the cut-off`);
  assert.equal(cut.cursors?.c, got.at(-1), 'the cursor is the last frame received');
  // Resuming there gives exactly History's view.
  const view = new ChatView(await historyAtOn(small, t, got.at(-1) as number), got.at(-1) as number);
  const c = await small.ws();
  c.onFrame((f) => {
    if (f.type === 'chat' && f.id === 'r') view.apply(f);
  });
  c.sendRaw({ type: 'subscribe', id: 'r', thread_id: t, view: 'chat', after_seq: view.cursor });
  await c.waitFor((f) => f.type === 'live' && f.id === 'r');
  assert.equal(view.messages.length, N);
  assert.equal(view.cursor, N);

  // Unsubscribing on the first chat frame of a burst: nothing of that subscription follows.
  const u = await small.ws();
  u.sendRaw({ type: 'subscribe', id: 'u', thread_id: t, view: 'chat', after_seq: N });
  await u.waitFor((f) => f.type === 'live' && f.id === 'u');
  let asked = false;
  u.onFrame((f) => {
    if (f.type === 'chat' && f.id === 'u' && !asked) {
      asked = true;
      u.unsubscribe('u');
    }
  });
  await small.client.publish(
    Array.from({ length: 300 }, (_, i) => ev(t, 'r2', i, { metadata: { id: `m${i}` } })),
    'PERSISTED',
  );
  const unsub = await u.waitFor((f) => f.type === 'unsubscribed' && f.id === 'u');
  await new Promise((r) => setTimeout(r, 500));
  const after = u.frames.slice(u.frames.indexOf(unsub) + 1).filter((f) => f.id === 'u');
  assert.deepEqual(after, []);
  assert.ok(u.frames.filter((f) => f.type === 'chat' && f.id === 'u').length < 300);
});

/** {@link historyAt} on another stack. */
async function historyAtOn(on: Stack, t: string, n: number): Promise<ChatViewMessage[]> {
  const r = await http<ChatPageJson>(
    `${on.httpUrl}/v1/threads/${t}/messages?view=chat&limit=1000&before_seq=${n + 1}`,
  );
  const out = [...r.body.messages];
  let before = (r.body as { next_before_seq?: number }).next_before_seq;
  while (r.body.has_more && before !== undefined) {
    const more = await http<ChatPageJson & { next_before_seq?: number }>(
      `${on.httpUrl}/v1/threads/${t}/messages?view=chat&limit=1000&before_seq=${before}`,
    );
    out.push(...more.body.messages);
    if (!more.body.has_more) break;
    before = more.body.next_before_seq;
  }
  return out.reverse();
}
