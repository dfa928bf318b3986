// Invariants 1 and 2: per thread, seq is 1, 2, 3, ... with no gap across runs, and
// within a run seq order is the order in which the producer sent the events.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Event } from '../src/client/ingest-client.js';
import { expectGapFree, randomName, startStack, threadRows } from './helpers/stack.js';

const PRODUCERS = 8;
const RUNS = 4;
const TOTAL = 5000;
const PER_PRODUCER = TOTAL / PRODUCERS;

function event(threadId: string, runId: string, producer: number, i: number): Event {
  return {
    thread_id: threadId,
    run_id: runId,
    event_id: `p${producer}-e${i}`,
    event_type: 'ai_chunk',
    category: 'MESSAGE',
    content_json: JSON.stringify({ content: `token ${i}`, producer, i }),
    metadata_json: JSON.stringify({ id: `msg-${producer}` }),
  };
}

test('8 concurrent producers, 4 runs, 5,000 events on one thread: seq is exactly 1..5000, runs in send order', async () => {
  await using stack = await startStack();
  const threadId = randomName('thread-');

  // Producers 0-3 use PublishStream (pipelined batches), 4-7 unary Publish; two per run.
  // Ack levels alternate so both paths race on the same thread.
  const producer = async (p: number): Promise<void> => {
    const runId = `run-${p % RUNS}`;
    const ack = p % 2 === 0 ? 'ACCEPTED' : 'PERSISTED';
    if (p < 4) {
      const stream = stack.client.openStream();
      const pending: Promise<unknown>[] = [];
      for (let i = 0; i < PER_PRODUCER; i += 25) {
        const batch = Array.from({ length: 25 }, (_, k) => event(threadId, runId, p, i + k));
        pending.push(stream.send(batch, ack));
      }
      await Promise.all(pending);
      await stream.end();
    } else {
      for (let i = 0; i < PER_PRODUCER; i += 125) {
        const batch = Array.from({ length: 125 }, (_, k) => event(threadId, runId, p, i + k));
        const acks = await stack.client.publish(batch, ack);
        assert.equal(acks.length, 125);
      }
    }
  };
  await Promise.all(Array.from({ length: PRODUCERS }, (_, p) => producer(p)));

  // ACCEPTED acks return before the commit: wait until everything is stored.
  let rows = await threadRows(stack.db, threadId);
  for (let tries = 0; rows.length < TOTAL && tries < 300; tries++) {
    await new Promise((r) => setTimeout(r, 100));
    rows = await threadRows(stack.db, threadId);
  }
  assert.equal(rows.length, TOTAL);
  assert.equal(expectGapFree(rows.map((r) => r.seq)), TOTAL);

  // Each producer's events appear in the order it sent them, within its run.
  const lastIndex = new Map<number, number>();
  const perRun = new Map<string, number>();
  for (const r of rows) {
    const c = r.content as { producer: number; i: number };
    assert.equal(r.run_id, `run-${c.producer % RUNS}`);
    const prev = lastIndex.get(c.producer) ?? -1;
    assert.equal(c.i, prev + 1, `producer ${c.producer}: event ${c.i} stored after ${prev}`);
    lastIndex.set(c.producer, c.i);
    perRun.set(r.run_id, (perRun.get(r.run_id) ?? 0) + 1);
  }
  assert.deepEqual([...perRun.values()], Array(RUNS).fill(TOTAL / RUNS));
  assert.equal(new Set(rows.map((r) => r.event_id)).size, TOTAL);
});
