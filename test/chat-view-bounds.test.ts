// A live chat view's state is bounded however many runs its thread holds: a view that
// starts after N looks up what it needs of the projection before N when an event needs
// it, instead of loading a key for every run whose last message was anonymous. Measured
// on the heap of the in-process broker, with garbage collected, against a bound far above
// what the views need and far below what one key per run would take.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import v8 from 'node:v8';
import vm from 'node:vm';
import type { Event } from '../src/client/ingest-client.js';
import { ev } from './helpers/history.js';
import { randomName, type Stack, startStack } from './helpers/stack.js';

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

let stack: Stack;
before(async () => {
  stack = await startStack();
});
after(async () => {
  await stack[Symbol.asyncDispose]();
});

function heap(): number {
  for (let i = 0; i < 3; i++) gc();
  return process.memoryUsage().heapUsed;
}

test('chat views after a thread of 20,000 runs each ending in an anonymous message hold no state per run', async () => {
  const t = randomName('cvb-');
  const RUNS = 20_000;
  const SUBS = 25;
  const run = (i: number) => `run-${String(i).padStart(6, '0')}-with-a-realistic-uuid-like-suffix`;
  for (let i = 0; i < RUNS; i += 1000) {
    const batch: Event[] = Array.from({ length: 1000 }, (_, k) => ev(t, run(i + k), 1, { content: 'x' }));
    await stack.client.publish(batch, 'PERSISTED');
  }
  const conn = await stack.ws();
  const before = heap();
  for (let s = 0; s < SUBS; s++) {
    conn.sendRaw({ type: 'subscribe', id: `c${s}`, thread_id: t, view: 'chat', after_seq: RUNS });
  }
  for (let s = 0; s < SUBS; s++) await conn.waitFor((f) => f.type === 'live' && f.id === `c${s}`, 60_000);
  const grown = heap() - before;
  // One key per run and view would be some 20,000 × 25 × 120 bytes = 60 MB.
  assert.ok(grown < 15e6, `heap grew ${(grown / 1e6).toFixed(1)} MB for ${SUBS} chat views`);

  // And the views are still exact: a chunk of the first run goes on its message from before N.
  await stack.client.publish([ev(t, run(0), 2, { content: 'y' })], 'PERSISTED');
  const frame = await conn.waitFor((f) => f.type === 'chat' && f.id === 'c0');
  assert.equal(frame.type === 'chat' && frame.message.first_seq, 1, 'the run’s message began at seq 1');
  assert.equal(frame.type === 'chat' && frame.append, 'y');
});
