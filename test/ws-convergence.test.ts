// A resubscribe storm: 1,000 WebSocket subscribers spread over 50 connections, on a thread
// that is being written to, all drop at once and all resubscribe at once from different
// seqs. Every one converges to exactly after_seq+1..N: no gap, no duplicate, in order.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import WebSocket from 'ws';
import type { Event } from '../src/client/ingest-client.js';
import { QueryGate } from '../src/persist/query-gate.js';
import { randomName, type Stack, startStack } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

const CONNECTIONS = 50;
const SUBS_PER_CONNECTION = 20;
const INITIAL_EVENTS = 200;
const TOTAL_EVENTS = 500;
const WRITE_BATCH = 5;

let stack: Stack;
before(async () => {
  // Small catch-up pages, so 1,000 concurrent catch-ups cross many page seams.
  stack = await startStack({ catchupPageSize: 50 });
});
after(async () => {
  await stack[Symbol.asyncDispose]();
});

/** A light client: one socket, the seqs received per subscription, nothing else kept. */
class Conn {
  readonly seqs = new Map<string, number[]>();
  readonly live = new Set<string>();
  readonly errors: unknown[] = [];
  constructor(readonly ws: WebSocket) {
    ws.on('message', (data) => {
      const f = JSON.parse(data.toString()) as { type: string; id: string; event?: { seq: number } };
      if (f.type === 'event') this.seqs.get(f.id)?.push((f.event as { seq: number }).seq);
      else if (f.type === 'live') this.live.add(f.id);
      else if (f.type === 'error') this.errors.push(f);
    });
  }
  static open(url: string): Promise<Conn> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, { perMessageDeflate: false });
      ws.once('open', () => resolve(new Conn(ws)));
      ws.once('error', reject);
    });
  }
  subscribe(id: string, threadId: string, afterSeq: number): void {
    this.seqs.set(id, []);
    this.ws.send(JSON.stringify({ type: 'subscribe', id, thread_id: threadId, after_seq: afterSeq }));
  }
}

function events(t: string, from: number, n: number): Event[] {
  return Array.from({ length: n }, (_, k) => ({
    thread_id: t,
    run_id: `run-${(from + k) % 3}`,
    event_id: `e${from + k}`,
    event_type: 'ai_chunk',
    category: 'MESSAGE',
    content_json: JSON.stringify({ n: from + k }),
  }));
}

const range = (from: number, to: number) =>
  Array.from({ length: Math.max(0, to - from + 1) }, (_, i) => from + i);
/** Deterministic spread of start points, so a failure reproduces. */
const spread = (i: number, max: number) => (i * 7919) % (max + 1);

test('1,000 subscribers resubscribing at once from different seqs all converge with no gap and no duplicate', async () => {
  const t = randomName('t-');
  await stack.client.publish(events(t, 1, INITIAL_EVENTS), 'PERSISTED');

  const ids = Array.from({ length: CONNECTIONS * SUBS_PER_CONNECTION }, (_, i) => `s${i}`);
  const connOf = (i: number) => Math.floor(i / SUBS_PER_CONNECTION);

  // Phase 1: everyone subscribes at once, from different seqs, while the writer runs.
  const first = await Promise.all(Array.from({ length: CONNECTIONS }, () => Conn.open(stack.wsUrl)));
  const startAt = ids.map((_, i) => spread(i, INITIAL_EVENTS));
  ids.forEach((id, i) => {
    first[connOf(i)]?.subscribe(id, t, startAt[i] as number);
  });

  let written = INITIAL_EVENTS;
  /** Writes in small batches up to `upto`, concurrently with whatever the subscribers do. */
  const write = async (upto: number): Promise<void> => {
    while (written < upto) {
      const n = Math.min(WRITE_BATCH, upto - written);
      await stack.client.publish(events(t, written + 1, n), 'ACCEPTED');
      written += n;
    }
  };
  const midpoint = Math.floor((INITIAL_EVENTS + TOTAL_EVENTS) / 2);
  const writer1 = write(midpoint);

  const liveCount = () => first.reduce((n, c) => n + c.live.size, 0);
  await waitFor(
    () => {
      const errors = first.flatMap((c) => c.errors);
      if (errors.length > 0) throw new Error(`error frames: ${JSON.stringify(errors.slice(0, 3))}`);
      return liveCount() === ids.length;
    },
    { what: 'every phase-1 subscription to go live', timeoutMs: 240_000 },
  ).catch((err: unknown) => {
    throw new Error(`${(err as Error).message} (${liveCount()} of ${ids.length} live)`);
  });
  // Drop every connection at once, mid-write, without a close handshake.
  for (const c of first) c.ws.terminate();

  // Each subscriber got a gap-free run from its start; it resumes from some seq it had
  // processed (a different one for each), as a client that lost its tail would.
  const resumeAt = ids.map((id, i) => {
    const got = first[connOf(i)]?.seqs.get(id) ?? [];
    const from = startAt[i] as number;
    assert.deepEqual(got, range(from + 1, from + got.length), `phase 1 of ${id}`);
    return from + spread(i * 31 + 1, got.length);
  });
  assert.ok(new Set(resumeAt).size > 100, 'subscribers resume from many different seqs');

  // Phase 2: everyone resubscribes at once on fresh connections, while the writer goes on.
  await writer1;
  const second = await Promise.all(Array.from({ length: CONNECTIONS }, () => Conn.open(stack.wsUrl)));
  const writer2 = write(TOTAL_EVENTS);
  ids.forEach((id, i) => {
    second[connOf(i)]?.subscribe(id, t, resumeAt[i] as number);
  });
  await writer2;
  await waitFor(
    () =>
      ids.every((id, i) => {
        const got = second[connOf(i)]?.seqs.get(id) ?? [];
        return got.at(-1) === TOTAL_EVENTS || got.length > TOTAL_EVENTS;
      }),
    { what: 'every subscriber to reach the head', timeoutMs: 180_000 },
  );
  for (const c of second) assert.deepEqual(c.errors, []);
  ids.forEach((id, i) => {
    const got = second[connOf(i)]?.seqs.get(id) ?? [];
    assert.deepEqual(got, range((resumeAt[i] as number) + 1, TOTAL_EVENTS), `phase 2 of ${id}`);
  });
  for (const c of second) c.ws.close();
});

test('the query gate runs at most N reads at once, first come first served, and frees a slot on failure', async () => {
  const gate = new QueryGate(2);
  let running = 0;
  let peak = 0;
  const order: number[] = [];
  const releases: (() => void)[] = [];
  const job = (i: number, fail = false) =>
    gate.run(async () => {
      running++;
      peak = Math.max(peak, running);
      order.push(i);
      await new Promise<void>((resolve) => releases.push(resolve));
      running--;
      if (fail) throw new Error(`job ${i} failed`);
      return i;
    });
  const jobs = [job(0, true), job(1), job(2), job(3), job(4)];
  const settled = Promise.allSettled(jobs);
  await waitFor(() => releases.length === 2);
  assert.equal(gate.queued, 3);
  for (let done = 0; done < 5; done++) {
    await waitFor(() => releases.length > done);
    (releases[done] as () => void)();
  }
  const results = await settled;
  assert.equal(results[0]?.status, 'rejected');
  assert.deepEqual(
    results.slice(1).map((r) => r.status === 'fulfilled' && r.value),
    [1, 2, 3, 4],
  );
  assert.equal(peak, 2);
  assert.deepEqual(order, [0, 1, 2, 3, 4]);
});
