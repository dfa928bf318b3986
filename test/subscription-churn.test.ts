// Subscriptions never outlive their client: subscribe/unsubscribe back to back, and
// subscribe-then-disconnect, leave no NATS subscription behind however the timing falls
// (an unsubscribe that arrives while the subscription is still registering its feed).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { randomName, startStack } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

test('subscribe then unsubscribe back to back, or then close the socket, thousands of times: no feed is left', async () => {
  await using stack = await startStack();
  const threads = Array.from({ length: 40 }, () => randomName('t-'));
  const c = await stack.ws();
  const N = 3000;
  for (let i = 0; i < N; i++) {
    c.sendRaw({ type: 'subscribe', id: `s${i}`, thread_id: threads[i % threads.length] });
    c.sendRaw({ type: 'unsubscribe', id: `s${i}` });
  }
  await c.waitFor((f) => f.type === 'unsubscribed' && f.id === `s${N - 1}`, 60_000);
  assert.equal(c.frames.filter((f) => f.type === 'unsubscribed').length, N);

  // Sockets that close right after subscribing (a tab closed during the handshake).
  for (let round = 0; round < 10; round++) {
    const conns = await Promise.all(Array.from({ length: 20 }, () => stack.ws()));
    conns.forEach((conn, k) => {
      for (let j = 0; j < 5; j++) {
        conn.sendRaw({ type: 'subscribe', id: `c${j}`, thread_id: threads[(k + j) % threads.length] });
      }
      conn.ws.terminate();
    });
  }

  await waitFor(() => stack.broker.feedCount() === 0, {
    timeoutMs: 30_000,
    what: `no thread feed left (${stack.broker.feedCount()} remain)`,
  });
  // The node still serves: a new subscription registers and is then released.
  c.subscribe('last', threads[0] as string);
  await c.waitFor((f) => f.type === 'live' && f.id === 'last');
  assert.ok(stack.broker.feedCount() > 0);
  c.unsubscribe('last');
  await waitFor(() => stack.broker.feedCount() === 0, { what: 'the last feed released' });
});
