// The LangGraph-compatible join, driven by the real LangGraph SDK (@langchain/langgraph-sdk):
// `client.runs.joinStream` works against runstream unchanged, honours streamMode and
// lastEventId, ends after the run's terminal event, and resumes by itself after a
// dropped connection.
import assert from 'node:assert/strict';
import { createServer, Socket } from 'node:net';
import { after, before, test } from 'node:test';
import { Client, type StreamMode } from '@langchain/langgraph-sdk';
import type { Event } from '../src/client/ingest-client.js';
import { waitFor } from './helpers/index.js';
import { SseClient } from './helpers/sse-client.js';
import { randomName, type Stack, startStack } from './helpers/stack.js';

let stack: Stack;
let client: Client;
before(async () => {
  stack = await startStack({ catchupPageSize: 3, sseKeepAliveMs: 200 });
  client = new Client({ apiUrl: stack.httpUrl, apiKey: null });
});
after(async () => {
  await stack[Symbol.asyncDispose]();
});

interface Part {
  id?: string;
  event: string;
  data: unknown;
}

/** Event n of a run, as a LangGraph bridge (or a runstream-native agent) would publish it. */
function lg(
  t: string,
  r: string,
  n: number,
  eventType: string,
  content: unknown,
  category: Event['category'] = 'TRACE',
): Event {
  return {
    thread_id: t,
    run_id: r,
    event_id: `${r}-${n}`,
    event_type: eventType,
    category,
    content_json: JSON.stringify(content),
  };
}

/** A run in LangGraph's own event names, plus one runstream-native event, then its end. */
function langGraphRun(t: string, r: string): Event[] {
  return [
    lg(t, r, 1, 'metadata', { assistant_id: 'agent' }, 'LIFECYCLE'),
    lg(t, r, 2, 'values', { messages: [] }),
    lg(t, r, 3, 'updates', { agent: { messages: [{ type: 'ai', content: 'hi' }] } }),
    lg(
      t,
      r,
      4,
      'messages',
      [{ type: 'AIMessageChunk', content: 'h', id: 'm1' }, { langgraph_node: 'agent' }],
      'MESSAGE',
    ),
    lg(t, r, 5, 'custom', { progress: 0.5 }),
    lg(t, r, 6, 'ai_chunk', { content: 'native' }, 'MESSAGE'),
    lg(t, r, 7, 'updates|tools:call_1', { tools: { ok: true } }),
    lg(t, r, 8, 'end', { status: 'success' }, 'LIFECYCLE'),
  ];
}

async function collect(stream: AsyncIterable<Part>): Promise<Part[]> {
  const parts: Part[] = [];
  for await (const p of stream) parts.push({ id: p.id, event: p.event, data: p.data });
  return parts;
}

/** The first `n` parts of a join, then the client hangs up (aborts the request, as an app does). */
async function firstParts(n: number, join: (signal: AbortSignal) => AsyncIterable<Part>): Promise<Part[]> {
  const abort = new AbortController();
  const parts: Part[] = [];
  for await (const p of join(abort.signal)) {
    parts.push({ id: p.id, event: p.event, data: p.data });
    if (parts.length >= n) {
      abort.abort();
      break;
    }
  }
  return parts;
}

test('joinStream replays a finished run (lastEventId "-1") in LangGraph events, with seq ids, and ends', async () => {
  const t = randomName('t-');
  const r = randomName('run-');
  await stack.client.publish(langGraphRun(t, r), 'PERSISTED');

  const parts = await collect(client.runs.joinStream(t, r, { lastEventId: '-1' }));
  const history = await fetch(`${stack.httpUrl}/v1/threads/${t}/events?after_seq=5&limit=1`);
  const native = ((await history.json()) as { events: unknown[] }).events[0];
  assert.deepEqual(parts, [
    { id: '1', event: 'metadata', data: { assistant_id: 'agent', run_id: r, thread_id: t } },
    { id: '2', event: 'values', data: { messages: [] } },
    { id: '3', event: 'updates', data: { agent: { messages: [{ type: 'ai', content: 'hi' }] } } },
    {
      id: '4',
      event: 'messages',
      data: [{ type: 'AIMessageChunk', content: 'h', id: 'm1' }, { langgraph_node: 'agent' }],
    },
    { id: '5', event: 'custom', data: { progress: 0.5 } },
    // A runstream-native event comes as `custom`, carrying the whole runstream event.
    { id: '6', event: 'custom', data: native },
    { id: '7', event: 'updates|tools:call_1', data: { tools: { ok: true } } },
    { id: '8', event: 'end', data: { run_id: r, status: 'success' } },
  ]);
  assert.equal((native as { event_type: string }).event_type, 'ai_chunk');
});

test('streamMode selects events as LangGraph does; metadata and end always come', async () => {
  const t = randomName('t-');
  const r = randomName('run-');
  await stack.client.publish(langGraphRun(t, r), 'PERSISTED');
  const events = async (streamMode: StreamMode | StreamMode[]) =>
    (await collect(client.runs.joinStream(t, r, { lastEventId: '-1', streamMode }))).map((p) => p.event);

  assert.deepEqual(await events(['updates']), ['metadata', 'updates', 'updates|tools:call_1', 'end']);
  assert.deepEqual(await events('messages-tuple'), ['metadata', 'messages', 'end']);
  assert.deepEqual(await events(['values', 'custom']), ['metadata', 'values', 'custom', 'custom', 'end']);
  assert.deepEqual(await events('messages'), ['metadata', 'end']);

  const bad = await fetch(`${stack.httpUrl}/threads/${t}/runs/${r}/stream?stream_mode=nope`);
  assert.equal(bad.status, 400);
  assert.match(((await bad.json()) as { error: { message: string } }).error.message, /^stream_mode/);
});

test('joinStream follows a live run and ends after its terminal event; without lastEventId it starts from now', async () => {
  const t = randomName('t-');
  const r = randomName('run-');
  const run = langGraphRun(t, r);
  await stack.client.publish(run.slice(0, 3), 'PERSISTED');
  assert.equal((await client.runs.get(t, r)).status, 'running');

  const fromStart = collect(client.runs.joinStream(t, r, { lastEventId: '-1' }));
  const fromNow = collect(client.runs.joinStream(t, r));
  // The same join on the wire: an id-only block at the head (3) says it is attached.
  const raw = await SseClient.open(`${stack.httpUrl}/threads/${t}/runs/${r}/stream`);
  await raw.waitFor((b) => b.id === '3' && b.data === undefined);
  await stack.client.publish(run.slice(3), 'PERSISTED');

  assert.deepEqual(
    (await fromStart).map((p) => p.id),
    ['1', '2', '3', '4', '5', '6', '7', '8'],
  );
  await raw.ended;
  assert.deepEqual(
    raw.events.map((b) => b.id),
    ['4', '5', '6', '7', '8'],
  );
  // The SDK's own join attached at some point before the end: what came before is not replayed.
  const now = (await fromNow).map((p) => p.id);
  assert.deepEqual(now, ['4', '5', '6', '7', '8'].slice(-now.length));
  assert.equal((await client.runs.get(t, r)).status, 'success');
});

test('joinStream resumes with lastEventId after the client dropped the connection: exactly the rest', async () => {
  const t = randomName('t-');
  const r = randomName('run-');
  const run = langGraphRun(t, r);
  await stack.client.publish(run.slice(0, 5), 'PERSISTED');

  // The app aborts after three parts: the connection is gone.
  const first = await firstParts(3, (signal) => client.runs.joinStream(t, r, { lastEventId: '-1', signal }));
  assert.deepEqual(
    first.map((p) => p.id),
    ['1', '2', '3'],
  );
  await stack.client.publish(run.slice(5), 'PERSISTED');
  const rest = await collect(client.runs.joinStream(t, r, { lastEventId: first.at(-1)?.id }));
  assert.deepEqual(
    rest.map((p) => p.id),
    ['4', '5', '6', '7', '8'],
  );
  // Resuming from the end itself says the run ended, and nothing else.
  const atEnd = await collect(client.runs.joinStream(t, r, { lastEventId: '8' }));
  assert.deepEqual(atEnd, [{ id: '8', event: 'end', data: { run_id: r, status: 'success' } }]);
});

test('when the network drops the connection, the SDK reconnects by itself with Last-Event-ID and misses nothing', async () => {
  const t = randomName('t-');
  const r = randomName('run-');
  const run = langGraphRun(t, r);
  await stack.client.publish(run.slice(0, 4), 'PERSISTED');

  // A TCP proxy between the SDK and the broker, which the test can cut.
  const sockets = new Set<Socket>();
  const requests: string[] = [];
  const port = Number(new URL(stack.httpUrl).port);
  const proxy = createServer((down) => {
    const up = new Socket();
    up.connect(port, '127.0.0.1');
    sockets.add(down);
    down.on('data', (d: Buffer) => requests.push(d.toString()));
    down.pipe(up).pipe(down);
    const drop = () => {
      down.destroy();
      up.destroy();
      sockets.delete(down);
    };
    down.on('close', drop);
    up.on('close', drop);
    down.on('error', drop);
    up.on('error', drop);
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const proxied = new Client({
    apiUrl: `http://127.0.0.1:${(proxy.address() as { port: number }).port}`,
    apiKey: null,
  });
  try {
    const parts: Part[] = [];
    const stream = proxied.runs.joinStream(t, r, { lastEventId: '-1' });
    const done = (async () => {
      for await (const p of stream) {
        parts.push({ id: p.id, event: p.event, data: p.data });
        if (parts.length === 4) {
          // The network fails mid-run: every connection through the proxy is cut.
          for (const s of sockets) s.destroy();
          await stack.client.publish(run.slice(4), 'PERSISTED');
        }
      }
    })();
    await done;
    assert.deepEqual(
      parts.map((p) => p.id),
      ['1', '2', '3', '4', '5', '6', '7', '8'],
    );
    assert.equal(parts.at(-1)?.event, 'end');
    // The second request was the SDK's own reconnect, at the Location the join sent, with its last id.
    const joins = requests.filter((q) => q.startsWith('GET ') && q.includes('/stream'));
    assert.ok(joins.length >= 2, `the SDK reconnected (requests: ${joins.length})`);
    assert.match(joins[1] as string, /^GET \/threads\/[^/]+\/runs\/[^/]+\/stream/);
    assert.match(joins[1] as string, /\r\nlast-event-id: 4\r\n/i);
  } finally {
    proxy.close();
    for (const s of sockets) s.destroy();
  }
});

test('a failed run streams error then end; the run status and the raw frames are LangGraph’s', async () => {
  const t = randomName('t-');
  const r = randomName('run-');
  await stack.client.publish(
    [
      lg(t, r, 1, 'run_start', {}, 'LIFECYCLE'),
      lg(t, r, 2, 'values', { step: 1 }),
      lg(t, r, 3, 'error', { error: 'ValueError', message: 'boom' }, 'LIFECYCLE'),
    ],
    'PERSISTED',
  );
  const parts = await collect(client.runs.joinStream(t, r, { lastEventId: '-1' }));
  assert.deepEqual(parts, [
    { id: '1', event: 'metadata', data: { run_id: r, thread_id: t } },
    { id: '2', event: 'values', data: { step: 1 } },
    { id: '3', event: 'error', data: { error: 'ValueError', message: 'boom' } },
    { id: '3', event: 'end', data: { run_id: r, status: 'error' } },
  ]);
  const status = await client.runs.get(t, r);
  assert.equal(status.status, 'error');
  assert.equal(status.run_id, r);
  assert.equal(status.thread_id, t);
  await assert.rejects(client.runs.get(t, 'no-such-run'), /404/);

  // On the wire: text/event-stream, Location for reconnects, every event with its id.
  const raw = await SseClient.open(`${stack.httpUrl}/threads/${t}/runs/${r}/stream?stream_mode=values`, {
    'last-event-id': '-1',
  });
  await raw.ended;
  assert.match(String(raw.headers['content-type']), /^text\/event-stream/);
  assert.equal(raw.headers.location, `/threads/${t}/runs/${r}/stream?stream_mode=values`);
  assert.deepEqual(
    raw.events.map((b) => [b.id, b.event]),
    [
      ['1', 'metadata'],
      ['2', 'values'],
      ['3', 'error'],
      ['3', 'end'],
    ],
  );
});

test('cancelOnDisconnect: dropping the join asks the producer to cancel the run; without it, nothing is cancelled', async () => {
  const t = randomName('t-');
  const kept = randomName('run-');
  const cancelled = randomName('run-');
  await stack.client.publish(
    [...langGraphRun(t, kept).slice(0, 3), ...langGraphRun(t, cancelled).slice(0, 3)],
    'PERSISTED',
  );
  const cancelEvents = async (runId: string) => {
    const res = await fetch(`${stack.httpUrl}/v1/threads/${t}/events?limit=100`);
    const { events } = (await res.json()) as {
      events: { run_id: string; event_type: string; content: { source?: string } }[];
    };
    return events.filter((e) => e.run_id === runId && e.event_type === 'cancel_requested');
  };

  await firstParts(3, (signal) => client.runs.joinStream(t, kept, { lastEventId: '-1', signal }));
  await firstParts(3, (signal) =>
    client.runs.joinStream(t, cancelled, { lastEventId: '-1', cancelOnDisconnect: true, signal }),
  );
  const [request] = await waitFor(async () => {
    const found = await cancelEvents(cancelled);
    return found.length > 0 && found;
  });
  assert.equal(request?.content.source, 'on_disconnect');
  assert.deepEqual(await cancelEvents(kept), []);
});
