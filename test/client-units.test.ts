// Pure parts of @runstream/client: the backoff bounds, the views' bookkeeping, option checks,
// and a throwing callback that ends its subscription instead of the process.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  backoffDelayMs,
  ChatView,
  RunstreamError,
  subscribe,
  ThreadView,
  type WireEvent,
} from '@runstream/client';
import WebSocket, { WebSocketServer } from 'ws';

const event = (seq: number): WireEvent => ({
  seq,
  offset: seq,
  thread_id: 't',
  run_id: 'r',
  event_id: `e${seq}`,
  event_type: 'ai_chunk',
  category: 'message',
  user_id: '',
  created_at: '2026-12-01T10:00:00.000Z',
  content: { i: seq },
  metadata: {},
});

test('backoff: full jitter within [0, min(max, initial·factor^n)]', () => {
  const opts = { initialDelayMs: 100, maxDelayMs: 1000, factor: 2 };
  assert.equal(
    backoffDelayMs(0, opts, () => 0),
    0,
  );
  assert.equal(
    backoffDelayMs(0, opts, () => 0.999999),
    99,
  );
  assert.equal(
    backoffDelayMs(3, opts, () => 0.5),
    400,
  );
  assert.equal(
    backoffDelayMs(50, opts, () => 0.999999),
    999,
  );
  assert.equal(
    backoffDelayMs(10_000, opts, () => 0.5),
    500,
  );
});

test('ThreadView keeps each seq once and follows live, end and deletion', () => {
  const v = new ThreadView({ events: [event(1)], maxEvents: 3 });
  assert.equal(v.cursor, 1);
  for (const s of [1, 2, 2, 3, 4]) v.apply({ type: 'event', event: event(s) });
  assert.deepEqual(
    v.events.map((e) => e.seq),
    [2, 3, 4],
  );
  v.apply({ type: 'live', seq: 9 });
  assert.equal(v.live, true);
  assert.equal(v.cursor, 9);
  v.apply({ type: 'reconnecting', attempt: 1, delayMs: 0, cursor: 9, reason: 'x' });
  assert.equal(v.live, false);
  v.apply({ type: 'end', runId: 'r', seq: 10, status: 'success' });
  assert.deepEqual(v.ended, { runId: 'r', seq: 10, status: 'success' });
});

test('ChatView applies frames as protocol §8 says', () => {
  const c = new ChatView();
  const message = {
    role: 'assistant' as const,
    id: 'a',
    run_id: 'r',
    user_id: '',
    first_seq: 2,
    created_at: '2026-12-01T10:00:00.000Z',
    metadata: {},
  };
  c.apply({ seq: 2, message, append: 'he' });
  c.apply({ seq: 3, message, append: 'llo' });
  c.apply({ seq: 4, message, tool_calls: [{ id: 'c1', name: 'f', arguments: '{}', seq: 4 }] });
  assert.equal(c.messages.length, 1);
  assert.equal(c.messages[0]?.content, 'hello');
  assert.equal(c.messages[0]?.event_count, 3);
  assert.equal(c.messages[0]?.tool_calls?.length, 1);
  c.apply({ seq: 5, message, content: 'replaced' });
  assert.equal(c.messages[0]?.content, 'replaced');
  assert.equal(c.cursor, 5);
});

test('subscribe refuses contradictory options before connecting', () => {
  const url = 'ws://127.0.0.1:9/v1/ws';
  assert.throws(
    () => subscribe({ url, threadId: 't', afterSeq: 1, liveOnly: true, WebSocket }),
    RunstreamError,
  );
  assert.throws(() => subscribe({ url, threadId: 't', afterSeq: -1, WebSocket }), /afterSeq/);
  assert.throws(
    () => subscribe({ url, threadId: 't', view: 'chat', categories: ['message'], WebSocket }),
    /chat/,
  );
});

test('a throwing onEvent ends its subscription with callback_failed, not the process', async () => {
  // A stand-in server that sends one event frame to whatever subscribes.
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  await new Promise<void>((resolve) => wss.once('listening', () => resolve()));
  wss.on('connection', (ws) =>
    ws.once('message', () => ws.send(JSON.stringify({ type: 'event', id: 's1', event: event(1) }))),
  );
  const { port } = wss.address() as { port: number };
  const sub = subscribe({
    url: `ws://127.0.0.1:${port}/v1/ws`,
    threadId: 't',
    WebSocket,
    onEvent: () => {
      throw new Error('boom');
    },
  });
  const last = await sub.finished;
  assert.equal(last?.type, 'error');
  assert.equal(last?.type === 'error' && last.error.code, 'callback_failed');
  assert.throws(() => sub[Symbol.asyncIterator](), /cannot be iterated/);
  await new Promise<void>((resolve) => wss.close(() => resolve()));
});

test('with pingIntervalMs, a peer that stops answering pings is dropped and the subscription resumes', async () => {
  // A stand-in peer that never answers pings (a silent partition), and counts connections.
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1', autoPong: false });
  await new Promise<void>((resolve) => wss.once('listening', () => resolve()));
  const subscribes: unknown[] = [];
  wss.on('connection', (ws) =>
    ws.on('message', (data) => {
      const frame = JSON.parse(data.toString()) as { after_seq: number };
      subscribes.push(frame.after_seq);
      ws.send(JSON.stringify({ type: 'event', id: 's1', event: event(frame.after_seq + 1) }));
    }),
  );
  const { port } = wss.address() as { port: number };
  const sub = subscribe({
    url: `ws://127.0.0.1:${port}/v1/ws`,
    threadId: 't',
    WebSocket,
    pingIntervalMs: 20,
    backoff: { initialDelayMs: 1, maxDelayMs: 5 },
  });
  const seqs: number[] = [];
  for await (const item of sub) {
    if (item.type === 'event') seqs.push(item.event.seq);
    if (seqs.length === 3) break;
  }
  assert.deepEqual(seqs, [1, 2, 3]);
  assert.deepEqual(subscribes.slice(0, 3), [0, 1, 2]);
  for (const c of wss.clients) c.terminate();
  await new Promise<void>((resolve) => wss.close(() => resolve()));
});
