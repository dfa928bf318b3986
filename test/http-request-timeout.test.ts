// RS_HTTP_REQUEST_TIMEOUT_MS bounds how long a request may take to arrive: a client that
// trickles a body, or never finishes its headers, gets 408 and its connection closed when
// the limit passes, instead of holding a socket for Node's own 300 s. Only receiving the
// request counts: an SSE stream whose request arrived whole outlives the limit many times.
// Real broker, nats-server and Postgres; the limit is 1 s here.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { tokenEvent } from './helpers/events.js';
import { openRaw } from './helpers/raw-http.js';
import { SseClient } from './helpers/sse-client.js';
import { randomName, type Stack, startStack } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

const LIMIT_MS = 1_000;

let stack: Stack;
before(async () => {
  stack = await startStack({ httpRequestTimeoutMs: LIMIT_MS });
  await stack.client.publish([tokenEvent('rt-t', 0, { run_id: 'r' })], 'PERSISTED');
});
after(async () => {
  await stack[Symbol.asyncDispose]();
});

/** Writes `head` on a new connection and never sends more; what came back once the broker closed it. */
async function stalled(head: string): Promise<string> {
  const conn = await openRaw(stack.broker.httpPort);
  conn.sock.write(head);
  try {
    // Far past the limit: Node's own 300 s would leave it open.
    await waitFor(() => conn.isClosed(), {
      timeoutMs: 30_000,
      what: 'the broker to close the stalled request',
    });
  } finally {
    conn.sock.destroy();
  }
  return conn.received();
}

test('a cancel body that stops arriving midway gets 408 and its connection closed', async () => {
  const got = await stalled(
    'POST /v1/threads/rt-t/runs/r/cancel HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
      'Content-Length: 100\r\n\r\n{"reason":',
  );
  assert.match(got, /^HTTP\/1\.1 408 /);
  // Nothing was cancelled from the part that came.
  const res = await fetch(`${stack.httpUrl}/v1/threads/rt-t/runs/r`);
  assert.equal(res.status, 200);
  assert.notEqual(((await res.json()) as { status?: string }).status, 'cancelled');
});

test('a request head that never ends gets 408 and its connection closed', async () => {
  const got = await stalled('GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: a');
  assert.match(got, /^HTTP\/1\.1 408 /);
});

test('an SSE stream whose request arrived whole outlives the request timeout, and the port still serves', async () => {
  const t = randomName('rt-sse-');
  await stack.client.publish([tokenEvent(t, 1)], 'PERSISTED');
  const sse = await SseClient.open(`${stack.httpUrl}/v1/threads/${t}/stream`);
  try {
    await sse.waitFor((b) => b.event === 'live', 'the live marker');
    await sleep(3 * LIMIT_MS);
    await stack.client.publish([tokenEvent(t, 2)], 'PERSISTED');
    await sse.waitFor((b) => b.id === '2', 'the event published after three request timeouts');
  } finally {
    sse.close();
  }
  assert.equal((await fetch(`${stack.httpUrl}/healthz`)).status, 200);
});
