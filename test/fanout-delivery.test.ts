// Pure pieces of live fan-out: the queue that spreads delivery over event-loop turns, and
// the event frame shared by the subscribers of an event.
import assert from 'node:assert/strict';
import net from 'node:net';
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

test('a socket written by several tasks of one turn: the first write at once, the others together at the turn end', async (t) => {
  // A real TCP connection: the writes are counted where they reach the kernel (_writev / _write).
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const peer = new Promise<net.Socket>((r) => server.once('connection', r));
  const socket = net.connect((server.address() as net.AddressInfo).port, '127.0.0.1');
  t.after(async () => {
    socket.destroy();
    await new Promise((r) => server.close(r));
  });
  await new Promise((r) => socket.once('connect', r));
  const received = await peer;
  t.after(() => received.destroy());
  let writes = 0;
  const raw = socket as unknown as { _write: (...a: unknown[]) => void; _writev: (...a: unknown[]) => void };
  const write = raw._write.bind(socket);
  const writev = raw._writev.bind(socket);
  raw._write = (...a) => {
    writes++;
    write(...a);
  };
  raw._writev = (...a) => {
    writes++;
    writev(...a);
  };
  let bytes = 0;
  const all = new Promise<void>((resolve) =>
    received.on('data', (d: Buffer) => {
      bytes += d.length;
      if (bytes === 5 * 3) resolve();
    }),
  );
  // One turn, however long the machine takes (a 2 ms budget split it once on a loaded CI run).
  const turns = new DeliveryTurns(60_000);
  const done = signal();
  const corkedDuringTurn: number[] = [];
  for (let i = 0; i < 5; i++) {
    turns.queue(() => {
      turns.corked(socket, () => socket.write(`ab${i}`));
      corkedDuringTurn.push(socket.writableCorked);
      if (i === 4) setImmediate(done.resolve);
    });
  }
  await done.promise;
  await all;
  assert.deepEqual(
    corkedDuringTurn,
    [0, 1, 1, 1, 1],
    'the first write leaves at once; then corked for the turn',
  );
  assert.equal(writes, 2, "the first task's write, then one for the other four");
  assert.equal(socket.writableCorked, 0);
  // Outside a turn: uncorked when `send` returns.
  turns.corked(socket, () => socket.write('x'));
  assert.equal(socket.writableCorked, 0);
});

test('an event frame is built once per subscription id and shared; another id gets its own', () => {
  let serialised = 0;
  const e = {
    json: () => {
      serialised++;
      return '{"seq":1,"content":"é"}';
    },
  };
  // The shared frame is a whole WebSocket frame: a 2-byte header (final text frame, its length), then the text.
  const text = (frame: Buffer): string => {
    assert.deepEqual([frame[0], frame[1]], [0x81, frame.length - 2]);
    return frame.subarray(2).toString();
  };
  const a = sharedEventFrame('s0', e);
  assert.equal(sharedEventFrame('s0', e), a);
  assert.equal(text(a), eventFrame('s0', '{"seq":1,"content":"é"}'));
  const b = sharedEventFrame('other', e);
  assert.equal(text(b), eventFrame('other', '{"seq":1,"content":"é"}'));
  assert.equal(text(sharedEventFrame('s0', e)), text(a));
  // Another event with the same id is its own frame.
  const e2 = { json: () => '{"seq":2}' };
  assert.equal(text(sharedEventFrame('s0', e2)), eventFrame('s0', '{"seq":2}'));
  assert.equal(serialised, 3);
});
