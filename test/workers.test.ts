// RS_WORKERS=N: one host, N node:cluster workers serving ingest and fan-out on the shared
// ports, the persister in one worker of its own. Real nats-server and Postgres; the host is
// a child process, and /proc tells which worker holds each connection.
import assert from 'node:assert/strict';
import net from 'node:net';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { IngestClient } from '../src/client/ingest-client.js';
import { WsConnection } from '../src/client/ws-subscriber.js';
import { ConfigError, loadConfig } from '../src/config.js';
import { PERSISTER_SLOT, workerPlan } from '../src/workers/plan.js';
import { tokenEvent } from './helpers/events.js';
import { connectionOwner } from './helpers/sockets.js';
import { brokerConfig, expectGapFree, randomName, startServers, threadRows } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';
import { metricValue, spawnWorkerHost, type WorkerHost } from './helpers/workers.js';

test('RS_WORKERS: an integer in [1, 256], named when wrong; more than 1 needs a serving role', () => {
  assert.equal(loadConfig({}).workers, 1);
  assert.equal(loadConfig({ RS_WORKERS: '4' }).workers, 4);
  for (const bad of ['0', '-1', '1.5', 'x', '257']) {
    assert.throws(
      () => loadConfig({ RS_WORKERS: bad }),
      (err: unknown) =>
        err instanceof ConfigError &&
        err.problems.some((p) => p.startsWith(`RS_WORKERS=${JSON.stringify(bad)}`)),
      bad,
    );
  }
  assert.throws(
    () => loadConfig({ RS_WORKERS: '2', RS_ROLES: 'persister' }),
    (err: unknown) => err instanceof ConfigError && /RS_WORKERS=2: .*RS_ROLES has neither/.test(err.message),
  );
  assert.equal(loadConfig({ RS_WORKERS: '1', RS_ROLES: 'persister' }).workers, 1);
});

test('the worker plan: N workers serve the ports, one more runs the persister alone', () => {
  const all = workerPlan(loadConfig({ RS_WORKERS: '3' }));
  assert.deepEqual(
    all.map((p) => [p.slot, [...p.roles].sort().join(','), p.listen]),
    [
      ['1', 'fanout,ingest', true],
      ['2', 'fanout,ingest', true],
      ['3', 'fanout,ingest', true],
      [PERSISTER_SLOT, 'persister', false],
    ],
  );
  const noPersister = workerPlan(loadConfig({ RS_WORKERS: '2', RS_ROLES: 'fanout' }));
  assert.deepEqual(
    noPersister.map((p) => [p.slot, [...p.roles].join(',')]),
    [
      ['1', 'fanout'],
      ['2', 'fanout'],
    ],
  );
});

async function scrape(host: WorkerHost): Promise<string> {
  const res = await fetch(`http://127.0.0.1:${host.httpPort}/metrics`);
  assert.equal(res.status, 200);
  return res.text();
}

test('RS_WORKERS=2: connections land on both workers; a subscriber on one sees what the other ingests, exactly; /metrics counts both', async () => {
  await using servers = await startServers();
  const config = brokerConfig(servers);
  const host = await spawnWorkerHost(config, 2);
  const clients: IngestClient[] = [];
  let ws: WsConnection | undefined;
  try {
    const pids = host.servingPids();
    const thread = randomName('t-');
    const sub = await connectionOwner(host.httpPort, pids, () =>
      WsConnection.open(`ws://127.0.0.1:${host.httpPort}/v1/ws`),
    );
    ws = sub.value;
    assert.ok(sub.pid !== undefined, 'the WebSocket is held by a worker');
    ws.subscribe('s', thread, 0);
    await ws.waitFor((f) => f.type === 'live');

    // Connections one after another, each publishing a batch, until both workers have some.
    const owners: number[] = [];
    let sent = 0;
    const PER = 10;
    while (owners.length < 8 || new Set(owners).size < 2) {
      assert.ok(owners.length < 40, `40 connections, all on ${[...new Set(owners)]}`);
      const client = new IngestClient(`127.0.0.1:${host.grpcPort}`, { ownConnection: true });
      clients.push(client);
      const start = sent;
      const { value: acks, pid } = await connectionOwner(host.grpcPort, pids, () =>
        client.publish(
          Array.from({ length: PER }, (_, k) => tokenEvent(thread, start + k)),
          'PERSISTED',
        ),
      );
      assert.ok(pid !== undefined, 'the gRPC connection is held by a serving worker');
      assert.deepEqual(
        acks.map((a) => a.seq),
        Array.from({ length: PER }, (_, k) => start + k + 1),
      );
      owners.push(pid);
      sent += PER;
    }
    assert.deepEqual([...new Set(owners)].sort(), [...pids].sort());
    assert.ok(
      owners.some((p) => p !== sub.pid),
      'some events were published through the worker the subscriber is not on',
    );

    // The subscriber sees 1..sent, in order, once each, whichever worker took them.
    const events = await waitFor(
      () => {
        const ev = ws?.events('s') ?? [];
        return ev.length >= sent ? ev : undefined;
      },
      { timeoutMs: 30_000, what: `${sent} events on the WebSocket` },
    );
    assert.equal(expectGapFree(events.map((e) => e.seq)), sent);
    assert.deepEqual(
      events.map((e) => (e.content as { i: number }).i),
      Array.from({ length: sent }, (_, i) => i),
    );

    // Whichever worker answers the scrape, it counts every worker's publishes.
    for (let i = 0; i < 4; i++) {
      const text = await scrape(host);
      assert.equal(metricValue(text, 'runstream_ingest_events_total{ack="PERSISTED",outcome="ok"}'), sent);
      assert.equal(metricValue(text, 'runstream_workers'), 3);
      assert.equal(metricValue(text, 'runstream_connections{transport="websocket"}'), 1);
      // The persister worker opens no port, but its metrics are in every answer.
      assert.ok(
        (metricValue(text, 'runstream_persister_batch_events_sum') ?? 0) >= sent,
        'the persister worker reports',
      );
    }
  } finally {
    for (const c of clients) c.close();
    await ws?.close().catch(() => undefined);
    host.child.kill('SIGTERM');
    await host.exited;
  }
});

test('RS_WORKERS=2: kill -9 a serving worker, then the persister, mid-load: each is restarted, every acked event stored once in order', async () => {
  await using servers = await startServers();
  const config = brokerConfig(servers);
  const host = await spawnWorkerHost(config, 2);
  const PRODUCERS = 4;
  const TOTAL = 400;
  const BATCH = 10;
  const threads = Array.from({ length: PRODUCERS }, () => randomName('t-'));
  const acked = new Map<string, number>(); // `${thread}/${event_id}` → seq
  try {
    const produce = async (thread: string): Promise<void> => {
      let next = 0;
      let client = new IngestClient(`127.0.0.1:${host.grpcPort}`, { ownConnection: true });
      while (next < TOTAL) {
        const batch = Array.from({ length: BATCH }, (_, k) => tokenEvent(thread, next + k));
        try {
          const acks = await client.publish(batch, 'PERSISTED', 15_000);
          for (const a of acks) acked.set(`${thread}/${a.event_id}`, a.seq);
          next += BATCH;
        } catch {
          // Its worker died (or the persister did, and the ack timed out): resend the same
          // events, with the same ids, on a new connection, as a producer must.
          client.close();
          await sleep(50);
          client = new IngestClient(`127.0.0.1:${host.grpcPort}`, { ownConnection: true });
        }
      }
      client.close();
    };
    const killer = async (): Promise<void> => {
      for (const [worker, threshold] of [
        ['1', 300],
        [PERSISTER_SLOT, 800],
      ] as const) {
        await waitFor(() => acked.size >= threshold, { timeoutMs: 120_000, what: `${threshold} acks` });
        const pid = host.pidOf(worker);
        process.kill(pid, 'SIGKILL');
        await waitFor(() => host.pidOf(worker) !== pid, {
          timeoutMs: 60_000,
          what: `worker ${worker} restarted`,
        });
      }
    };
    await Promise.all([...threads.map(produce), killer()]);

    for (const thread of threads) {
      const rows = await threadRows(servers.db, thread);
      assert.equal(expectGapFree(rows.map((r) => r.seq)), TOTAL, thread);
      assert.deepEqual(
        rows.map((r) => (r.content as { i: number }).i),
        Array.from({ length: TOTAL }, (_, i) => i),
      );
      for (const r of rows) assert.equal(acked.get(`${thread}/${r.event_id}`), r.seq);
    }
    assert.equal(acked.size, PRODUCERS * TOTAL);
    const exits = host.lines.filter((l) => l.msg === 'worker exited; restarting');
    assert.deepEqual(
      exits.map((l) => [l.worker, l.signal]),
      [
        ['1', 'SIGKILL'],
        [PERSISTER_SLOT, 'SIGKILL'],
      ],
    );
    const text = await scrape(host);
    assert.equal(metricValue(text, 'runstream_worker_restarts_total{worker="1"}'), 1);
    assert.equal(metricValue(text, `runstream_worker_restarts_total{worker="${PERSISTER_SLOT}"}`), 1);
    assert.equal(metricValue(text, 'runstream_workers'), 3);
  } finally {
    host.child.kill('SIGTERM');
    await host.exited;
  }
});

for (const [how, signal, group] of [
  ['SIGTERM to the primary', 'SIGTERM', false],
  ['SIGINT to the whole process group (Ctrl-C in a terminal)', 'SIGINT', true],
] as const) {
  test(`RS_WORKERS=2: ${how} drains the serving workers, then the persister, and exits 0`, async () => {
    await using servers = await startServers();
    const config = brokerConfig(servers);
    const host = await spawnWorkerHost(config, 2, {}, { detached: group });
    const thread = randomName('t-');
    const acked = new Set<string>();
    const client = new IngestClient(`127.0.0.1:${host.grpcPort}`, { ownConnection: true });
    const pids = [...host.servingPids(), host.pidOf(PERSISTER_SLOT)];
    const producing = (async () => {
      for (let i = 0; i < 1_000_000; i += 10) {
        try {
          const acks = await client.publish(
            Array.from({ length: 10 }, (_, k) => tokenEvent(thread, i + k)),
            'PERSISTED',
            15_000,
          );
          for (const a of acks) acked.add(a.event_id);
        } catch {
          return; // the host is shutting down
        }
      }
    })();
    await waitFor(() => acked.size >= 100, { timeoutMs: 60_000, what: '100 acks' });
    if (group) process.kill(-(host.child.pid as number), signal);
    else host.child.kill(signal);
    const exit = await host.exited;
    await producing;
    client.close();
    assert.deepEqual(exit, { code: 0, signal: null });

    // Every worker is gone, each exited 0, the persister last (the primary's own lines, in its order).
    for (const pid of pids) assert.throws(() => process.kill(pid, 0), { code: 'ESRCH' }, `pid ${pid}`);
    const stopped = host.lines.filter((l) => l.msg === 'worker stopped').map((l) => [l.worker, l.code]);
    assert.equal(stopped.length, 3);
    assert.deepEqual(stopped.slice(0, 2).sort(), [
      ['1', 0],
      ['2', 0],
    ]);
    assert.deepEqual(stopped[2], [PERSISTER_SLOT, 0]);
    for (const w of ['1', '2', PERSISTER_SLOT]) {
      assert.ok(
        host.lines.some((l) => l.worker === w && l.msg === 'runstream stopped'),
        `worker ${w} stopped gracefully`,
      );
    }
    assert.ok(host.lines.some((l) => l.msg === 'runstream stopped' && l.worker === undefined));

    // Nothing acked is missing.
    const rows = await threadRows(servers.db, thread);
    const stored = new Set(rows.map((r) => r.event_id));
    for (const id of acked) assert.ok(stored.has(id), id);
    expectGapFree(rows.map((r) => r.seq));
  });
}

test('RS_WORKERS=2: a worker that cannot start (its port is taken) makes the host exit 1, naming the problem', async () => {
  await using servers = await startServers();
  const taken = net.createServer();
  await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
  try {
    const port = (taken.address() as net.AddressInfo).port;
    const config = brokerConfig(servers, { httpPort: port });
    await assert.rejects(spawnWorkerHost(config, 2), (err: Error) => {
      assert.match(err.message, /^the host exited with code 1 before it started/);
      assert.match(err.message, /EADDRINUSE/);
      assert.match(err.message, /worker \d exited before it started/);
      return true;
    });
  } finally {
    taken.close();
  }
});
