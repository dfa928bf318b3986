// A reconnect storm: 1,000 WebSocket clients, 100 on each of 10 threads under load, all
// dropped at once by a broker kill -9; each reconnects to the restarted broker and
// resumes after its own cursor. Every client ends with exactly the stored events, in
// order, once each.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { randomName } from '../helpers/stack.js';
import { checkThread, compareDelivered, type Faults, sumFaults, type ThreadReport } from './checker.js';
import {
  catchUp,
  FaultBroker,
  LiveSubscriber,
  Load,
  recordRow,
  settleStored,
  startFaultServers,
} from './harness.js';

const CLIENTS = 1_000;
const THREADS = 10;

test('reconnect storm: 1,000 WebSocket clients resume from their cursors after a broker kill -9, all exact', async () => {
  const started = Date.now();
  await using servers = await startFaultServers();
  await using broker = await FaultBroker.start(servers);
  const threads = Array.from({ length: THREADS }, () => randomName('t-'));
  const clients = Array.from(
    { length: CLIENTS },
    (_, k) => new LiveSubscriber(broker.wsUrl, [threads[k % THREADS] as string]),
  );
  for (let k = 0; k < CLIENTS; k += 100) await Promise.all(clients.slice(k, k + 100).map((c) => c.start()));
  const load = new Load({
    target: broker.grpcTarget,
    threads,
    ack: 'ACCEPTED',
    eventsPerSecond: 300,
  }).start();
  let clearedAt = 0;
  try {
    await load.waitForAcks(5);
    await sleep(4_000);
    await broker.kill();
    clearedAt = Date.now();
    await sleep(500);
    await broker.restart();
    await sleep(8_000);
  } finally {
    await load.stop();
  }
  const stored = await settleStored(servers.db, load.acked, clients, 180_000);
  const caught = await catchUp(broker.wsUrl, threads);
  for (const c of clients) c.close();

  const reports: ThreadReport[] = threads.map((t) =>
    checkThread({
      thread: t,
      acked: load.acked.get(t) as Map<string, never>,
      stored: stored.get(t) ?? [],
      live: (clients[threads.indexOf(t)]?.delivered.get(t) ?? []).map((d) => d.ev),
      catchUp: caught.get(t) ?? [],
    }),
  );
  // Every other client against the store as well.
  const examples: string[] = [];
  const others: Faults[] = clients.slice(THREADS).map((c) => {
    const t = c.threads[0] as string;
    const storedBySeq = new Map((stored.get(t) ?? []).map((r) => [r.seq, r.event_id]));
    return compareDelivered(
      `client of ${t}`,
      (c.delivered.get(t) ?? []).map((d) => d.ev),
      storedBySeq,
      examples,
    );
  });
  const otherFaults = sumFaults(...others);
  const reconnects = clients.reduce((n, c) => n + c.reconnects, 0);
  const delivered = clients.reduce((n, c) => n + c.deliveredCount(), 0);
  const lastBack = Math.max(...clients.map((c) => c.deliveryRecoveryMs(clearedAt, load) ?? -1));
  recordRow(
    {
      row: 'reconnect storm, 1,000 clients',
      injects:
        '1,000 WebSocket clients (100 per thread) dropped at once by a broker kill -9; all resume from their cursors',
      ack: 'ACCEPTED',
      ackRecoveryMs: [load.ackRecoveryMs(clearedAt) ?? -1],
      deliveryRecoveryMs: [lastBack],
      notes: `${reconnects} reconnects; delivered counts all 1,000 clients; live back = the last client to get an event sent after the kill`,
      seconds: Math.round((Date.now() - started) / 1000),
    },
    [
      ...reports,
      {
        thread: 'the other 990 clients',
        acked: 0,
        stored: 0,
        storedNotAcked: 0,
        rejected: 0,
        store: sumFaults(),
        live: otherFaults,
        catchUp: sumFaults(),
        examples,
      },
    ],
    delivered,
    { alarms: broker.alarms },
  );
  assert.ok(reconnects >= CLIENTS, `every client reconnected (${reconnects})`);
});
