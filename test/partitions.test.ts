// Partitioned persisters: every thread belongs to one partition, one persister at a time
// stores a partition (a lease in Postgres, proven inside the seq transaction), and the
// persisters alive divide the partitions among themselves, across joins, SIGTERM, kill -9
// and a persister stopped past its lease.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { startBroker } from '../src/broker.js';
import { IngestClient } from '../src/client/ingest-client.js';
import { loadConfig } from '../src/config.js';
import { partitionOf } from '../src/domain/partition.js';
import { ensureLogStream, partitionStream } from '../src/log/streams.js';
import { Subjects } from '../src/log/subjects.js';
import { createLogger } from '../src/logger.js';
import { storeBatch } from '../src/persist/batch-assigner.js';
import {
  acquire,
  ensureLayout,
  FencedError,
  fence,
  heartbeat,
  type LeaseScope,
  release,
  renew,
  restoreMissing,
  shareOf,
} from '../src/persist/leases.js';
import { migrate } from '../src/persist/migrate.js';
import { tokenEvent } from './helpers/events.js';
import { startNatsServer } from './helpers/nats-server.js';
import { logRecord } from './helpers/records.js';
import {
  type BrokerProcess,
  brokerConfig,
  expectGapFree,
  randomName,
  spawnBroker,
  startServers,
  threadRows,
} from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

test('partitionOf is FNV-1a of the thread id: fixed values, and thread ids spread evenly', () => {
  assert.equal(partitionOf('', 2 ** 32), 2166136261);
  assert.equal(partitionOf('a', 2 ** 32), 3826002220);
  assert.equal(partitionOf('thread-1', 32), 31);
  const counts = new Array<number>(32).fill(0);
  for (let i = 0; i < 32_000; i++)
    counts[partitionOf(`t-${i}`, 32)] = (counts[partitionOf(`t-${i}`, 32)] ?? 0) + 1;
  for (const n of counts) assert.ok(n > 700 && n < 1300, `uneven partitions: ${counts.join(' ')}`);
});

/** NATS subject matching: `*` is one token, `>` the rest. */
function matches(filter: string, subject: string): boolean {
  const f = filter.split('.');
  const s = subject.split('.');
  for (let i = 0; i < f.length; i++) {
    if (f[i] === '>') return s.length > i;
    if (i >= s.length || (f[i] !== '*' && f[i] !== s[i])) return false;
  }
  return f.length === s.length;
}

test("log subjects: a partition's filter takes its threads only, and never a subject of the older layout", () => {
  const subjects = new Subjects('rs', 8);
  // A thread named like a partition number, with a run named like a thread.
  for (const [thread, run] of [
    ['7', 'x'],
    ['3', '7'],
    ['abc', 'run-1'],
  ] as const) {
    const p = partitionOf(thread, 8);
    assert.equal(subjects.log(thread, run), `rs.log.${p}.${thread}.${run}`);
    assert.ok(matches(subjects.logAll, subjects.log(thread, run)));
    assert.ok(matches(subjects.logOfThread(thread), subjects.log(thread, run)));
    for (let q = 0; q < 8; q++) {
      assert.equal(matches(subjects.logOfPartition(q), subjects.log(thread, run)), q === p);
      assert.equal(matches(subjects.logOfPartition(q), subjects.legacyLog(thread, run)), false);
    }
    assert.equal(matches(subjects.legacyLogAll, subjects.log(thread, run)), false);
    assert.ok(matches(subjects.legacyLogAll, subjects.legacyLog(thread, run)));
    assert.ok(matches(subjects.legacyLogOfThread(thread), subjects.legacyLog(thread, run)));
    assert.equal(matches(subjects.legacyLogOfThread(thread), subjects.log(thread, run)), false);
  }
});

test('RS_PARTITIONS and RS_PERSISTER_LEASE_MS are checked, naming the variable', () => {
  assert.throws(() => loadConfig({ RS_PARTITIONS: '0' }), /RS_PARTITIONS/);
  assert.throws(() => loadConfig({ RS_PARTITIONS: '4096' }), /RS_PARTITIONS/);
  assert.throws(() => loadConfig({ RS_PERSISTER_LEASE_MS: '10' }), /RS_PERSISTER_LEASE_MS/);
  assert.equal(loadConfig({}).partitions, 32);
});

test('leases: one holder at a time; a taken-over lease commits nothing; a takeover waits for the transaction in flight', async () => {
  await using servers = await startServers();
  const db = servers.db;
  await migrate(db, createLogger('warn'));
  const stream = randomName('L_');
  await ensureLayout(db, stream, 4);
  const a: LeaseScope = { stream, member: 'a', leaseMs: 400 };
  const b: LeaseScope = { stream, member: 'b', leaseMs: 400 };
  assert.deepEqual(await heartbeat(db, a), { live: 1, index: 0, rows: 4 });
  const both = await heartbeat(db, b);
  assert.deepEqual(both, { live: 2, index: 1, rows: 4 });
  // Shares add up to the partitions, however they divide.
  for (const [p, live] of [
    [4, 3],
    [32, 12],
    [32, 2],
    [1, 2],
  ] as const) {
    const shares = Array.from({ length: live }, (_, index) => shareOf(p, { live, index, rows: p }));
    assert.equal(
      shares.reduce((x, y) => x + y, 0),
      p,
    );
    assert.ok(Math.max(...shares) - Math.min(...shares) <= 1, `${p} over ${live}: ${shares}`);
  }

  const held = await acquire(db, a, 4);
  const e = held[0]?.epoch as number;
  assert.deepEqual(
    held.map((l) => [l.partition, l.epoch]),
    [
      [0, e],
      [1, e],
      [2, e],
      [3, e],
    ],
  );
  assert.deepEqual(await acquire(db, b, 4), [], 'nothing is free while a holds every lease');

  // a's seq transaction in flight on partition 0 while a's leases run out.
  const inflight = await db.connect();
  try {
    await inflight.query('BEGIN');
    await fence(inflight, a, [{ partition: 0, epoch: e, upto: 10 }]);
    await new Promise((r) => setTimeout(r, 500));
    const taken = await acquire(db, b, 4);
    assert.deepEqual(
      taken.map((l) => l.partition),
      [1, 2, 3],
      'partition 0 is not taken while a transaction proving it is open',
    );
    await inflight.query('COMMIT');
  } finally {
    inflight.release();
  }
  const [p0] = await acquire(db, b, 4);
  assert.deepEqual(
    [p0?.partition, p0?.epoch, p0?.lastOffset],
    [0, e + 1, 10],
    "a's commit moved the position b starts from",
  );

  // a no longer holds anything: its renewals return nothing, its fence throws, its batch commits nothing.
  assert.deepEqual([...(await renew(db, a, held))], []);
  await assert.rejects(fence(db, a, [{ partition: 0, epoch: e, upto: 11 }]), (err: unknown) => {
    assert.ok(err instanceof FencedError);
    assert.deepEqual(
      err.lost.map((l) => l.partition),
      [0],
    );
    return true;
  });
  const t = randomName('t-');
  const record = {
    thread_id: t,
    run_id: 'r',
    event_id: 'e1',
    event_type: 'ai_chunk',
    category: 'message' as const,
    user_id: '',
    created_at: new Date().toISOString(),
    content_json: '{}',
    metadata_json: '{}',
  };
  const client = await db.connect();
  try {
    await assert.rejects(
      storeBatch(client, new Map([[t, [{ record, offset: 11 }]]]), {
        scope: a,
        entries: [{ partition: 0, epoch: e, upto: 11 }],
      }),
      FencedError,
    );
    // b's lease proves the same batch.
    await storeBatch(client, new Map([[t, [{ record, offset: 11 }]]]), {
      scope: b,
      entries: [{ partition: 0, epoch: e + 1, upto: 11 }],
    });
  } finally {
    client.release();
  }
  assert.deepEqual(
    (await threadRows(db, t)).map((r) => [r.seq, r.event_id]),
    [[1, 'e1']],
  );

  // Released leases are free at once, with a new epoch.
  await release(db, b, [p0 as NonNullable<typeof p0>]);
  const again = await acquire(db, a, 4);
  assert.deepEqual(
    again.map((l) => [l.partition, l.epoch, l.lastOffset]),
    [[0, e + 2, 11]],
  );

  // The lease store wiped by hand: the rows come back at position 0, with epochs never held before.
  await db.query('DELETE FROM log_partitions WHERE stream = $1', [stream]);
  assert.equal((await heartbeat(db, a)).rows, 0);
  assert.deepEqual(await restoreMissing(db, stream, 4), [0, 1, 2, 3]);
  const fresh = await acquire(db, a, 4);
  assert.ok(fresh.every((l) => l.epoch > e + 2 && l.lastOffset === 0));
  await assert.rejects(fence(db, b, [{ partition: 0, epoch: e + 1, upto: 12 }]), FencedError);
});

test('a lease store wiped under load: an error names it, the partitions come back, nothing acked is lost or stored twice', async () => {
  await using servers = await startServers();
  const config = brokerConfig(servers, { partitions: 4, persisterLeaseMs: 1000 });
  const broker = await spawnBroker(config, { RS_PERSISTER_LEASE_MS: '1000' });
  try {
    using client = new IngestClient(`127.0.0.1:${broker.grpcPort}`);
    const threads = Array.from({ length: 4 }, () => randomName('w-'));
    let wiped = false;
    await Promise.all(
      threads.map(async (thread) => {
        for (let i = 0; i < 60; i++) {
          if (i === 20 && !wiped) {
            wiped = true;
            await servers.db.query('DELETE FROM log_partitions WHERE stream = $1', [config.streamName]);
          }
          const [ack] = await client.publish([tokenEvent(thread, i)], 'PERSISTED');
          assert.equal(ack?.seq, i + 1, `${thread} e${i}`);
        }
      }),
    );
    for (const thread of threads) {
      const rows = await threadRows(servers.db, thread);
      assert.deepEqual(
        rows.map((r) => [r.seq, r.event_id]),
        Array.from({ length: 60 }, (_, i) => [i + 1, `e${i}`]),
      );
    }
    assert.match(broker.output(), /log_partitions holds 0 rows for stream .*not RS_PARTITIONS=4/);
  } finally {
    await broker.kill();
  }
});

test('a partition count other than the log one is refused at start, naming both', async () => {
  await using servers = await startServers();
  const log = createLogger('fatal');
  const config = brokerConfig(servers, { partitions: 16 });
  await (await startBroker(config, log)).close();
  await assert.rejects(
    startBroker({ ...config, partitions: 8 }, log),
    /RS_PARTITIONS=8.*created with 16 partitions/,
  );
  // The log is new, but Postgres keeps the persisters' layout under its name.
  const other = brokerConfig(servers, { partitions: 4 });
  await ensureLayout(servers.db, other.streamName, 8);
  await assert.rejects(startBroker(other, log), /RS_PARTITIONS=4.*store 8 partitions/);
});

test('persisters divide the partitions, hand them over on SIGTERM, take them over after kill -9 and from one stopped past its lease; every acked event stored once, in order', async (t) => {
  await using servers = await startServers();
  const PARTITIONS = 8;
  const LEASE_MS = 1500;
  const config = brokerConfig(servers, {
    partitions: PARTITIONS,
    roles: new Set(['ingest', 'fanout'] as const),
    persistedAckTimeoutMs: 20_000,
  });
  const env = {
    RS_ROLES: 'persister',
    RS_PARTITIONS: String(PARTITIONS),
    RS_PERSISTER_LEASE_MS: String(LEASE_MS),
  };
  await using ingest = await startBroker(config, createLogger('warn'));
  const persisters: BrokerProcess[] = [];
  const spawnPersister = async () => {
    const p = await spawnBroker(config, env);
    persisters.push(p);
    return p;
  };
  t.after(async () => {
    for (const p of persisters) {
      p.child.kill('SIGCONT');
      await p.kill();
    }
  });

  /** Partitions held now (lease unexpired), by persister pid. */
  const holders = async (): Promise<Map<number, number>> => {
    const { rows } = await servers.db.query<{ owner: string }>(
      'SELECT owner FROM log_partitions WHERE stream = $1 AND owner IS NOT NULL AND expires_at > now()',
      [config.streamName],
    );
    const by = new Map<number, number>();
    for (const r of rows) {
      const pid = Number(/-(\d+)-[0-9a-f]{8}$/.exec(r.owner)?.[1]);
      by.set(pid, (by.get(pid) ?? 0) + 1);
    }
    return by;
  };
  const held = async (p: BrokerProcess) => (await holders()).get(p.child.pid as number) ?? 0;
  const split = async (x: BrokerProcess, y: BrokerProcess) =>
    (await held(x)) === PARTITIONS / 2 && (await held(y)) === PARTITIONS / 2;
  const timeUntil = async (what: string, ok: () => Promise<boolean>): Promise<number> => {
    const start = performance.now();
    await waitFor(ok, { timeoutMs: 30_000, intervalMs: 25, what });
    return Math.round(performance.now() - start);
  };

  // Producers: 16 threads, one event at a time each, resent until acked (same event id).
  const threads = Array.from({ length: 16 }, () => randomName('t-'));
  const acked = new Map<string, Map<number, number>>(threads.map((th) => [th, new Map()]));
  let producing = true;
  const client = new IngestClient(`127.0.0.1:${ingest.grpcPort}`);
  t.after(() => client.close());
  const produce = async (thread: string) => {
    for (let i = 0; producing; i++) {
      for (;;) {
        try {
          const [ack] = await client.publish([tokenEvent(thread, i)], 'PERSISTED');
          acked.get(thread)?.set(i, ack?.seq as number);
          break;
        } catch {
          await new Promise((r) => setTimeout(r, 100));
        }
      }
    }
  };
  const ackedCount = () => [...acked.values()].reduce((n, m) => n + m.size, 0);

  const p1 = await spawnPersister();
  await timeUntil('p1 to hold every partition', async () => (await held(p1)) === PARTITIONS);
  const producers = threads.map(produce);
  await waitFor(() => ackedCount() >= 100, { what: '100 acks' });

  const p2 = await spawnPersister();
  const joinMs = await timeUntil('p1 and p2 to hold half each', () => split(p1, p2));

  let before = ackedCount();
  await p1.stop();
  const sigtermMs = await timeUntil(
    'p2 to hold every partition after p1 SIGTERM',
    async () => (await held(p2)) === PARTITIONS,
  );
  await waitFor(() => ackedCount() >= before + 100, { what: 'acks after the SIGTERM' });

  const p3 = await spawnPersister();
  await timeUntil('p2 and p3 to hold half each', () => split(p2, p3));
  before = ackedCount();
  await p2.kill();
  const killMs = await timeUntil(
    'p3 to hold every partition after p2 kill -9',
    async () => (await held(p3)) === PARTITIONS,
  );
  await waitFor(() => ackedCount() >= before + 100, { what: 'acks after the kill' });

  // p3 stopped past its lease, with events arriving for it; p4 takes over and stores more.
  const p4 = await spawnPersister();
  await timeUntil('p3 and p4 to hold half each', () => split(p3, p4));
  p3.child.kill('SIGSTOP');
  const stopMs = await timeUntil(
    'p4 to hold every partition while p3 is stopped',
    async () => (await held(p4)) === PARTITIONS,
  );
  before = ackedCount();
  await waitFor(() => ackedCount() >= before + 200, { what: 'acks while p3 is stopped' });
  p3.child.kill('SIGCONT');
  await waitFor(() => /dropped a partition: its lease was taken over/.test(p3.output()), {
    timeoutMs: 30_000,
    what: 'p3 to find its leases taken over',
  });
  before = ackedCount();
  await waitFor(() => ackedCount() >= before + 100, { what: 'acks after p3 resumed' });
  await timeUntil('p3 and p4 to hold half each again', () => split(p3, p4));

  producing = false;
  await Promise.all(producers);
  t.diagnostic(
    `handover: join ${joinMs} ms, SIGTERM ${sigtermMs} ms, kill -9 ${killMs} ms, SIGSTOP ${stopMs} ms ` +
      `(lease ${LEASE_MS} ms); ${ackedCount()} events acked`,
  );

  // Every acked event stored once, each thread gap-free and in send order, acks = stored seqs.
  for (const thread of threads) {
    const rows = await threadRows(servers.db, thread);
    const n = expectGapFree(rows.map((r) => r.seq));
    assert.deepEqual(
      rows.map((r) => r.event_id),
      Array.from({ length: n }, (_, i) => `e${i}`),
      `thread ${thread} in send order`,
    );
    for (const [i, seq] of acked.get(thread) ?? [])
      assert.equal(seq, i + 1, `${thread} e${i} acked with its seq`);
    assert.equal(n, acked.get(thread)?.size, `${thread}: stored = acked`);
  }
});

test('an upgrade from the single-stream log: what it holds unstored is stored first, in order; offsets keep growing; nothing stored twice', async () => {
  await using servers = await startServers();
  const config = brokerConfig(servers, { partitions: 4 });
  const subjects = new Subjects(config.subjectPrefix, config.partitions);
  const [t, u] = [randomName('t-'), randomName('u-')];
  // The log as the single-stream layout left it: one stream, `<prefix>.log.>`, whose first
  // two messages the older persister stored (its checkpoint says 2, its rows are there).
  const nc = await connect({ servers: servers.nats.url });
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: config.streamName, subjects: [subjects.logAll] });
  const js = jetstream(nc);
  const legacy = [
    [u, 'u1'],
    [t, 't1'],
    [t, 't2'],
    [u, 'u2'],
    [t, 't3'],
  ] as const;
  for (const [thread, id] of legacy) {
    await js.publish(subjects.legacyLog(thread, 'r'), JSON.stringify(logRecord(thread, 'r', id)), {
      msgID: `${thread}:${id}`,
    });
  }
  await migrate(servers.db, createLogger('warn'));
  const old = await servers.db.connect();
  try {
    await storeBatch(
      old,
      new Map([
        [u, [{ record: logRecord(u, 'r', 'u1'), offset: 1 }]],
        [t, [{ record: logRecord(t, 'r', 't1'), offset: 2 }]],
      ]),
    );
  } finally {
    old.release();
  }
  await servers.db.query('INSERT INTO persister_checkpoints (stream, last_offset) VALUES ($1, 2)', [
    config.streamName,
  ]);

  await using broker = await startBroker(config, createLogger('warn'));
  using client = new IngestClient(`127.0.0.1:${broker.grpcPort}`);
  const acks = await client.publish(
    [tokenEvent(t, 4, { run_id: 'r' }), tokenEvent(u, 3, { run_id: 'r' })],
    'PERSISTED',
  );
  assert.deepEqual(
    acks.map((a) => a.seq),
    [4, 3],
    'the older log came first',
  );
  const rows = await threadRows(servers.db, t);
  assert.deepEqual(
    rows.map((r) => [r.seq, r.event_id]),
    [
      [1, 't1'],
      [2, 't2'],
      [3, 't3'],
      [4, 'e4'],
    ],
  );
  const offsets = (
    await servers.db.query<{ o: string }>(
      'SELECT stream_offset AS o FROM run_events WHERE thread_id = $1 ORDER BY seq',
      [t],
    )
  ).rows.map((r) => Number(r.o));
  assert.ok((offsets[3] as number) > 5, `offsets ${offsets} keep growing past the older log`);
  assert.deepEqual(
    offsets,
    [...offsets].sort((a, b) => a - b),
  );
  assert.deepEqual(
    (await threadRows(servers.db, u)).map((r) => r.event_id),
    ['u1', 'u2', 'e3'],
  );
  // The older stream keeps its messages, under its own subjects only.
  const info = await jsm.streams.info(config.streamName);
  assert.deepEqual(info.config.subjects, [subjects.legacyLogAll]);
  assert.equal(info.state.messages, 5);
  assert.equal(broker.persister?.storedCount, 5, 't2, t3, u2 and the two new ones');
  await nc.close();
});

test("a killed persister's partitions are taken over when its connection closes, not a lease later", async (t) => {
  await using servers = await startServers();
  // A lease far longer than the test: only the closed connection can free the partitions.
  const config = brokerConfig(servers, { partitions: 4, persisterLeaseMs: 600_000 });
  const env = { RS_ROLES: 'persister', RS_PARTITIONS: '4', RS_PERSISTER_LEASE_MS: '600000' };
  const p1 = await spawnBroker(config, env);
  const p2 = await spawnBroker(config, env);
  t.after(async () => {
    await p1.kill();
    await p2.kill();
  });
  const heldBy = async (p: BrokerProcess) =>
    Number(
      (
        await servers.db.query<{ n: string }>(
          `SELECT count(*) AS n FROM log_partitions WHERE stream = $1 AND owner LIKE $2 AND expires_at > now()`,
          [config.streamName, `%-${p.child.pid}-%`],
        )
      ).rows[0]?.n,
    );
  await waitFor(async () => (await heldBy(p1)) === 2 && (await heldBy(p2)) === 2, {
    timeoutMs: 30_000,
    what: 'two partitions each',
  });
  await p1.kill();
  await waitFor(async () => (await heldBy(p2)) === 4, { timeoutMs: 30_000, what: 'p2 to take all four' });
  await using ingest = await startBroker(
    { ...config, roles: new Set(['ingest'] as const) },
    createLogger('warn'),
  );
  using client = new IngestClient(`127.0.0.1:${ingest.grpcPort}`);
  const threads = Array.from({ length: 8 }, () => randomName('k-'));
  const acks = await client.publish(
    threads.map((th) => tokenEvent(th, 0)),
    'PERSISTED',
  );
  assert.deepEqual(
    acks.map((a) => a.seq),
    threads.map(() => 1),
  );
  assert.match(p2.output(), /persisters gone/);
});

test('processes creating the log at the same moment all start (a create racing another is looked at again)', async () => {
  await using nats = await startNatsServer({ useEnv: false });
  const subjects = new Subjects(randomName('race'), 8);
  const streamName = randomName('RACE_');
  const conns = await Promise.all(Array.from({ length: 6 }, () => connect({ servers: nats.url })));
  try {
    await Promise.all(
      conns.map(async (nc) =>
        ensureLogStream(await jetstreamManager(nc), {
          streamName,
          subjects,
          maxAgeMs: 3_600_000,
          duplicateWindowMs: 60_000,
          replicas: 1,
        }),
      ),
    );
    const jsm = await jetstreamManager(conns[0] as NatsConnection);
    for (let p = 0; p < 8; p++) {
      assert.deepEqual((await jsm.streams.info(partitionStream(streamName, p))).config.subjects, [
        subjects.logOfPartition(p),
      ]);
    }
  } finally {
    for (const nc of conns) await nc.close();
  }
});
