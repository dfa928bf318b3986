// SSE on a fan-out node of its own (same NATS and Postgres as the stack's broker): a
// client that goes away frees its subscription, a client that stops reading is cut off
// with the seq to resume from, and tokens guard the stream and end it when they expire.
import assert from 'node:assert/strict';
import { createSecretKey } from 'node:crypto';
import { after, before, test } from 'node:test';
import { SignJWT } from 'jose';
import { JwtAuthenticator } from '../src/auth/jwt.js';
import { tokenEvent } from './helpers/events.js';
import { waitFor } from './helpers/index.js';
import { type SseBlock, SseClient } from './helpers/sse-client.js';
import { startSseNode } from './helpers/sse-node.js';
import { randomName, type Stack, startStack } from './helpers/stack.js';

let stack: Stack;
before(async () => {
  stack = await startStack();
});
after(async () => {
  await stack[Symbol.asyncDispose]();
});

const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, k) => from + k);
const storedEvents = (c: SseClient) =>
  c.events.filter((b) => !('type' in (JSON.parse(b.data as string) as object)));
const seqsOf = (blocks: SseBlock[]) => blocks.map((b) => Number(b.id));

test('a client that disconnects frees its subscription and the thread feed', async () => {
  await using node = await startSseNode(stack);
  const t = randomName('t-');
  await stack.client.publish([tokenEvent(t, 1)], 'PERSISTED');
  const c = await SseClient.open(`${node.url}/v1/threads/${t}/stream`);
  await c.waitFor((b) => b.event === 'live');
  const other = await SseClient.open(`${node.url}/v1/threads/${t}/stream?live_only=true`);
  await other.waitFor((b) => b.event === 'live');
  assert.equal(node.sse.streamCount, 2);
  assert.equal(node.feeds.size, 1);

  c.close();
  await waitFor(() => node.sse.streamCount === 1, { what: 'the first stream to close' });
  assert.equal(node.feeds.size, 1, 'the other stream still listens to the thread');
  other.close();
  await waitFor(() => node.sse.streamCount === 0 && node.feeds.size === 0, {
    what: 'the last stream and the thread feed to close',
  });
});

test('past its stream limit a node refuses a new stream with 429, and takes one again once a stream ends', async () => {
  await using node = await startSseNode(stack, { maxStreams: 1 });
  const t = randomName('t-');
  const first = await SseClient.open(`${node.url}/v1/threads/${t}/stream`);
  await first.waitFor((b) => b.event === 'live');
  for (const path of [`/v1/threads/${t}/stream`, `/threads/${t}/runs/r1/stream`]) {
    const refused = await SseClient.open(`${node.url}${path}`);
    await refused.ended;
    assert.equal(refused.status, 429, path);
    assert.equal((JSON.parse(refused.body) as { error: { code: string } }).error.code, 'resource_exhausted');
  }
  first.close();
  await waitFor(() => node.sse.streamCount === 0, { what: 'the first stream to close' });
  const next = await SseClient.open(`${node.url}/v1/threads/${t}/stream`);
  assert.equal(next.status, 200);
  next.close();
});

test('a client that stops reading is cut off with an error naming the last seq, and resumes from it losing nothing', async () => {
  const maxBufferedBytes = 256 * 1024;
  await using node = await startSseNode(stack, { maxBufferedBytes });
  const t = randomName('t-');
  const N = 4000;
  const slow = await SseClient.open(`${node.url}/v1/threads/${t}/stream`);
  await slow.waitFor((b) => b.event === 'live');
  // Stop reading: the kernel buffers fill, then the response's own queue.
  slow.res.pause();
  slow.res.socket.pause();
  const pad = 'x'.repeat(2000);
  const published = (async () => {
    for (let i = 0; i < N; i += 500) {
      await stack.client.publish(
        range(i + 1, i + 500).map((k) => tokenEvent(t, k, { content_json: JSON.stringify({ i: k, pad }) })),
        'PERSISTED',
      );
    }
  })();
  await waitFor(() => node.sse.streamCount === 0, {
    what: 'the slow stream to be cut off',
    timeoutMs: 60_000,
  });
  // Read again at once: the cut-off response's last bytes wait for the client only so long.
  slow.res.socket.resume();
  slow.res.resume();
  await slow.ended;
  await published;

  const cut = slow.blocks.at(-1) as SseBlock;
  assert.equal(cut.event, 'error');
  const data = JSON.parse(cut.data as string) as { type: string; code: string; seq: number; message: string };
  assert.equal(data.type, 'error');
  assert.equal(data.code, 'slow_consumer');
  const received = seqsOf(storedEvents(slow));
  assert.ok(received.length < N, `cut off before the end (got ${received.length})`);
  // The seq named is exactly what the client got, and it is the frame's id too.
  assert.equal(data.seq, received.at(-1) ?? 0);
  assert.equal(cut.id, String(data.seq));
  assert.match(data.message, new RegExp(`Last-Event-ID ${data.seq}`));
  assert.deepEqual(received, range(1, received.length));

  const again = await SseClient.open(`${node.url}/v1/threads/${t}/stream`, {
    'last-event-id': slow.lastEventId,
  });
  await again.waitFor((b) => b.event === 'live');
  assert.deepEqual([...received, ...seqsOf(storedEvents(again))], range(1, N));
  again.close();
});

const SECRET = 'sse-test-secret-that-is-long-enough-for-hs256!!';
const auth = new JwtAuthenticator({
  jwtSecret: SECRET,
  jwtPublicKey: undefined,
  jwtJwksFile: undefined,
  jwtIssuer: [],
  jwtAudience: [],
  jwtClockToleranceMs: 0,
});
function token(claims: Record<string, unknown>, expiresAt: Date | string = '1h'): Promise<string> {
  return new SignJWT({ scope: 'read', ...claims })
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject('tester')
    .setExpirationTime(expiresAt)
    .sign(createSecretKey(Buffer.from(SECRET)));
}

test('a token is required (401), must cover the thread (403), and may come as access_token for browsers', async () => {
  await using node = await startSseNode(stack, { auth });
  const a = randomName('ta-');
  const b = randomName('tb-');
  await stack.client.publish([tokenEvent(a, 1), tokenEvent(b, 1)], 'PERSISTED');
  const forA = await token({ threads: [a] });
  const streamUrl = (t: string, q = '') => `${node.url}/v1/threads/${t}/stream${q}`;

  const anonymous = await SseClient.open(streamUrl(a));
  await anonymous.ended;
  assert.equal(anonymous.status, 401);
  assert.equal(anonymous.headers['www-authenticate'], 'Bearer realm="runstream"');
  assert.equal((JSON.parse(anonymous.body) as { error: { code: string } }).error.code, 'unauthenticated');

  const forged = await SseClient.open(streamUrl(a), { authorization: `Bearer ${forA.slice(0, -2)}xx` });
  await forged.ended;
  assert.equal(forged.status, 401);

  const otherThread = await SseClient.open(streamUrl(b), { authorization: `Bearer ${forA}` });
  await otherThread.ended;
  assert.equal(otherThread.status, 403);
  assert.equal((JSON.parse(otherThread.body) as { error: { code: string } }).error.code, 'permission_denied');
  // ... on the LangGraph join too, with the SDK's x-api-key header.
  const join = await SseClient.open(`${node.url}/threads/${b}/runs/run-1/stream`, { 'x-api-key': forA });
  await join.ended;
  assert.equal(join.status, 403);

  const ok = await SseClient.open(streamUrl(a), { authorization: `Bearer ${forA}` });
  assert.equal(ok.status, 200);
  await ok.waitFor((x) => x.event === 'live');
  assert.deepEqual(seqsOf(storedEvents(ok)), [1]);
  ok.close();
  const browser = await SseClient.open(streamUrl(a, `?access_token=${forA}`));
  assert.equal(browser.status, 200);
  await browser.waitFor((x) => x.event === 'live');
  browser.close();
  const joinOk = await SseClient.open(`${node.url}/threads/${a}/runs/run-1/stream`, { 'x-api-key': forA });
  assert.equal(joinOk.status, 200);
  joinOk.close();
});

test('a user-scoped token streams only its user’s events, and its cursor still covers the others', async () => {
  await using node = await startSseNode(stack, { auth });
  const t = randomName('t-');
  await stack.client.publish(
    range(1, 6).map((i) => tokenEvent(t, i, { user_id: i % 2 === 0 ? 'alice' : 'bob' })),
    'PERSISTED',
  );
  const alice = await token({ threads: [t], user_id: 'alice' });
  const c = await SseClient.open(`${node.url}/v1/threads/${t}/stream`, { authorization: `Bearer ${alice}` });
  const live = await c.waitFor((b) => b.event === 'live');
  assert.equal(live.id, '6');
  assert.deepEqual(seqsOf(storedEvents(c)), [2, 4, 6]);
  c.close();
});

test('the stream ends with a token_expired error naming the seq when the token expires', async () => {
  await using node = await startSseNode(stack, { auth });
  const t = randomName('t-');
  await stack.client.publish([tokenEvent(t, 1), tokenEvent(t, 2)], 'PERSISTED');
  const shortLived = await token({ threads: [t] }, new Date(Date.now() + 2_000));
  const c = await SseClient.open(`${node.url}/v1/threads/${t}/stream`, {
    authorization: `Bearer ${shortLived}`,
  });
  assert.equal(c.status, 200);
  await c.waitFor((b) => b.event === 'live');
  await c.ended;
  assert.ok(c.res.complete, 'the server ended the response');
  const last = c.blocks.at(-1) as SseBlock;
  assert.equal(last.event, 'error');
  assert.equal(last.id, '2');
  const data = JSON.parse(last.data as string) as { code: string; seq: number };
  assert.equal(data.code, 'token_expired');
  assert.equal(data.seq, 2);
  assert.equal(node.sse.streamCount, 0);

  // Reconnecting with the expired token is refused before streaming.
  const again = await SseClient.open(`${node.url}/v1/threads/${t}/stream`, {
    authorization: `Bearer ${shortLived}`,
    'last-event-id': '2',
  });
  await again.ended;
  assert.equal(again.status, 401);
});
