// Fan-out memory stays bounded by subscribers that read slowly or never: live events a
// subscription holds while it catches up are capped (past the cap it reads them from
// Postgres instead, and still delivers every event once, in order), and a subscriber
// whose queued frames go unwritten for the stall time is cut off, its place freed.
// Real broker, nats-server and Postgres.
import assert from 'node:assert/strict';
import net, { type Socket } from 'node:net';
import { test } from 'node:test';
import v8 from 'node:v8';
import vm from 'node:vm';
import type { Event } from '../src/client/ingest-client.js';
import { CLOSE_SLOW_CONSUMER } from '../src/fanout/ws/connection.js';
import { randomName, type Stack, startStack } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

const BIG = 'x'.repeat(4000);

function events(t: string, from: number, n: number, pad: string): Event[] {
  return Array.from({ length: n }, (_, k) => ({
    thread_id: t,
    run_id: 'r',
    event_id: `e${from + k}`,
    event_type: 'ai_chunk',
    category: 'MESSAGE',
    content_json: JSON.stringify({ i: from + k, pad }),
  }));
}

/** ArrayBuffer memory after full collections (V8 frees their backing stores on a thread of its own, later). */
async function buffersAfterGc(gc: () => void): Promise<number> {
  for (let i = 0; i < 3; i++) {
    gc();
    await new Promise((r) => setTimeout(r, 100));
  }
  return process.memoryUsage().arrayBuffers;
}

/** Waits until `read` gives the same value twice, 500 ms apart. */
async function settled(read: () => number): Promise<void> {
  for (let last = read(); ; ) {
    await new Promise((r) => setTimeout(r, 500));
    const now = read();
    if (now === last) return;
    last = now;
  }
}

/** 5,000 events of 4 KB: more than the kernel's socket buffers take for a client that does not read. */
async function bigHistory(stack: Stack, t: string): Promise<number> {
  for (let i = 0; i < 5000; i += 500) await stack.client.publish(events(t, i, 500, BIG), 'PERSISTED');
  return 5000;
}

test('a subscriber catching up slowly on a busy thread holds at most its cap of live events, and gets every event once', async () => {
  const cap = 64 * 1024;
  await using stack = await startStack({ fanoutMaxHeldBytes: cap });
  const t = randomName('held-');
  let n = await bigHistory(stack, t);
  const slow = await stack.ws();
  const socket = (slow.ws as unknown as { _socket: Socket })._socket;
  socket.pause();
  slow.subscribe('s', t);
  // Its catch-up waits for the client: the broker's queue for it is backlogged.
  await waitFor(() => stack.broker.fanoutMemory().queuedBytes > 0, { what: 'a backlogged catch-up' });
  // Live events meanwhile, in small announcements: held until the cap, then dropped.
  let maxHeld = 0;
  for (let b = 0; b < 60; b++) {
    await stack.client.publish(events(t, n, 10, 'y'.repeat(100)), 'PERSISTED');
    n += 10;
    maxHeld = Math.max(maxHeld, stack.broker.fanoutMemory().heldBytes);
  }
  assert.ok(maxHeld > 0, 'live events were held while it caught up');
  assert.ok(maxHeld <= cap, `held ${maxHeld} bytes, cap ${cap}`);
  socket.resume();
  await slow.waitFor((f) => f.type === 'live' && f.id === 's', 120_000);
  await waitFor(() => slow.events('s').length >= n, { timeoutMs: 60_000, what: `${n} events` });
  assert.deepEqual(
    slow.events('s').map((e) => e.seq),
    Array.from({ length: n }, (_, i) => i + 1),
    'every event once, in order: what was dropped was read from the store',
  );
  assert.equal(stack.broker.fanoutMemory().heldBytes, 0);
});

test('live events held while a subscriber catches up keep alive about what the held cap counts', async (t) => {
  // A held event counted at its own size must not keep more alive: not its whole announcement,
  // nor the 8 KiB of Node's buffer pool its small copy shares with other threads' events.
  v8.setFlagsFromString('--expose_gc');
  const gc = vm.runInNewContext('gc') as () => void;
  await using stack = await startStack({ fanoutMaxHeldBytes: 8 * 1024 * 1024 });
  const held = randomName('heldmem-');
  const others = [randomName('other-'), randomName('other-')];
  await bigHistory(stack, held);
  const reader = await stack.ws();
  for (const o of others) reader.subscribe(o, o);
  await reader.waitFor((f) => f.type === 'live' && f.id === others[1]);
  const slow = await stack.ws();
  (slow.ws as unknown as { _socket: Socket })._socket.pause();
  slow.subscribe('s', held);
  await waitFor(() => stack.broker.fanoutMemory().queuedBytes > 0, { what: 'a backlogged catch-up' });
  await settled(() => stack.broker.fanoutMemory().queuedBytes);
  const before = await buffersAfterGc(gc);
  // A small event of the held thread between larger ones of two others, a request at a time:
  // each announcement alone, and each held copy in a pool slab of its own.
  const STEPS = 2000;
  const wide = 'w'.repeat(3000);
  for (let i = 0; i < STEPS; i++) {
    await stack.client.publish(
      [
        ...events(others[0] as string, i, 1, wide),
        ...events(held, 5000 + i, 1, 'h'),
        ...events(others[1] as string, i, 1, wide),
      ],
      'PERSISTED',
    );
  }
  await waitFor(() => reader.events(others[1] as string).length === STEPS, {
    what: 'the other threads live',
  });
  const counted = stack.broker.fanoutMemory().heldBytes;
  const grown = (await buffersAfterGc(gc)) - before;
  const what = `buffers grew ${(grown / 2 ** 20).toFixed(1)} MiB; held counted ${(counted / 2 ** 20).toFixed(1)} MiB`;
  t.diagnostic(what);
  assert.ok(counted > STEPS * 200, `${what}: the live events are held`);
  // Their own bytes: less than counted (each event ~250 bytes more); a view each: ~14 MiB.
  assert.ok(grown < 4 * counted, what);
  slow.ws.terminate();
});

test('a subscriber that stops reading is cut off after the stall time, however little it queued; its place is freed', async () => {
  await using stack = await startStack({ slowConsumerStallMs: 500, sseMaxStreams: 1 });
  const t = randomName('stall-');
  await bigHistory(stack, t);

  // WebSocket: its catch-up keeps its queue far under the queue limit, yet it is cut off.
  const ws = await stack.ws();
  const wsSocket = (ws.ws as unknown as { _socket: Socket })._socket;
  wsSocket.pause();
  ws.subscribe('s', t);
  await waitFor(() => stack.broker.fanoutMemory().queuedBytes > 0, { what: 'a backlogged catch-up' });
  assert.ok(stack.broker.fanoutMemory().queuedBytes < stack.config.wsMaxBufferedBytes);
  // Cut off while it still does not read: its subscription, and the thread's feed, go.
  await waitFor(() => stack.broker.feedCount() === 0, {
    timeoutMs: 30_000,
    what: 'the stalled subscription closed',
  });
  wsSocket.resume();
  const closed = await ws.closed;
  assert.equal(closed.code, CLOSE_SLOW_CONSUMER);
  const cut = ws.frames.find((f) => f.type === 'error' && f.code === 'slow_consumer');
  assert.ok(cut?.type === 'error');
  const got = ws.events('s').map((e) => e.seq);
  assert.equal(cut.cursors?.s, got.at(-1) ?? 0, 'it resumes after the last event it got');

  // SSE over a socket that never reads: the node's one stream is taken, then given back.
  const raw = net.connect(stack.broker.httpPort, '127.0.0.1');
  await new Promise((r) => raw.once('connect', r));
  raw.write(`GET /v1/threads/${t}/stream?after_seq=0 HTTP/1.1\r\nHost: x\r\n\r\n`);
  raw.pause();
  const url = `${stack.httpUrl}/v1/threads/${t}/stream?after_seq=4999`;
  await waitFor(
    async () => {
      const r = await fetch(url);
      await r.body?.cancel();
      return r.status === 429;
    },
    { what: 'the stream limit taken by the reader that never reads' },
  );
  const freed = await waitFor(
    async () => {
      const ac = new AbortController();
      const r = await fetch(url, { signal: ac.signal });
      if (r.status !== 200) {
        await r.body?.cancel();
        return false;
      }
      ac.abort();
      return true;
    },
    { timeoutMs: 30_000, what: 'the stalled stream let go' },
  );
  assert.equal(freed, true);
  raw.destroy();
});

test('a live event frame shared by many subscribers that do not read is one copy in memory, as the budget counts it', async (t) => {
  // The node's queue budget counts a shared frame once; the sockets must hold that one Buffer,
  // not a copy each (a copy per connection is memory no limit sees: many paused clients of a
  // busy thread would exhaust the process). More per connection than the kernel's socket
  // buffers take (~4 MiB here), so the rest waits in each socket's own buffer.
  v8.setFlagsFromString('--expose_gc');
  const gc = vm.runInNewContext('gc') as () => void;
  const PAUSED = 24;
  const EVENTS = 640; // of 32 KB: ~21 MB for each subscriber, in batches of 20
  const pad = 'y'.repeat(32 * 1024);
  await using stack = await startStack({ wsMaxBufferedBytes: 64 * 1024 * 1024 });
  const thread = randomName('shared-');
  const reader = await stack.ws();
  reader.subscribe('s', thread);
  await reader.waitFor((f) => f.type === 'live');
  const paused = [];
  for (let i = 0; i < PAUSED; i++) {
    const c = await stack.ws();
    c.subscribe('s', thread);
    await c.waitFor((f) => f.type === 'live');
    (c.ws as unknown as { _socket: Socket })._socket.pause();
    paused.push(c);
  }
  gc();
  const before = process.memoryUsage().arrayBuffers;
  for (let i = 0; i < EVENTS; i += 20) await stack.client.publish(events(thread, i, 20, pad), 'ACCEPTED');
  // The reader has every event: each announcement was handed to every subscriber's socket.
  await waitFor(() => reader.events('s').length === EVENTS, { timeoutMs: 60_000, what: 'every event live' });
  const queued = stack.broker.fanoutMemory().queuedBytes;
  gc();
  const grown = process.memoryUsage().arrayBuffers - before;
  const perSubscriber = EVENTS * pad.length;
  const what = `buffers grew ${(grown / 2 ** 20).toFixed(1)} MiB; the budget counts ${(queued / 2 ** 20).toFixed(1)} MiB queued`;
  assert.ok(queued > perSubscriber / 2, `${what}: the paused subscribers hold the events`);
  assert.ok(queued < 2 * perSubscriber, `${what}: counted once`);
  // One copy: ~20 MiB (and what the process holds besides: 19-41 in all); a copy each: ~410.
  assert.ok(grown < 6 * perSubscriber, what);
  t.diagnostic(what);
  for (const c of paused) c.ws.terminate();
});
