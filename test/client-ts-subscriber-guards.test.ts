// The TypeScript subscriber and History client against a broken or hostile server (a proxy
// that mangles a frame, a server that floods, stalls, loops or never ends a body) and against
// misuse: the process never crashes, the caller never gets a wrong, repeated or skipped event,
// memory stays bounded, and nothing loops without backoff. The peers here are small scripted
// WebSocket and HTTP servers: what a real broker never sends is the point.
import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { HistoryClient, type SubscriptionItem, subscribe } from '@runstream/client';
import WebSocket, { WebSocketServer } from 'ws';
import { waitFor } from './helpers/wait.js';

const FAST = { initialDelayMs: 5, maxDelayMs: 20 };

interface Sub {
  after_seq?: number;
  [k: string]: unknown;
}

/** A WebSocket server whose every connection runs `script` once the subscribe frame comes. */
async function fakeBroker(
  script: (ws: WebSocket, sub: Sub, n: number) => void,
): Promise<{ url: string; subscribes: Sub[]; connections: () => number; close: () => Promise<void> }> {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  await new Promise((r) => wss.once('listening', r));
  const subscribes: Sub[] = [];
  let connections = 0;
  wss.on('connection', (ws) => {
    connections++;
    ws.on('error', () => undefined);
    ws.once('message', (m: Buffer) => {
      const sub = JSON.parse(m.toString()) as Sub;
      subscribes.push(sub);
      script(ws, sub, subscribes.length);
    });
  });
  return {
    url: `ws://127.0.0.1:${(wss.address() as AddressInfo).port}/v1/ws`,
    subscribes,
    connections: () => connections,
    close: async () => {
      for (const c of wss.clients) c.terminate();
      await new Promise((r) => wss.close(r));
    },
  };
}

function eventFrame(seq: unknown, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    type: 'event',
    id: 's1',
    event: {
      seq,
      offset: seq,
      thread_id: 't',
      run_id: 'r',
      event_id: `e${String(seq)}`,
      event_type: 'ai_chunk',
      category: 'message',
      user_id: '',
      created_at: '2026-12-06T00:00:00.000Z',
      content: { seq },
      metadata: {},
      ...extra,
    },
  });
}

/** Sends events after the subscription's cursor up to `to`, then `live`. */
function serveUpTo(ws: WebSocket, sub: Sub, to: number): void {
  for (let s = (sub.after_seq ?? 0) + 1; s <= to; s++) ws.send(eventFrame(s));
  ws.send(JSON.stringify({ type: 'live', id: 's1', seq: to }));
}

async function collectUntil(
  items: SubscriptionItem[],
  it: AsyncIterable<SubscriptionItem>,
  done: (items: SubscriptionItem[]) => boolean,
): Promise<void> {
  for await (const item of it) {
    items.push(item);
    if (done(items)) return;
  }
}

const seqs = (items: SubscriptionItem[]): number[] =>
  items.flatMap((i) => (i.type === 'event' ? [i.event.seq] : []));
const range = (from: number, to: number): number[] =>
  Array.from({ length: to - from + 1 }, (_, i) => from + i);

test('a frame that is not what the protocol says is a protocol error: reported, resumed from the cursor, never delivered, never a crash', async () => {
  const bad = [
    'null',
    '[]',
    'not json',
    '{"type":"event","id":"s1"}',
    eventFrame('abc'),
    eventFrame(-3),
    eventFrame(2 ** 60),
    eventFrame(3, { thread_id: 'another-thread' }),
    '{"type":"live","id":"s1","seq":"10"}',
    '{"type":"error","id":"s1","seq":1}',
    '{"type":"chat","id":"s1","seq":7,"append":"x"}',
  ];
  const broker = await fakeBroker((ws, sub, n) => {
    // Each connection: the next good event, then one bad frame; the last connection serves the rest.
    const after = sub.after_seq ?? 0;
    if (n <= bad.length) {
      ws.send(eventFrame(after + 1));
      ws.send(bad[n - 1] as string);
      // Good frames behind the bad one must not be taken from this connection.
      ws.send(eventFrame(after + 2));
    } else serveUpTo(ws, sub, 20);
  });
  const sub = subscribe({ url: broker.url, threadId: 't', WebSocket, backoff: FAST });
  const items: SubscriptionItem[] = [];
  await collectUntil(items, sub, (all) => all.some((i) => i.type === 'live'));
  sub.close();
  await broker.close();
  assert.deepEqual(seqs(items), range(1, 20), 'every event once, in order');
  const protocolErrors = items.filter((i) => i.type === 'error' && i.error.code === 'protocol_error');
  assert.equal(protocolErrors.length, bad.length, 'each bad frame is reported');
  assert.ok(protocolErrors.every((i) => i.type === 'error' && i.retrying));
  // Each resume starts after what was delivered: the good event ahead of each bad frame.
  assert.deepEqual(
    broker.subscribes.map((s) => s.after_seq),
    range(0, bad.length),
  );
});

test('cursor is what the caller was given, not what arrived; a full buffer stops reading and resumes from there', async () => {
  const broker = await fakeBroker((ws, sub) => serveUpTo(ws, sub, 3000));
  const sub = subscribe({ url: broker.url, threadId: 't', WebSocket, backoff: FAST, maxBufferedItems: 100 });
  const items: SubscriptionItem[] = [];
  let mostBuffered = 0;
  for await (const item of sub) {
    items.push(item);
    mostBuffered = Math.max(mostBuffered, sub.buffered);
    if (items.length === 10) {
      // Arrivals run ahead of the caller; the cursor does not.
      await waitFor(() => sub.buffered >= 50, { timeoutMs: 10_000, what: 'events buffered' });
      assert.equal(sub.cursor, 10);
    }
    if (item.type === 'live') break;
  }
  await broker.close();
  assert.deepEqual(seqs(items), range(1, 3000));
  assert.ok(mostBuffered <= 100, `at most maxBufferedItems wait (${mostBuffered})`);
  assert.ok(broker.subscribes.length > 1, 'the subscription stopped reading and resumed');
  for (let i = 1; i < broker.subscribes.length; i++) {
    assert.ok((broker.subscribes[i]?.after_seq ?? 0) > (broker.subscribes[i - 1]?.after_seq ?? 0));
  }
  assert.equal(sub.cursor, 3000);
});

test('close() drops what waits, and removes its listener from a shared signal', async () => {
  const broker = await fakeBroker((ws, sub) => serveUpTo(ws, sub, 500));
  const app = new AbortController();
  const signal = app.signal;
  for (let i = 0; i < 5; i++) {
    const sub = subscribe({ url: broker.url, threadId: 't', WebSocket, signal });
    for await (const item of sub) if (item.type === 'event') break;
    await sub.finished;
    assert.equal(sub.buffered, 0, 'nothing is held after close');
  }
  await broker.close();
  assert.equal(getEventListeners(signal, 'abort').length, 0, 'every subscription took its listener back');
});

test('a server that takes the connection and never answers the upgrade is given up on after connectTimeoutMs, and retried', async () => {
  const { createServer } = await import('node:net');
  let connections = 0;
  const held: import('node:net').Socket[] = [];
  const server = createServer((s) => {
    connections++;
    held.push(s);
    s.on('error', () => undefined);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `ws://127.0.0.1:${(server.address() as AddressInfo).port}/v1/ws`;
  const sub = subscribe({
    url,
    threadId: 't',
    WebSocket,
    backoff: FAST,
    connectTimeoutMs: 200,
    maxReconnectAttempts: 2,
  });
  const last = await sub.finished;
  for (const s of held) s.destroy();
  server.close();
  assert.equal(last?.type, 'error');
  assert.equal(last?.type === 'error' && last.error.code, 'connection_failed');
  assert.match(last?.type === 'error' ? last.error.message : '', /did not open within 200 ms/);
  assert.equal(connections, 3);
});

test('close 4001 refreshes the token at once only the first time in a row; then it backs off and counts', async () => {
  const broker = await fakeBroker((ws) => ws.close(4001, 'token expired'));
  let tokens = 0;
  const sub = subscribe({
    url: broker.url,
    threadId: 't',
    WebSocket,
    backoff: FAST,
    maxReconnectAttempts: 3,
    getToken: () => `token-${++tokens}`,
  });
  const last = await sub.finished;
  await broker.close();
  assert.equal(last?.type === 'error' && last.error.code, 'connection_failed');
  // One free refresh, then three counted attempts.
  assert.equal(broker.subscribes.length, 5);
});

test('a getToken that never answers does not keep a closed subscription from finishing', async () => {
  const sub = subscribe({
    url: 'ws://127.0.0.1:9/v1/ws',
    threadId: 't',
    WebSocket,
    getToken: () => new Promise<string>(() => undefined),
  });
  await new Promise((r) => setTimeout(r, 20));
  sub.close();
  assert.equal(await sub.finished, undefined);
});

test('two iterators of one subscription share its items; neither is left waiting after close', async () => {
  const broker = await fakeBroker((ws, sub) => serveUpTo(ws, sub, 20));
  const sub = subscribe({ url: broker.url, threadId: 't', WebSocket });
  const a = sub[Symbol.asyncIterator]();
  const b = sub[Symbol.asyncIterator]();
  const got: number[] = [];
  const drain = async (it: AsyncIterator<SubscriptionItem>): Promise<void> => {
    for (;;) {
      const r = await it.next();
      if (r.done) return;
      if (r.value.type === 'event') got.push(r.value.event.seq);
    }
  };
  const both = Promise.all([drain(a), drain(b)]);
  await waitFor(() => got.length === 20, { timeoutMs: 10_000, what: 'all events' });
  sub.close();
  await both;
  await broker.close();
  assert.deepEqual(
    got.sort((x, y) => x - y),
    range(1, 20),
  );
});

test('bad subscription options are refused, naming the option', () => {
  const bad: [Record<string, unknown>, string][] = [
    [{ backoff: { initialDelayMs: Number.NaN } }, 'backoff.initialDelayMs'],
    [{ backoff: { maxDelayMs: -1 } }, 'backoff.maxDelayMs'],
    [{ backoff: { factor: 0 } }, 'backoff.factor'],
    [{ maxReconnectAttempts: Number.NaN }, 'maxReconnectAttempts'],
    [{ maxBufferedItems: 0 }, 'maxBufferedItems'],
    [{ connectTimeoutMs: -1 }, 'connectTimeoutMs'],
    [{ pingIntervalMs: Number.NaN }, 'pingIntervalMs'],
    [{ threadId: '' }, 'threadId'],
  ];
  for (const [options, name] of bad) {
    assert.throws(
      () => subscribe({ url: 'ws://127.0.0.1:9/v1/ws', threadId: 't', WebSocket, ...options }),
      (e: Error & { code?: string }) => e.code === 'invalid_argument' && e.message.startsWith(`${name}: `),
      name,
    );
  }
});

/** An HTTP server answering every request with `handler`. */
async function fakeHttp(
  handler: (req: http.IncomingMessage, res: http.ServerResponse, n: number) => void,
): Promise<{ url: string; requests: () => number; close: () => Promise<void> }> {
  let n = 0;
  const server = http.createServer((req, res) => handler(req, res, ++n));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests: () => n,
    close: async () => {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}

test('History: a body past maxResponseBytes is cut off with resource_exhausted; one that is not JSON is a protocol error', async () => {
  const endless = await fakeHttp((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    const chunk = Buffer.alloc(64 * 1024, 0x20);
    const pump = (): void => {
      while (res.write(chunk)) {
        if (res.destroyed) return;
      }
      res.once('drain', pump);
    };
    res.write('{"events":[');
    pump();
  });
  const h = new HistoryClient({ url: endless.url, maxResponseBytes: 1024 * 1024 });
  await assert.rejects(
    h.listEvents('t'),
    (e: Error & { code?: string }) => e.code === 'resource_exhausted' && /maxResponseBytes/.test(e.message),
  );
  await endless.close();
  const html = await fakeHttp((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end('<html>gateway</html>');
  });
  await assert.rejects(
    new HistoryClient({ url: html.url }).listEvents('t'),
    (e: Error & { code?: string }) => e.code === 'protocol_error',
  );
  await html.close();
});

test('History events(): a page that says has_more without moving its cursor ends with a protocol error, not a loop', async () => {
  const stuck = await fakeHttp((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ events: [], next_after_seq: 5, has_more: true }));
  });
  const h = new HistoryClient({ url: stuck.url });
  await assert.rejects(
    (async () => {
      for await (const _e of h.events('t', { afterSeq: 5 })) {
        // nothing comes
      }
    })(),
    (e: Error & { code?: string }) => e.code === 'protocol_error' && /cursor/.test(e.message),
  );
  assert.ok(stuck.requests() <= 2, `${stuck.requests()} requests`);
  await stuck.close();
});

test('long-poll: a server that answers a wait at once with nothing is not polled in a hot loop', async () => {
  const eager = await fakeHttp((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ events: [], next_after_seq: 0, has_more: false }));
  });
  const sub = subscribe({ url: eager.url.replace('http', 'ws'), transport: 'long-poll', threadId: 't' });
  await new Promise((r) => setTimeout(r, 1000));
  sub.close();
  await sub.finished;
  const requests = eager.requests();
  await eager.close();
  // An empty answer that came before its wait was over is followed by a pause of at least
  // 100 ms, so a second holds at most 11 polls however fast the machine (it was thousands).
  assert.ok(requests <= 12, `${requests} requests in a second`);
});
