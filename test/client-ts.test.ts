// The TypeScript client package (clients/typescript, `@runstream/client`) against the real
// broker: the subscriber resumes by itself from its cursor — across a broker kill -9 and
// restart, and across dropped sockets with a filter — and ends with exactly the events, no
// duplicate, no gap; run end, deletion and refusals come back as typed items; the History client
// and the views agree with History; the publisher batches, retries with stable ids, and hands
// back cancel controls.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import {
  HistoryClient,
  type Subscription,
  type SubscriptionItem,
  subscribe,
  ThreadView,
  type WireEvent,
} from '@runstream/client';
import { type PublishEvent, Publisher } from '@runstream/client/node';
import { SignJWT } from 'jose';
import WebSocket from 'ws';
import { freePort } from './helpers/proc.js';
import { chunk } from './helpers/publish-events.js';
import {
  brokerConfig,
  randomName,
  spawnBroker,
  startServers,
  startStack,
  threadRows,
} from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

const FAST = { initialDelayMs: 20, maxDelayMs: 300 };
const WAIT = { timeoutMs: 60_000 };

/** Collects every item of a subscription in the background. */
function collect(sub: Subscription): {
  items: SubscriptionItem[];
  events: () => WireEvent[];
  done: Promise<void>;
} {
  const items: SubscriptionItem[] = [];
  const done = (async () => {
    for await (const item of sub) items.push(item);
  })();
  return {
    items,
    events: () => items.flatMap((i) => (i.type === 'event' ? [i.event] : [])),
    done,
  };
}

/** A `ws` WebSocket whose live instances a test can cut, and whose subscribe frames it can read. */
function droppableWebSocket(): {
  ctor: typeof WebSocket;
  sockets: WebSocket[];
  subscribes: Record<string, unknown>[];
} {
  const sockets: WebSocket[] = [];
  const subscribes: Record<string, unknown>[] = [];
  class Droppable extends WebSocket {
    constructor(url: string) {
      super(url);
      sockets.push(this);
    }
    override send(data: string): void {
      subscribes.push(JSON.parse(data) as Record<string, unknown>);
      super.send(data);
    }
  }
  return { ctor: Droppable as unknown as typeof WebSocket, sockets, subscribes };
}

test('the subscriber resumes across a broker kill -9 and restart: exactly 1..N, no duplicate, no gap', async () => {
  await using servers = await startServers();
  const [grpcPort, httpPort] = [await freePort(), await freePort()];
  const config = brokerConfig(servers, { grpcPort, httpPort });
  let broker = await spawnBroker(config);
  const thread = randomName('tsc-');
  const N = 300;

  await using pub = new Publisher({
    target: `127.0.0.1:${grpcPort}`,
    lingerMs: 2,
    maxBatchEvents: 25,
    retry: { ...FAST, maxAttempts: 10_000 },
    deadlineMs: 5_000,
  });
  await pub.publishMany(Array.from({ length: N / 2 }, (_, i) => chunk(thread, i + 1)));
  // A streaming publisher on another thread goes through the same outage on its PublishStream.
  const streamThread = randomName('tss-');
  await using streaming = new Publisher({
    target: `127.0.0.1:${grpcPort}`,
    mode: 'stream',
    ack: 'PERSISTED',
    lingerMs: 2,
    maxBatchEvents: 25,
    retry: { ...FAST, maxAttempts: 10_000 },
    deadlineMs: 5_000,
  });
  await streaming.publishMany(Array.from({ length: N / 2 }, (_, i) => chunk(streamThread, i + 1)));

  const sub = subscribe({
    url: `ws://127.0.0.1:${httpPort}/v1/ws`,
    threadId: thread,
    WebSocket,
    backoff: FAST,
  });
  const got = collect(sub);
  await waitFor(() => got.events().length >= N / 2, { ...WAIT, what: 'the first half' });

  await broker.kill();
  // Published while the broker is down: the publisher retries, same ids, until it is back.
  const second = pub.publishMany(Array.from({ length: N / 2 }, (_, i) => chunk(thread, N / 2 + i + 1)));
  const streamed = streaming.publishMany(
    Array.from({ length: N / 2 }, (_, i) => chunk(streamThread, N / 2 + i + 1)),
  );
  await waitFor(() => got.items.some((i) => i.type === 'reconnecting'), { ...WAIT, what: 'a reconnect' });
  broker = await spawnBroker(config);
  try {
    await second;
    const streamAcks = await streamed;
    assert.deepEqual(
      streamAcks.map((a) => a.seq),
      Array.from({ length: N / 2 }, (_, i) => N / 2 + i + 1),
    );
    assert.deepEqual(
      (await threadRows(servers.db, streamThread)).map((r) => r.event_id),
      Array.from({ length: N }, (_, i) => `e${i + 1}`),
    );
    await waitFor(() => got.events().length >= N, { ...WAIT, what: 'all events' });
    sub.close();
    await got.done;

    const seqs = got.events().map((e) => e.seq);
    assert.deepEqual(
      seqs,
      Array.from({ length: N }, (_, i) => i + 1),
    );
    assert.deepEqual(
      got.events().map((e) => e.event_id),
      Array.from({ length: N }, (_, i) => `e${i + 1}`),
    );
    assert.equal((await threadRows(servers.db, thread)).length, N);
    assert.ok(got.items.filter((i) => i.type === 'live').length >= 2, 'live again after the reconnect');
  } finally {
    await broker.stop();
  }
});

test('a filtered subscriber resumes after dropped sockets from its cursor: the matching events once, nothing skipped replayed', async () => {
  await using stack = await startStack();
  const thread = randomName('tsf-');
  await using pub = new Publisher({ target: stack.grpcTarget, lingerMs: 1 });
  const cat = (i: number) => (i % 3 === 0 ? 'message' : 'trace') as 'message' | 'trace';
  const publishRange = (from: number, to: number) =>
    pub.publishMany(
      Array.from({ length: to - from + 1 }, (_, k) =>
        chunk(thread, from + k, {
          category: cat(from + k),
          eventType: cat(from + k) === 'message' ? 'ai_chunk' : 'llm_start',
        }),
      ),
    );
  const ws = droppableWebSocket();
  const sub = subscribe({
    url: stack.wsUrl,
    threadId: thread,
    categories: ['message'],
    WebSocket: ws.ctor,
    backoff: FAST,
  });
  const got = collect(sub);

  await publishRange(1, 60);
  await waitFor(() => got.events().length >= 20, { ...WAIT, what: 'the first message events' });
  ws.sockets.at(-1)?.terminate();
  await publishRange(61, 120);
  await waitFor(() => ws.sockets.length >= 2 && got.events().length >= 30, {
    ...WAIT,
    what: 'a resubscribe',
  });
  ws.sockets.at(-1)?.terminate();
  await publishRange(121, 180);
  await waitFor(() => got.events().length >= 60, { ...WAIT, what: 'every message event' });
  // Trace events after the last message event move the cursor past it: `live` says where it is.
  await waitFor(() => sub.cursor === 180, { ...WAIT, what: 'the cursor at the head' });
  sub.close();
  await got.done;

  const expected = Array.from({ length: 180 }, (_, i) => i + 1).filter((i) => cat(i) === 'message');
  assert.deepEqual(
    got.events().map((e) => e.seq),
    expected,
  );
  assert.ok(got.events().every((e) => e.category === 'message'));
  // Every resubscribe kept the filter and started at the cursor, never below the last delivery.
  assert.ok(ws.subscribes.length >= 3);
  let delivered = 0;
  for (const frame of ws.subscribes) {
    assert.deepEqual(frame.categories, ['message']);
    assert.equal(typeof frame.after_seq, 'number');
    assert.ok((frame.after_seq as number) >= delivered);
    delivered = Math.max(
      delivered,
      ...got
        .events()
        .map((e) => e.seq)
        .filter((s) => s <= (frame.after_seq as number)),
    );
  }
});

test('run end, deletion and refusals come back as typed items and end the iteration', async () => {
  await using stack = await startStack();
  const thread = randomName('tse-');
  const history = new HistoryClient({ url: stack.httpUrl });
  await using pub = new Publisher({ target: stack.grpcTarget, ack: 'PERSISTED' });
  await pub.publishMany([
    {
      threadId: thread,
      runId: 'r1',
      eventId: 'a1',
      eventType: 'run_start',
      category: 'lifecycle',
      content: {},
    },
    chunk(thread, 2, { runId: 'r1' }),
    {
      threadId: thread,
      runId: 'r1',
      eventId: 'a3',
      eventType: 'run_end',
      category: 'lifecycle',
      content: { status: 'failed' },
    },
  ]);

  const run = collect(subscribe({ url: stack.wsUrl, threadId: thread, runId: 'r1', WebSocket }));
  await run.done;
  assert.deepEqual(
    run.items.map((i) => i.type),
    ['event', 'event', 'event', 'end'],
  );
  assert.deepEqual(run.items.at(-1), { type: 'end', runId: 'r1', seq: 3, status: 'error' });

  const ahead = collect(subscribe({ url: stack.wsUrl, threadId: thread, afterSeq: 99, WebSocket }));
  await ahead.done;
  const last = ahead.items.at(-1);
  assert.equal(last?.type, 'error');
  assert.equal(last?.type === 'error' && last.error.code, 'cursor_ahead');
  assert.equal(last?.type === 'error' && last.retrying, false);

  const whole = subscribe({ url: stack.wsUrl, threadId: thread, WebSocket });
  const all = collect(whole);
  await waitFor(() => all.items.some((i) => i.type === 'live'), WAIT);
  const deleted = await history.deleteThread(thread);
  assert.equal(deleted.deleted_events, 3);
  await all.done;
  assert.deepEqual(all.items.at(-1), { type: 'deleted', threadId: thread });
  assert.equal(await whole.finished.then((i) => i?.type), 'deleted');
});

test('a subscriber with getToken reconnects with a fresh token after 4001 and loses nothing', async () => {
  const secret = 'a-test-secret-that-is-at-least-32-bytes-long!';
  await using stack = await startStack({ jwtSecret: secret, jwtClockToleranceMs: 0 });
  const thread = randomName('tst-');
  const mint = (expSec: number) =>
    new SignJWT({ threads: '*', scope: 'read publish' })
      .setProtectedHeader({ alg: 'HS256' })
      .setExpirationTime(Math.floor(Date.now() / 1000) + expSec)
      .sign(new TextEncoder().encode(secret));
  const publishToken = await mint(600);
  await using pub = new Publisher({ target: stack.grpcTarget, token: publishToken });
  await pub.publishMany(Array.from({ length: 10 }, (_, i) => chunk(thread, i + 1)));

  let tokens = 0;
  // The first token expires within a second or two; every later one lasts.
  const sub = subscribe({
    url: stack.wsUrl,
    threadId: thread,
    WebSocket,
    backoff: FAST,
    getToken: () => mint(tokens++ === 0 ? 2 : 600),
  });
  const got = collect(sub);
  await waitFor(() => got.items.some((i) => i.type === 'reconnecting'), {
    ...WAIT,
    what: 'the 4001 reconnect',
  });
  await pub.publishMany(Array.from({ length: 10 }, (_, i) => chunk(thread, 11 + i)));
  await waitFor(() => got.events().length >= 20, { ...WAIT, what: 'every event' });
  sub.close();
  await got.done;
  assert.deepEqual(
    got.events().map((e) => e.seq),
    Array.from({ length: 20 }, (_, i) => i + 1),
  );
  assert.ok(tokens >= 2);
  assert.ok(!got.items.some((i) => i.type === 'error' && !i.retrying));
});

test('History client pages and counts as History does; ThreadView follows events and the chat view', async () => {
  await using stack = await startStack();
  const thread = randomName('tsh-');
  const history = new HistoryClient({ url: stack.httpUrl });
  await using pub = new Publisher({ target: stack.grpcTarget, ack: 'PERSISTED' });
  const chat = (i: number, eventType: string, content: unknown, id: string, category = 'message' as const) =>
    ({
      threadId: thread,
      runId: 'r1',
      eventId: `c${i}`,
      eventType,
      category,
      content,
      metadata: { id },
    }) satisfies PublishEvent;
  await pub.publishMany([
    chat(1, 'human_message', { content: 'hi' }, 'h1'),
    chat(2, 'ai_chunk', { content: 'hel' }, 'a1'),
    chat(3, 'ai_chunk', { content: 'lo' }, 'a1'),
  ]);
  const page = await history.listEvents(thread, { limit: 2 });
  assert.deepEqual(
    page.events.map((e) => e.seq),
    [1, 2],
  );
  assert.equal(page.has_more, true);
  const all: number[] = [];
  for await (const e of history.events(thread, { limit: 1 })) all.push(e.seq);
  assert.deepEqual(all, [1, 2, 3]);
  assert.equal(await history.countMessages(thread), 3);
  assert.equal((await history.getRun(thread, 'r1')).status, 'running');
  await assert.rejects(history.listEvents(thread, { limit: 5000 }), (e: Error & { code?: string }) => {
    return e.code === 'invalid_argument' && /limit/.test(e.message);
  });

  // A chat view started from History at seq 2, followed live, equals History's chat view.
  const at2 = await history.listChatMessages(thread, { limit: 1 });
  const view = new ThreadView({ messages: at2.messages, cursor: at2.next_after_seq ?? 0 });
  const events = new ThreadView();
  const s1 = view.follow({ url: stack.wsUrl, threadId: thread, view: 'chat', WebSocket });
  const s2 = events.follow({ url: stack.wsUrl, threadId: thread, WebSocket });
  await pub.publishMany([
    chat(4, 'ai_chunk', { content: '!' }, 'a1'),
    chat(5, 'human_message', { content: 'bye' }, 'h2'),
  ]);
  await waitFor(() => view.cursor >= 5 && events.cursor >= 5 && view.live && events.live, WAIT);
  s1.close();
  s2.close();
  const full = await history.listChatMessages(thread);
  assert.deepEqual(view.messages, full.messages);
  assert.deepEqual(
    events.events.map((e) => e.event_id),
    ['c1', 'c2', 'c3', 'c4', 'c5'],
  );
});

test('the publisher batches per thread, retries with stable ids, and streams with cancel controls', async () => {
  await using stack = await startStack();
  const thread = randomName('tsp-');
  const history = new HistoryClient({ url: stack.httpUrl });

  // Events handed over in one tick go as one request per maxBatchEvents: one log message each.
  await using batched = new Publisher({ target: stack.grpcTarget, maxBatchEvents: 10, lingerMs: 50 });
  const acks = await batched.publishMany(Array.from({ length: 50 }, (_, i) => chunk(thread, i + 1)));
  assert.equal(new Set(acks.map((a) => a.offset)).size, 5);
  assert.deepEqual(
    acks.map((a) => a.eventId),
    Array.from({ length: 50 }, (_, i) => `e${i + 1}`),
  );

  // Generated ids are fixed before the first send; a resend of the same events is a duplicate.
  await using persisted = new Publisher({ target: stack.grpcTarget, ack: 'PERSISTED', idPrefix: 'gen' });
  const fresh = await persisted.publishMany(
    Array.from({ length: 5 }, () => ({ ...chunk(thread, 0), eventId: undefined })),
  );
  assert.deepEqual(
    fresh.map((a) => [a.eventId, a.seq, a.duplicate]),
    Array.from({ length: 5 }, (_, i) => [`gen-${i + 1}`, 51 + i, false]),
  );
  const again = await persisted.publishMany(Array.from({ length: 50 }, (_, i) => chunk(thread, i + 1)));
  assert.ok(again.every((a, i) => a.duplicate && a.seq === i + 1));
  assert.equal((await threadRows(stack.db, thread)).length, 55);

  // Backpressure: ready() resolves once the queue is below its limit.
  await using small = new Publisher({ target: stack.grpcTarget, maxQueuedEvents: 3, lingerMs: 1 });
  const pending = [1, 2, 3].map((i) => small.publish(chunk(thread, 100 + i)));
  assert.equal(small.queued, 3);
  await small.ready();
  assert.ok(small.queued < 3);
  await Promise.all(pending);

  // Streaming mode: a cancel request reaches onCancel, and acks still match their events.
  const cancels: string[] = [];
  await using streaming = new Publisher({ target: stack.grpcTarget, mode: 'stream', ack: 'PERSISTED' });
  streaming.onCancel(thread, 'run-s', (c) => cancels.push(c.reason));
  const start = await streaming.publish({
    threadId: thread,
    runId: 'run-s',
    eventId: 's1',
    eventType: 'run_start',
    category: 'lifecycle',
    content: {},
  });
  assert.equal(start.seq, 59);
  await history.cancelRun(thread, 'run-s', 'user pressed stop');
  await waitFor(() => cancels.length > 0, WAIT);
  assert.deepEqual(cancels, ['user pressed stop']);
  const end = await streaming.publish({
    threadId: thread,
    runId: 'run-s',
    eventId: 's2',
    eventType: 'run_end',
    category: 'lifecycle',
    content: { status: 'cancelled' },
  });
  assert.equal(end.seq, 61, 'after the stored cancel_requested event');
  assert.equal((await history.getRun(thread, 'run-s')).status, 'cancelled');

  // A refusal rejects that batch, naming the field, and stores nothing.
  await assert.rejects(
    batched.publish({ ...chunk(thread, 999), contentJson: '{nope' }),
    (e: Error & { code?: string }) => e.code === 'invalid_argument' && /content_json/.test(e.message),
  );
  assert.equal((await threadRows(stack.db, thread)).length, 61);
});

test('with lingerMs 0 the events of an idle thread handed over in one tick leave at once, and those that come while they are out go together after them', async () => {
  await using stack = await startStack();
  const thread = randomName('tsl-');
  // Events per request, in the order the requests leave the client.
  const requests: number[] = [];
  const counting: grpc.Interceptor = (options, next) =>
    new grpc.InterceptingCall(next(options), {
      sendMessage: (message, nextSend) => {
        requests.push((message as { events: unknown[] }).events.length);
        nextSend(message);
      },
    });
  await using pub = new Publisher({
    target: stack.grpcTarget,
    mode: 'stream',
    lingerMs: 0,
    channelOptions: { interceptors: [counting] },
  });
  await pub.publish(chunk(thread, 1)); // the stream is open from here on
  assert.deepEqual(requests, [1]);

  // Handed over in one tick: one request, out once the tick's microtasks ran (no timer has).
  const tick = [2, 3].map((i) => pub.publish(chunk(thread, i)));
  assert.deepEqual(requests, [1]);
  await Promise.resolve();
  assert.deepEqual(requests, [1, 2]);
  const rest = [4, 5, 6].map((i) => pub.publish(chunk(thread, i)));
  await Promise.resolve();
  assert.deepEqual(requests, [1, 2], 'the thread has a request out: the next ones wait for its answer');
  await Promise.all([...tick, ...rest]);
  assert.deepEqual(requests, [1, 2, 3]);
  await waitFor(async () => (await threadRows(stack.db, thread)).length === 6, WAIT);
  assert.deepEqual(
    (await threadRows(stack.db, thread)).map((r) => r.event_id),
    ['e1', 'e2', 'e3', 'e4', 'e5', 'e6'],
  );
});

test('flush() waits for what was handed over before it, not for events published after it', async () => {
  await using stack = await startStack();
  const thread = randomName('tsf-');
  // A long linger: an event handed over after the flush waits well past the flushed one's ack.
  await using pub = new Publisher({ target: stack.grpcTarget, lingerMs: 5_000 });
  const before = pub.publish(chunk(thread, 1));
  const flushed = pub.flush();
  const after = pub.publish(chunk(`${thread}-b`, 2));
  const first = await Promise.race([flushed.then(() => 'flush'), after.then(() => 'after')]);
  assert.equal(first, 'flush', 'flush() waited for an event published after it');
  assert.equal((await before).eventId, 'e1');
  assert.equal(pub.queued, 1, 'the later event still lingers');
  await pub.flush();
  assert.equal((await after).eventId, 'e2');
  assert.equal(pub.queued, 0);

  // Two closes at once: the second waits for the first's flush too.
  const lingering = [3, 4].map((i) => pub.publish(chunk(thread, i)));
  const closing = pub.close();
  await pub.close();
  assert.equal(pub.queued, 0, 'the second close() returned before the events were answered');
  await Promise.all([closing, ...lingering]);
});

test('onRetry hears every retry in unary mode as in streaming mode; many threads retrying at once raise no listener warning', async () => {
  const target = `127.0.0.1:${await freePort()}`; // nothing listens there
  const warnings: string[] = [];
  const onWarning = (w: Error) => warnings.push(w.name);
  process.on('warning', onWarning);
  const many = new Publisher({ target, retry: { initialDelayMs: 200, maxDelayMs: 200, maxAttempts: 2 } });
  await Promise.allSettled(Array.from({ length: 20 }, (_, i) => many.publish(chunk(`t-many-${i}`, 1))));
  many.abort();
  await new Promise((r) => setImmediate(r));
  process.off('warning', onWarning);
  assert.deepEqual(warnings, [], 'twenty threads backing off at once');
  for (const mode of ['unary', 'stream'] as const) {
    const attempts: number[] = [];
    const pub = new Publisher({
      target,
      mode,
      retry: { initialDelayMs: 1, maxDelayMs: 5, maxAttempts: 3 },
      onRetry: (err, attempt) => {
        assert.equal(err.code, 'unavailable');
        attempts.push(attempt);
      },
    });
    await assert.rejects(
      pub.publish(chunk('t-retry', 1)),
      (e: Error & { code?: string }) => e.code === 'unavailable',
    );
    assert.deepEqual(attempts, [1, 2], mode);
    pub.abort();
  }
});

test('a refused event fails alone: the events handed over with it are stored, in order, in both modes', async () => {
  await using stack = await startStack();
  for (const mode of ['unary', 'stream'] as const) {
    const thread = randomName(`tsr-${mode}-`);
    await using pub = new Publisher({ target: stack.grpcTarget, mode, lingerMs: 0 });
    // One tick: one request of five, two of them refused by the broker.
    const results = await Promise.allSettled([
      pub.publish(chunk(thread, 1)),
      pub.publish({ ...chunk(thread, 2), contentJson: '{nope' }),
      pub.publish(chunk(thread, 3)),
      pub.publish({ ...chunk(thread, 4), eventType: 'bad type' }),
      pub.publish(chunk(thread, 5)),
    ]);
    assert.deepEqual(
      results.map((r) =>
        r.status === 'fulfilled' ? r.value.eventId : (r.reason as Error).message.split(':')[0],
      ),
      ['e1', 'content_json', 'e3', 'event_type', 'e5'],
      mode,
    );
    assert.ok(
      results.every(
        (r) => r.status === 'fulfilled' || (r.reason as { code?: string }).code === 'invalid_argument',
      ),
    );
    await waitFor(async () => (await threadRows(stack.db, thread)).length === 3, WAIT);
    assert.deepEqual(
      (await threadRows(stack.db, thread)).map((r) => [r.event_id, r.seq]),
      [
        ['e1', 1],
        ['e3', 2],
        ['e5', 3],
      ],
    );
  }
});

test('an event no request can carry is refused, never retried: by the publisher, or by gRPC when its limit is set higher', async () => {
  await using stack = await startStack();
  const huge = JSON.stringify('x'.repeat(17 * 1024 * 1024)); // over the broker's 16 MiB requests
  for (const mode of ['unary', 'stream'] as const) {
    const thread = randomName(`tso-${mode}-`);
    const retries: string[] = [];
    const onRetry = (err: Error & { code?: string }) => retries.push(err.code ?? '');
    await using pub = new Publisher({ target: stack.grpcTarget, mode, onRetry });
    await assert.rejects(
      pub.publish({ ...chunk(thread, 1), contentJson: huge }),
      (e: Error & { code?: string }) => e.code === 'invalid_argument' && /^content_json: /.test(e.message),
    );

    // Told the broker takes more than it does: the broker's gRPC refuses the request as too large.
    await using trusting = new Publisher({
      target: stack.grpcTarget,
      mode,
      onRetry,
      maxRequestBytes: 64 * 1024 * 1024,
      retry: { initialDelayMs: 1, maxDelayMs: 5, maxAttempts: 3 },
    });
    await assert.rejects(
      trusting.publish({ ...chunk(thread, 3), contentJson: huge }),
      (e: Error & { code?: string }) => e.code === 'resource_exhausted' && /larger than max/.test(e.message),
    );
    assert.deepEqual(retries, [], `${mode}: a request too large was retried`);
    assert.equal((await trusting.publish(chunk(`${thread}-a`, 2))).eventId, 'e2', 'the publisher goes on');
    await waitFor(async () => (await threadRows(stack.db, `${thread}-a`)).length === 1, WAIT);
    assert.equal((await threadRows(stack.db, thread)).length, 0);
  }
});

/** The broker's count of ACCEPTED publish requests answered with `outcome`. */
async function requestsAnswered(httpUrl: string, outcome: string): Promise<number> {
  const key = `runstream_ingest_requests_total{ack="ACCEPTED",outcome="${outcome}"} `;
  const text = await (await fetch(`${httpUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(key));
  return line === undefined ? 0 : Number(line.slice(key.length));
}

test('a refusal about a run fails all its events in one answer, in both modes; a lone refused event hears its field', async () => {
  await using stack = await startStack();
  for (const mode of ['unary', 'stream'] as const) {
    const thread = randomName(`tsrun-${mode}-`);
    await using pub = new Publisher({ target: stack.grpcTarget, mode });
    const refused = await requestsAnswered(stack.httpUrl, 'invalid_argument');
    const ok = await requestsAnswered(stack.httpUrl, 'ok');
    const runs = ['run-1', 'bad run', 'run-1', 'bad run', 'bad run', 'run-1'];
    const results = await Promise.allSettled(
      runs.map((runId, i) => pub.publish(chunk(thread, i + 1, { runId }))),
    );
    assert.deepEqual(
      results.map((r) =>
        r.status === 'fulfilled' ? r.value.eventId : (r.reason as Error).message.split(':')[0],
      ),
      ['e1', 'run_id', 'e3', 'run_id', 'run_id', 'e6'],
      mode,
    );
    // One request refused for the three (not one per event), one stored the other three.
    assert.equal((await requestsAnswered(stack.httpUrl, 'invalid_argument')) - refused, 1, mode);
    assert.equal((await requestsAnswered(stack.httpUrl, 'ok')) - ok, 1, mode);
    await assert.rejects(
      pub.publish(chunk(thread, 7, { eventType: 'bad type' })),
      (e: Error & { code?: string }) => e.code === 'invalid_argument' && /^event_type: /.test(e.message),
    );
    // Any field judged by its value: a bad event type shared by three of five events.
    const types = ['ai_chunk', 'bad type', 'bad type', 'ai_chunk', 'bad type'];
    const before = await requestsAnswered(stack.httpUrl, 'invalid_argument');
    const typed = await Promise.allSettled(
      types.map((eventType, i) => pub.publish(chunk(thread, i + 8, { eventType }))),
    );
    assert.deepEqual(
      typed.map((r) => r.status),
      types.map((t) => (t === 'bad type' ? 'rejected' : 'fulfilled')),
    );
    assert.equal((await requestsAnswered(stack.httpUrl, 'invalid_argument')) - before, 1, mode);
    await waitFor(async () => (await threadRows(stack.db, thread)).length === 5, WAIT);
    assert.deepEqual(
      (await threadRows(stack.db, thread)).map((r) => r.event_id),
      ['e1', 'e3', 'e6', 'e8', 'e11'],
    );
  }
});

test("a request's events fit maxRequestBytes together: a broker taking 1 MiB stores six events of 200 KB handed over at once, in both modes", async () => {
  await using stack = await startStack({ maxGrpcMessageBytes: 1024 * 1024 });
  const content = JSON.stringify('\u00e9'.repeat(100_000)); // 200 KB in UTF-8, 100,002 characters
  for (const mode of ['unary', 'stream'] as const) {
    const thread = randomName(`tsbig-${mode}-`);
    const retries: string[] = [];
    await using pub = new Publisher({
      target: stack.grpcTarget,
      mode,
      maxRequestBytes: 1024 * 1024,
      onRetry: (err) => retries.push(err.code),
      retry: { initialDelayMs: 1, maxDelayMs: 5, maxAttempts: 3 },
    });
    const acks = await Promise.all(
      [1, 2, 3, 4, 5, 6].map((i) => pub.publish({ ...chunk(thread, i), contentJson: content })),
    );
    assert.deepEqual(
      acks.map((a) => a.eventId),
      ['e1', 'e2', 'e3', 'e4', 'e5', 'e6'],
    );
    assert.deepEqual(retries, [], mode);
    await waitFor(async () => (await threadRows(stack.db, thread)).length === 6, WAIT);
  }
});

test("an event over this client's own gRPC send limit is refused by publish(), never sent or retried, in both modes", async () => {
  await using stack = await startStack();
  for (const mode of ['unary', 'stream'] as const) {
    const thread = randomName(`tssend-${mode}-`);
    const retries: string[] = [];
    await using pub = new Publisher({
      target: stack.grpcTarget,
      mode,
      channelOptions: { 'grpc.max_send_message_length': 64 * 1024 },
      onRetry: (err) => retries.push(err.code),
      retry: { initialDelayMs: 1, maxDelayMs: 5, maxAttempts: 3 },
    });
    await assert.rejects(
      pub.publish({ ...chunk(thread, 1), contentJson: JSON.stringify('x'.repeat(100_000)) }),
      (e: Error & { code?: string }) =>
        e.code === 'invalid_argument' && /maxRequestBytes=65536/.test(e.message),
    );
    assert.deepEqual(retries, [], mode);
    assert.equal((await pub.publish(chunk(thread, 2))).eventId, 'e2', `${mode}: the publisher goes on`);
  }
});

test('abort() while a refused event is answered: its batch-mates fail with closed, never sent on the closed channel', async () => {
  await using stack = await startStack();
  const thread = randomName('tsabort-');
  const pub = new Publisher({ target: stack.grpcTarget });
  const results = await Promise.allSettled([
    pub.publish(chunk(thread, 1)),
    pub.publish({ ...chunk(thread, 2), contentJson: '{nope' }).catch((e) => {
      pub.abort();
      throw e;
    }),
    pub.publish(chunk(thread, 3)),
  ]);
  assert.deepEqual(
    results.map((r) => (r.status === 'rejected' ? (r.reason as { code?: string }).code : 'stored')),
    ['closed', 'invalid_argument', 'closed'],
  );
  assert.equal(pub.queued, 0);
});

test('flushes resolve in the order they were called, each once its own events are answered', async () => {
  await using stack = await startStack();
  const thread = randomName('tsfo-');
  await using pub = new Publisher({ target: stack.grpcTarget, lingerMs: 5_000 });
  const order: string[] = [];
  const a = pub.publish(chunk(`${thread}-a`, 1));
  const f1 = pub.flush().then(() => order.push('f1'));
  const b = [2, 3].map((i) => pub.publish(chunk(`${thread}-b`, i)));
  const f2 = pub.flush().then(() => order.push('f2'));
  const f3 = pub.flush().then(() => order.push('f3')); // nothing handed over since f2
  const late = pub.publish(chunk(`${thread}-c`, 4)); // lingers: no flush waits for it
  await Promise.all([f1, f2, f3, a, ...b]);
  assert.deepEqual(order, ['f1', 'f2', 'f3']);
  assert.equal(pub.queued, 1);
  await pub.flush();
  assert.equal((await late).eventId, 'e4');
});

test('the long-poll transport follows the same cursor rules: exactly the matching events, live, run end', async () => {
  await using stack = await startStack();
  const thread = randomName('tsl-');
  await using pub = new Publisher({ target: stack.grpcTarget, ack: 'PERSISTED' });
  const cat = (i: number) => (i % 2 === 0 ? 'message' : 'trace') as 'message' | 'trace';
  const range = (from: number, to: number) =>
    Array.from({ length: to - from + 1 }, (_, k) =>
      chunk(thread, from + k, { runId: 'r1', category: cat(from + k), eventType: 'x_event' }),
    );
  await pub.publishMany(range(1, 30));

  const sub = subscribe({
    url: stack.wsUrl,
    threadId: thread,
    transport: 'long-poll',
    categories: ['message'],
    pollWaitMs: 30_000,
    backoff: FAST,
  });
  const got = collect(sub);
  await waitFor(() => got.items.some((i) => i.type === 'live'), { ...WAIT, what: 'live' });
  assert.equal(sub.cursor, 30);
  // Published while a poll waits: it answers with them.
  await pub.publishMany(range(31, 60));
  await waitFor(() => got.events().length >= 30, { ...WAIT, what: 'every message event' });
  sub.close();
  await got.done;
  assert.deepEqual(
    got.events().map((e) => e.seq),
    Array.from({ length: 60 }, (_, i) => i + 1).filter((i) => cat(i) === 'message'),
  );

  // A run subscription over long-poll ends at the run's end, even when the filter skips it.
  const run = collect(
    subscribe({
      url: stack.wsUrl,
      threadId: thread,
      runId: 'r1',
      categories: ['message'],
      transport: 'long-poll',
    }),
  );
  await waitFor(() => run.items.some((i) => i.type === 'live'), { ...WAIT, what: 'live on the run' });
  await pub.publish({
    threadId: thread,
    runId: 'r1',
    eventId: 'end1',
    eventType: 'run_end',
    category: 'lifecycle',
    content: { status: 'success' },
  });
  await run.done;
  assert.deepEqual(run.items.at(-1), { type: 'end', runId: 'r1', seq: 61, status: 'success' });
  assert.equal(run.events().length, 30);
  // Joining after the end: the run's history, then `end`; from a cursor at the end, `end` at once.
  const all = collect(subscribe({ url: stack.wsUrl, threadId: thread, runId: 'r1', transport: 'long-poll' }));
  await all.done;
  assert.deepEqual(
    all.events().map((e) => e.seq),
    Array.from({ length: 61 }, (_, i) => i + 1),
  );
  assert.equal(all.items.at(-1)?.type, 'end');
  const late = collect(
    subscribe({ url: stack.wsUrl, threadId: thread, runId: 'r1', afterSeq: 61, transport: 'long-poll' }),
  );
  await late.done;
  assert.deepEqual(
    late.items.map((i) => i.type),
    ['end'],
  );
});
