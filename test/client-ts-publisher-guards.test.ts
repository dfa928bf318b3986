// The TypeScript publisher against what a caller can get wrong, and a broker that does not
// answer: a callback that throws or a token source that fails neither ends the process nor
// stalls the publisher; bad options are refused when it is made, naming the option; a bad
// event is a rejected promise naming its field, never a throw, and text that is not UTF-16
// well formed is refused before it could be stored changed; abort() ends calls in flight;
// publish() refuses past maxQueuedEvents. Real broker, nats-server and Postgres where one answers.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { HistoryClient } from '@runstream/client';
import { type PublishEvent, Publisher, type PublisherOptions } from '@runstream/client/node';
import { freePort } from './helpers/proc.js';
import { chunk } from './helpers/publish-events.js';
import { randomName, type Stack, startStack, threadRows } from './helpers/stack.js';
import { startTlsGrpcProxy } from './helpers/tls-proxy.js';
import { waitFor } from './helpers/wait.js';

const FAST = { initialDelayMs: 10, maxDelayMs: 50 };

let stack: Stack;
/** A TCP server that takes connections and never says a word: gRPC calls to it stay unanswered. */
let silent: net.Server;
let silentTarget: string;
const silentSockets = new Set<net.Socket>();
before(async () => {
  stack = await startStack();
  silent = net.createServer((s) => {
    silentSockets.add(s);
    s.on('error', () => undefined);
    s.on('close', () => silentSockets.delete(s));
  });
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
  silentTarget = `127.0.0.1:${(silent.address() as net.AddressInfo).port}`;
});
after(async () => {
  for (const s of silentSockets) s.destroy();
  silent.close();
  await stack[Symbol.asyncDispose]();
});

/** Warnings the process emits while `body` runs (a throwing callback is reported as one). */
async function withWarnings<T>(body: (warnings: Error[]) => Promise<T>): Promise<T> {
  const warnings: Error[] = [];
  const listener = (w: Error): void => {
    warnings.push(w);
  };
  process.on('warning', listener);
  try {
    return await body(warnings);
  } finally {
    process.off('warning', listener);
  }
}

/** How a promise has settled once every callback now due has run: its ack, its error code, or pending. */
async function state(p: Promise<unknown>): Promise<string> {
  let s = 'pending';
  p.then(
    () => {
      s = 'acked';
    },
    (e: { code?: string }) => {
      s = e.code ?? 'error';
    },
  );
  await new Promise((r) => setImmediate(r));
  return s;
}

test('streaming mode: a getToken that fails rejects the waiting events with unauthenticated, and the next publish opens the stream again', async () => {
  const thread = randomName('tsguard-');
  let calls = 0;
  await using pub = new Publisher({
    target: stack.grpcTarget,
    mode: 'stream',
    getToken: () => {
      if (++calls === 1) throw new Error('token service down');
      return 'unused';
    },
  });
  await assert.rejects(
    pub.publish(chunk(thread, 1)),
    (e: Error & { code?: string }) =>
      e.code === 'unauthenticated' && /getToken: token service down/.test(e.message),
  );
  const ack = await pub.publish(chunk(thread, 2));
  assert.equal(ack.eventId, 'e2');
});

test('unary mode: a getToken that fails rejects its batch with unauthenticated, naming getToken', async () => {
  await using pub = new Publisher({
    target: stack.grpcTarget,
    getToken: async () => {
      throw new Error('no token today');
    },
  });
  await assert.rejects(
    pub.publish(chunk(randomName('tsguard-'), 1)),
    (e: Error & { code?: string }) =>
      e.code === 'unauthenticated' && /getToken: no token today/.test(e.message),
  );
});

test('a throwing onRetry is reported as a warning and changes nothing: the retries go on, in both modes', async () => {
  await withWarnings(async (warnings) => {
    for (const mode of ['unary', 'stream'] as const) {
      // Nothing listens there: every attempt fails with unavailable.
      const target = `127.0.0.1:${await freePort()}`;
      let heard = 0;
      await using pub = new Publisher({
        target,
        mode,
        retry: { ...FAST, maxAttempts: 3 },
        onRetry: () => {
          heard++;
          throw new Error(`onRetry bug (${mode})`);
        },
      });
      await assert.rejects(
        pub.publish(chunk('t', 1)),
        (e: Error & { code?: string }) => e.code === 'unavailable',
      );
      assert.equal(heard, 2, `${mode}: every retry was heard`);
      assert.ok(
        warnings.some((w) => w.message.includes(`onRetry bug (${mode})`)),
        `${mode}: the callback's error was reported`,
      );
    }
  });
});

test('a throwing onControl or cancel listener is reported as a warning; the stream goes on', async () => {
  await withWarnings(async (warnings) => {
    const thread = randomName('tsguard-');
    const history = new HistoryClient({ url: stack.httpUrl });
    let controls = 0;
    await using pub = new Publisher({
      target: stack.grpcTarget,
      mode: 'stream',
      ack: 'PERSISTED',
      onControl: () => {
        controls++;
        throw new Error('onControl bug');
      },
    });
    pub.onCancel(thread, 'run-c', () => {
      throw new Error('cancel listener bug');
    });
    await pub.publish(chunk(thread, 1, { runId: 'run-c', eventType: 'run_start', category: 'lifecycle' }));
    await history.cancelRun(thread, 'run-c', 'stop');
    await waitFor(() => controls > 0, { timeoutMs: 30_000, what: 'the cancel control' });
    const end = await pub.publish(
      chunk(thread, 2, {
        runId: 'run-c',
        eventType: 'run_end',
        category: 'lifecycle',
        content: { status: 'cancelled' },
      }),
    );
    assert.equal(end.seq, 3, 'after the stored cancel_requested event');
    assert.ok(warnings.some((w) => w.message.includes('onControl bug')));
    assert.ok(warnings.some((w) => w.message.includes('cancel listener bug')));
  });
});

test('options a publisher cannot work with are refused when it is made, naming the option', () => {
  const bad: [Partial<PublisherOptions>, string][] = [
    [{ maxBatchEvents: 0 }, 'maxBatchEvents'],
    [{ maxBatchEvents: -1 }, 'maxBatchEvents'],
    [{ maxBatchEvents: 1.5 }, 'maxBatchEvents'],
    [{ maxBatchBytes: 0 }, 'maxBatchBytes'],
    [{ maxBatchBytes: Number.NaN }, 'maxBatchBytes'],
    [{ maxRequestBytes: 0 }, 'maxRequestBytes'],
    [{ maxRequestBytes: Number.NaN }, 'maxRequestBytes'],
    [{ maxQueuedEvents: 0 }, 'maxQueuedEvents'],
    [{ lingerMs: -1 }, 'lingerMs'],
    [{ lingerMs: Number.NaN }, 'lingerMs'],
    [{ deadlineMs: Number.NaN }, 'deadlineMs'],
    [{ deadlineMs: 0 }, 'deadlineMs'],
    [{ deadlineMs: 3e9 }, 'deadlineMs'],
    [{ retry: { maxAttempts: 0 } }, 'retry.maxAttempts'],
    [{ retry: { initialDelayMs: -5 } }, 'retry.initialDelayMs'],
    [{ retry: { maxDelayMs: Number.POSITIVE_INFINITY } }, 'retry.maxDelayMs'],
    [{ retry: { factor: 0.5 } }, 'retry.factor'],
    [{ ack: 'SOMETIMES' as 'ACCEPTED' }, 'ack'],
    [{ mode: 'batch' as 'stream' }, 'mode'],
  ];
  for (const [options, name] of bad) {
    assert.throws(
      () => new Publisher({ target: silentTarget, ...options }),
      (e: Error & { code?: string }) => e.code === 'invalid_argument' && e.message.startsWith(`${name}: `),
      `${JSON.stringify(options)} names ${name}`,
    );
  }
  // The largest deadline a timer can hold is taken, and Infinity where a count may have no limit.
  const ok = new Publisher({
    target: silentTarget,
    deadlineMs: 2_147_483_647,
    maxBatchEvents: 1,
    maxQueuedEvents: Number.POSITIVE_INFINITY,
    retry: { maxAttempts: Number.POSITIVE_INFINITY },
  });
  ok.abort();
});

test('a bad event is a rejected promise naming its field, never a throw; text with a lone surrogate is refused before it is sent', async () => {
  await using pub = new Publisher({ target: silentTarget, retry: { maxAttempts: 1 } });
  const cyclic: Record<string, unknown> = {};
  cyclic.self = cyclic;
  const base = chunk('t-guard', 1);
  const cases: [PublishEvent, string][] = [
    [{ ...base, content: () => 1 }, 'content'],
    [{ ...base, content: Symbol('x') }, 'content'],
    [{ ...base, content: cyclic }, 'content'],
    [{ ...base, content: 10n }, 'content'],
    [{ ...base, metadata: { toJSON: () => undefined } }, 'metadata'],
    [{ ...base, metadata: 'text' as unknown as Record<string, unknown> }, 'metadata'],
    [{ ...base, threadId: undefined as unknown as string }, 'threadId'],
    [{ ...base, threadId: 7 as unknown as string }, 'threadId'],
    [{ ...base, runId: undefined as unknown as string }, 'runId'],
    [{ ...base, eventType: 42 as unknown as string }, 'eventType'],
    [{ ...base, category: undefined as unknown as 'message' }, 'category'],
    [{ ...base, eventId: 5 as unknown as string }, 'eventId'],
    [{ ...base, userId: {} as unknown as string }, 'userId'],
    [{ ...base, contentJson: 3 as unknown as string }, 'contentJson'],
    [{ ...base, contentJson: '"a\ud800b"' }, 'contentJson'],
    [{ ...base, metadataJson: '{"k":"\udc00"}' }, 'metadataJson'],
    [{ ...base, threadId: 't\ud800' }, 'threadId'],
    [{ ...base, createdAtText: '\udfff' }, 'createdAtText'],
  ];
  for (const [event, field] of cases) {
    let p: Promise<unknown> | undefined;
    assert.doesNotThrow(() => {
      p = pub.publish(event);
    }, `${field}: publish() threw`);
    await assert.rejects(
      p as Promise<unknown>,
      (e: Error & { code?: string }) => e.code === 'invalid_argument' && e.message.startsWith(`${field}: `),
      `${field}: the refusal names it`,
    );
  }
  assert.equal(pub.queued, 0);
  // Escaped in JSON, a lone surrogate is text the broker judges (and refuses): sent as given.
  await using real = new Publisher({ target: stack.grpcTarget });
  await assert.rejects(
    real.publish({ ...chunk(randomName('tsguard-'), 1), contentJson: '"a\\ud800b"' }),
    (e: Error & { code?: string }) => e.code === 'invalid_argument' && /^content_json: /.test(e.message),
  );
});

test('abort() rejects a unary request in flight with closed at once, without waiting for its answer', async () => {
  const pub = new Publisher({ target: silentTarget, deadlineMs: 600_000 });
  const p = pub.publish(chunk('t-abort', 1));
  p.catch(() => undefined);
  // The request is out: the silent server holds its connection.
  await waitFor(() => silentSockets.size > 0, { timeoutMs: 10_000, what: 'the connection' });
  assert.equal(await state(p), 'pending');
  pub.abort();
  await waitFor(async () => (await state(p)) !== 'pending', { timeoutMs: 10_000, what: 'the rejection' });
  assert.equal(await state(p), 'closed');
  assert.equal(pub.queued, 0);
});

test('publish() refuses an event past maxQueuedEvents with resource_exhausted; ready() waits for room', async () => {
  const pub = new Publisher({ target: silentTarget, maxQueuedEvents: 3, deadlineMs: 600_000 });
  const held = [1, 2, 3].map((i) => pub.publish(chunk('t-full', i)));
  for (const p of held) p.catch(() => undefined);
  const over = pub.publish(chunk('t-full', 4));
  assert.equal(await state(over), 'resource_exhausted');
  await assert.rejects(
    over,
    (e: Error) => /^maxQueuedEvents: /.test(e.message) && /ready\(\)/.test(e.message),
  );
  assert.equal(pub.queued, 3);
  pub.abort();
  // Against a broker that answers, ready() then publish() never meets the limit.
  const thread = randomName('tsguard-');
  await using real = new Publisher({ target: stack.grpcTarget, maxQueuedEvents: 2 });
  const acks: Promise<unknown>[] = [];
  for (let i = 1; i <= 20; i++) {
    await real.ready();
    acks.push(real.publish(chunk(thread, i)));
  }
  await Promise.all(acks);
  assert.equal((await threadRows(stack.db, thread)).length, 20);
});

test('behind a TLS-terminating proxy, credentials make the channel TLS: both modes store their events; plaintext is not answered there', async () => {
  await using proxy = await startTlsGrpcProxy(stack.broker.grpcPort);
  const thread = randomName('tstls-');
  for (const mode of ['unary', 'stream'] as const) {
    await using pub = new Publisher({
      target: proxy.target,
      mode,
      ack: 'PERSISTED',
      credentials: grpc.credentials.createSsl(proxy.cert),
    });
    const acks = await pub.publishMany([1, 2, 3].map((i) => chunk(thread, i, { eventId: `${mode}-${i}` })));
    assert.deepEqual(
      acks.map((a) => a.duplicate),
      [false, false, false],
    );
  }
  assert.equal((await threadRows(stack.db, thread)).length, 6);
  await using plain = new Publisher({ target: proxy.target, retry: { ...FAST, maxAttempts: 2 } });
  await assert.rejects(
    plain.publish(chunk(thread, 9)),
    (e: Error & { code?: string }) => e.code === 'unavailable',
  );
});
