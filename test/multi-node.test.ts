// Any number of broker processes: two ingest + fan-out nodes and two persisters sharing the
// partitions, on one NATS and one Postgres. A subscriber on one node sees what was published
// on the other, with no gap; PERSISTED acks come whichever persister stores the events; a
// cancel sent to one node reaches the producer streaming to the other; a run's status and a
// deletion are the same seen from either node.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type Broker, startBroker } from '../src/broker.js';
import { IngestClient } from '../src/client/ingest-client.js';
import { WsConnection } from '../src/client/ws-subscriber.js';
import { HistoryClient } from '../src/history/client.js';
import { createLogger } from '../src/logger.js';
import { ev, http } from './helpers/history.js';
import { brokerConfig, randomName, startServers, threadRows } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

test('two fan-out nodes, two persisters: delivery, PERSISTED acks, cancel, run status and deletion across nodes', async (t) => {
  await using servers = await startServers();
  const base = brokerConfig(servers, { partitions: 8 });
  const log = createLogger(base.logLevel);
  const nodes: Broker[] = [];
  t.after(async () => {
    for (const b of nodes.reverse()) await b.close();
  });
  const start = async (roles: ('ingest' | 'fanout' | 'persister')[]) => {
    const b = await startBroker({ ...base, roles: new Set(roles) }, log);
    nodes.push(b);
    return b;
  };
  const p1 = await start(['persister']);
  const p2 = await start(['persister']);
  const a = await start(['ingest', 'fanout']);
  const b = await start(['ingest', 'fanout']);
  await waitFor(() => p1.persister?.partitions.length === 4 && p2.persister?.partitions.length === 4, {
    what: 'the persisters to hold half the partitions each',
  });

  const onA = new IngestClient(`127.0.0.1:${a.grpcPort}`);
  const onB = new IngestClient(`127.0.0.1:${b.grpcPort}`);
  const historyB = new HistoryClient(`127.0.0.1:${b.grpcPort}`);
  const sockets: WsConnection[] = [];
  t.after(async () => {
    onA.close();
    onB.close();
    historyB.close();
    for (const s of sockets) await s.close().catch(() => undefined);
  });
  const ws = async (node: Broker) => {
    const c = await WsConnection.open(`ws://127.0.0.1:${node.httpPort}/v1/ws`);
    sockets.push(c);
    return c;
  };

  // Threads on every partition, so both persisters store some; published on A, watched on B.
  const threads = Array.from({ length: 16 }, () => randomName('mn-'));
  const watch = await ws(b);
  for (const th of threads) watch.subscribe(th, th, 0);
  for (const th of threads) await watch.waitFor((f) => f.type === 'live' && f.id === th);
  for (let i = 1; i <= 5; i++) {
    const acks = await onA.publish(
      threads.map((th) => ev(th, 'r', i)),
      'PERSISTED',
    );
    assert.deepEqual(
      acks.map((x) => x.seq),
      threads.map(() => i),
      'PERSISTED acks carry the seqs, whichever persister stored them',
    );
  }
  for (const th of threads) {
    await watch.waitFor((f) => f.type === 'event' && f.id === th && f.event.seq === 5);
    const seqs = watch.frames
      .filter((f) => f.type === 'event' && f.id === th)
      .map((f) => (f.type === 'event' ? f.event.seq : 0));
    assert.deepEqual(seqs, [1, 2, 3, 4, 5], `${th} on node B`);
  }
  const stored = (p1.persister?.storedCount ?? 0) + (p2.persister?.storedCount ?? 0);
  assert.equal(stored, threads.length * 5);
  assert.ok(
    (p1.persister?.storedCount ?? 0) > 0 && (p2.persister?.storedCount ?? 0) > 0,
    'both persisters stored',
  );

  // A cancel sent to node B reaches the producer streaming the run to node A.
  const [th] = threads as [string];
  const producer = onA.openStream();
  t.after(() => producer.call.cancel());
  await producer.send([ev(th, 'run-c', 1, { type: 'run_start', category: 'LIFECYCLE' })], 'PERSISTED');
  const cancel = await fetch(`http://127.0.0.1:${b.httpPort}/v1/threads/${th}/runs/run-c/cancel`, {
    method: 'POST',
  });
  assert.equal(cancel.status, 202);
  const control = await waitFor(() => producer.controls[0], {
    what: 'the cancel at the producer on node A',
    timeoutMs: 20_000,
  });
  assert.equal(control.cancel?.run_id, 'run-c');

  // The run's status, written by whichever persister holds the thread, is the same from B.
  await producer.send([ev(th, 'run-c', 2, { type: 'run_cancelled', category: 'LIFECYCLE' })], 'PERSISTED');
  const viaB = await http<{ status: string }>(`http://127.0.0.1:${b.httpPort}/v1/threads/${th}/runs/run-c`);
  const viaA = await http<{ status: string }>(`http://127.0.0.1:${a.httpPort}/v1/threads/${th}/runs/run-c`);
  assert.equal(viaB.status, 200);
  assert.equal(viaB.body.status, 'cancelled');
  assert.equal(viaA.body.status, 'cancelled');

  // A thread deleted through node B: a subscriber on node A is told, and nothing comes back.
  const onNodeA = await ws(a);
  onNodeA.subscribe('d', th, 0);
  await onNodeA.waitFor((f) => f.type === 'live' && f.id === 'd');
  await historyB.deleteThread({ thread_id: th });
  await onNodeA.waitFor((f) => f.type === 'deleted' && f.id === 'd');
  assert.deepEqual(await threadRows(servers.db, th), []);
});
