// WebSocket liveness and limits: max connections (1013 + an error frame), inbound frame size
// (1009), max subscriptions per connection (resource_exhausted), and ping/pong heartbeats
// that drop a peer that stops answering — which counts as a disconnect for on_disconnect.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import WebSocket from 'ws';
import { WsConnection } from '../src/client/ws-subscriber.js';
import { CLOSE_TRY_AGAIN_LATER } from '../src/fanout/ws/connection.js';
import { randomName, type Stack, startStack } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

const MAX_CONNECTIONS = 3;
const MAX_SUBSCRIPTIONS = 3;
const MAX_PAYLOAD_BYTES = 4096;
const PING_INTERVAL_MS = 200;

let stack: Stack;
let connStack: Stack;
before(async () => {
  [stack, connStack] = await Promise.all([
    startStack({
      wsMaxSubscriptions: MAX_SUBSCRIPTIONS,
      wsMaxPayloadBytes: MAX_PAYLOAD_BYTES,
      wsPingIntervalMs: PING_INTERVAL_MS,
    }),
    startStack({ wsMaxConnections: MAX_CONNECTIONS }),
  ]);
});
after(async () => {
  await Promise.all([stack[Symbol.asyncDispose](), connStack[Symbol.asyncDispose]()]);
});

test('past RS_WS_MAX_CONNECTIONS a new connection gets an error frame and close 1013; a freed slot is reusable', async () => {
  const held: WsConnection[] = [];
  for (let i = 0; i < MAX_CONNECTIONS; i++) held.push(await connStack.ws());
  // Each held connection is served (answers a frame).
  for (const c of held) {
    c.sendRaw({ type: 'unsubscribe', id: 'nothing' });
    const e = await c.waitFor((f) => f.type === 'error');
    assert.equal(e.type === 'error' && e.code, 'not_found');
  }

  const extra = await WsConnection.open(connStack.wsUrl);
  extra.sendRaw({ type: 'unsubscribe', id: 'nothing' });
  // Served, it would answer not_found; refused, it is closed first.
  const outcome = await Promise.race([
    extra.closed,
    extra
      .waitFor((f) => f.type === 'error' && f.code === 'not_found', 10_000)
      .then(
        () => 'served' as const,
        () => 'silent' as const,
      ),
  ]);
  assert.notEqual(outcome, 'served');
  const closed = await extra.closed;
  assert.equal(closed.code, CLOSE_TRY_AGAIN_LATER);
  const refusal = extra.frames[0];
  assert.equal(refusal?.type === 'error' && refusal.code, 'resource_exhausted');

  // Once one connection is gone, a new one is accepted (the server notices the close first).
  await (held.pop() as WsConnection).close();
  const again = await waitFor(
    async () => {
      const c = await WsConnection.open(connStack.wsUrl);
      c.sendRaw({ type: 'unsubscribe', id: 'nothing' });
      const f = await Promise.race([
        c.waitFor((x) => x.type === 'error', 10_000).catch(() => undefined),
        c.closed.then(() => undefined),
      ]);
      if (f?.type === 'error' && f.code === 'not_found') return c;
      await c.close();
      return undefined;
    },
    { what: 'a freed connection slot' },
  );
  await again.close();
  for (const c of held) await c.close();
});

test('an inbound frame over RS_WS_MAX_PAYLOAD_BYTES closes the connection with 1009', async () => {
  const c = await stack.ws();
  // Just under the limit is read (and refused as a frame, not as a size).
  c.sendRaw(JSON.stringify({ type: 'nope', pad: 'x'.repeat(MAX_PAYLOAD_BYTES - 100) }));
  const e = await c.waitFor((f) => f.type === 'error');
  assert.equal(e.type === 'error' && e.code, 'invalid_argument');
  c.sendRaw(JSON.stringify({ type: 'subscribe', pad: 'x'.repeat(MAX_PAYLOAD_BYTES) }));
  const closed = await c.closed;
  assert.equal(closed.code, 1009);
});

test('past RS_WS_MAX_SUBSCRIPTIONS a subscribe gets resource_exhausted; unsubscribing frees a slot', async () => {
  const t = randomName('t-');
  const c = await stack.ws();
  for (let i = 1; i <= MAX_SUBSCRIPTIONS; i++) c.subscribe(`s${i}`, t);
  for (let i = 1; i <= MAX_SUBSCRIPTIONS; i++) await c.waitFor((f) => f.type === 'live' && f.id === `s${i}`);
  c.subscribe('over', t);
  const e = await c.waitFor((f) => f.id === 'over');
  assert.equal(e.type === 'error' && e.code, 'resource_exhausted');
  assert.match(e.type === 'error' ? e.message : '', new RegExp(`at most ${MAX_SUBSCRIPTIONS}`));

  c.unsubscribe('s1');
  await c.waitFor((f) => f.type === 'unsubscribed' && f.id === 's1');
  c.subscribe('again', t);
  const live = await c.waitFor((f) => f.id === 'again');
  assert.equal(live.type, 'live');
  await c.close();
});

test('heartbeats: a peer that stops answering pings is terminated at the second ping tick, and that counts as a disconnect', async () => {
  const t = randomName('t-');
  const producer = stack.client.openStream();
  try {
    await producer.send(
      [
        {
          thread_id: t,
          run_id: 'r',
          event_id: 'e1',
          event_type: 'x',
          category: 'MESSAGE',
          content_json: '1',
        },
      ],
      'PERSISTED',
    );

    // A healthy client answers every ping and stays.
    const healthy = await stack.ws();
    let healthyPings = 0;
    healthy.ws.on('ping', () => healthyPings++);
    healthy.subscribe('h', t);

    // A dead one: answers pings (by hand) until it is subscribed with on_disconnect, then goes silent.
    const dead = new WebSocket(stack.wsUrl, { perMessageDeflate: false, autoPong: false });
    let silent = false;
    let deadPings = 0;
    dead.on('ping', (data) => {
      if (silent) deadPings++;
      else dead.pong(data);
    });
    const deadClosed = new Promise<number>((resolve) => dead.on('close', (code) => resolve(code)));
    await new Promise((resolve, reject) => {
      dead.once('open', resolve);
      dead.once('error', reject);
    });
    const deadLive = new Promise((resolve) =>
      dead.on('message', (d) => d.toString().includes('"live"') && resolve(d)),
    );
    dead.send(
      JSON.stringify({ type: 'subscribe', id: 'd', thread_id: t, run_id: 'r', on_disconnect: 'cancel' }),
    );
    await deadLive;
    silent = true;

    // Terminated (no close frame: 1006) at the tick after its first unanswered ping.
    assert.equal(await deadClosed, 1006);
    assert.ok(deadPings <= 2, `the dead peer saw ${deadPings} pings`);
    const control = await waitFor(() => producer.controls[0], { what: 'the on_disconnect cancel' });
    assert.equal(control.cancel?.run_id, 'r');
    assert.equal(control.cancel?.reason, 'subscriber disconnected');

    await waitFor(() => healthyPings >= 3, { what: 'three pings to the healthy client' });
    assert.equal(healthy.ws.readyState, WebSocket.OPEN);
    await producer.send([
      { thread_id: t, run_id: 'r', event_id: 'e2', event_type: 'x', category: 'MESSAGE', content_json: '2' },
    ]);
    await healthy.waitFor((f) => f.type === 'event' && f.event.event_id === 'e2');
    await healthy.close();
  } finally {
    producer.call.cancel();
  }
});
