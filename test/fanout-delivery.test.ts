// Pure pieces of live fan-out: the queue that spreads delivery over event-loop turns, and
// the event frame shared by the subscribers of an event.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DeliveryTurns, TURN_BUDGET_MS } from '../src/fanout/core/delivery-turns.js';
import { eventFrame, sharedEventFrame } from '../src/fanout/ws/frames.js';

function signal(): { promise: Promise<void>; resolve: () => void } {
  let resolve = (): void => {};
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

function busy(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // spin: a task's share of the send work
  }
}

test('delivery tasks run in the order queued, also those queued while the queue runs', async () => {
  const turns = new DeliveryTurns();
  const ran: number[] = [];
  const done = signal();
  for (let i = 0; i < 50; i++) {
    turns.queue(() => {
      ran.push(i);
      busy(0.2);
      if (i % 10 === 0) turns.queue(() => ran.push(100 + i));
      if (i === 49) turns.queue(() => done.resolve());
    });
  }
  await done.promise;
  const first = ran.filter((n) => n < 100);
  assert.deepEqual(
    first,
    Array.from({ length: 50 }, (_, i) => i),
  );
  // A task queued by task i runs after every task queued before it (0..49).
  for (const n of ran.filter((n) => n >= 100)) assert.ok(ran.indexOf(n) > ran.indexOf(49), `${n} ran early`);
});

test('a long queue of delivery work lets other callbacks run before it is through', async () => {
  const turns = new DeliveryTurns();
  const tasks = 20 * TURN_BUDGET_MS;
  let ranBeforeOther = -1;
  let ran = 0;
  const done = signal();
  for (let i = 0; i < tasks; i++) {
    turns.queue(() => {
      busy(1);
      ran++;
      if (ran === tasks) done.resolve();
    });
  }
  // Queued after the first turn was: it can only run between turns.
  setImmediate(() => {
    setImmediate(() => {
      ranBeforeOther = ran;
    });
  });
  await done.promise;
  await new Promise((r) => setImmediate(r));
  assert.ok(
    ranBeforeOther > 0 && ranBeforeOther < tasks,
    `other callback ran after ${ranBeforeOther} of ${tasks} tasks`,
  );
});

test('an event frame is built once per subscription id and shared; another id gets its own', () => {
  let serialised = 0;
  const e = {
    json: () => {
      serialised++;
      return '{"seq":1,"content":"é"}';
    },
  };
  const a = sharedEventFrame('s0', e);
  assert.equal(sharedEventFrame('s0', e), a);
  assert.equal(a.toString(), eventFrame('s0', '{"seq":1,"content":"é"}'));
  const b = sharedEventFrame('other', e);
  assert.equal(b.toString(), eventFrame('other', '{"seq":1,"content":"é"}'));
  assert.equal(sharedEventFrame('s0', e).toString(), a.toString());
  // Another event with the same id is its own frame.
  const e2 = { json: () => '{"seq":2}' };
  assert.equal(sharedEventFrame('s0', e2).toString(), eventFrame('s0', '{"seq":2}'));
  assert.equal(serialised, 3);
});
