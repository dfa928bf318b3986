// The log's partition streams made again under the same name (NATS lost its store, or an
// operator deleted them), or RS_STREAM naming another log: offsets start again at 1. What
// Postgres recorded against the old streams' offsets (each partition's position, the deletion
// horizons of its threads and runs) says nothing of the new ones: events published to the new
// log are all stored, whether the persister starts after or is running when it happens.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { type Broker, startBroker } from '../src/broker.js';
import { IngestClient } from '../src/client/ingest-client.js';
import type { Config } from '../src/config.js';
import { UnavailableError } from '../src/errors.js';
import { partitionStream } from '../src/log/streams.js';
import { createLogger } from '../src/logger.js';
import { deleteRows } from '../src/persist/deletions.js';
import { tokenEvent } from './helpers/events.js';
import { http } from './helpers/history.js';
import { brokerConfig, randomName, startServers, startStack, threadRows } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

/** Deletes the log's partition streams, as a NATS that lost its store would have none. */
async function deleteLog(natsUrl: string, config: Config): Promise<void> {
  const nc = await connect({ servers: natsUrl });
  try {
    const jsm = await jetstreamManager(nc);
    for (let p = 0; p < config.partitions; p++)
      await jsm.streams.delete(partitionStream(config.streamName, p));
  } finally {
    await nc.close();
  }
}

async function withIngest<T>(broker: Broker, f: (client: IngestClient) => Promise<T>): Promise<T> {
  const client = new IngestClient(`127.0.0.1:${broker.grpcPort}`);
  try {
    return await f(client);
  } finally {
    client.close();
  }
}

/**
 * Sends `thread` events e1..e`before` (and `other` 5 events, so the log runs past them), deletes
 * `what` of it, makes a new log (`how`), sends e`before+1`..e`before+after` to it, and returns
 * their acks and the thread's rows.
 */
async function deleteThenNewLog(o: {
  readonly what: 'thread' | 'run';
  readonly how: 'same name' | 'RS_STREAM renamed';
  readonly before: number;
  readonly after: number;
}): Promise<{ acks: { seq?: string | number }[]; rows: { event_id: string; seq: number }[] }> {
  await using servers = await startServers();
  const config = brokerConfig(servers, { partitions: 1 });
  const t = randomName('t-');
  const other = randomName('t-');
  let broker = await startBroker(config, createLogger(config.logLevel));
  try {
    await withIngest(broker, async (client) => {
      for (let i = 1; i <= o.before; i++) await client.publish([tokenEvent(t, i)], 'PERSISTED');
      for (let i = 1; i <= 5; i++) await client.publish([tokenEvent(other, i)], 'PERSISTED');
    });
    const path = o.what === 'thread' ? `/v1/threads/${t}` : `/v1/threads/${t}/runs/run-1`;
    const del = await http(`http://127.0.0.1:${broker.httpPort}${path}`, { method: 'DELETE' });
    assert.equal(del.status, 200, JSON.stringify(del.body));
    await broker.close();
    let next = config;
    if (o.how === 'same name') await deleteLog(servers.nats.url, config);
    else next = { ...config, streamName: randomName('RS_'), subjectPrefix: randomName('rs') };
    broker = await startBroker(next, createLogger(config.logLevel));
    // Offsets from 1 again, in the new log: below the old horizon, but none of them deleted.
    const acks = await withIngest(broker, async (client) => {
      const out = [];
      for (let i = o.before + 1; i <= o.before + o.after; i++) {
        out.push(...(await client.publish([tokenEvent(t, i)], 'PERSISTED')));
      }
      return out;
    });
    return { acks, rows: await threadRows(servers.db, t) };
  } finally {
    await broker.close();
  }
}

for (const [what, how] of [
  ['thread', 'same name'],
  ['run', 'same name'],
  ['thread', 'RS_STREAM renamed'],
] as const) {
  test(`a ${what} deleted before its log was made again (${how}) stores the events it is sent after`, async () => {
    // Deleted at offset 3 + 5 = 8; the new log's 8 messages are all below it.
    const { acks, rows } = await deleteThenNewLog({ what, how, before: 3, after: 8 });
    assert.deepEqual(
      acks.filter((a) => !(Number(a.seq) > 0)),
      [],
      'every event took a seq',
    );
    // Seqs go on above the thread's head (3): they are never reused.
    assert.deepEqual(
      rows.map((r) => [r.event_id, Number(r.seq)]),
      Array.from({ length: 8 }, (_, k) => [`e${4 + k}`, 4 + k]),
    );
  });
}

test('a log made again and written past the old position before a persister takes it is stored whole', async () => {
  await using servers = await startServers();
  const config = brokerConfig(servers, { partitions: 1 });
  const t = randomName('t-');
  let broker = await startBroker(config, createLogger(config.logLevel));
  try {
    await withIngest(broker, async (client) => {
      for (let i = 1; i <= 3; i++) await client.publish([tokenEvent(t, i)], 'PERSISTED');
    });
    await broker.close();
    await deleteLog(servers.nats.url, config);
    // Ingest alone first: the new log reaches offset 6, past the old position (3), before a
    // persister reads it.
    const ingestOnly: Config = { ...config, roles: new Set(['ingest']) };
    broker = await startBroker(ingestOnly, createLogger(config.logLevel));
    await withIngest(broker, async (client) => {
      for (let i = 4; i <= 9; i++) await client.publish([tokenEvent(t, i)], 'ACCEPTED');
    });
    await broker.close();
    broker = await startBroker(config, createLogger(config.logLevel));
    await waitFor(async () => (await threadRows(servers.db, t)).length >= 9, {
      what: 'e1-e9 stored',
      timeoutMs: 10_000,
    });
    const rows = await threadRows(servers.db, t);
    assert.deepEqual(
      rows.map((r) => r.event_id),
      ['e1', 'e2', 'e3', 'e4', 'e5', 'e6', 'e7', 'e8', 'e9'],
    );
  } finally {
    await broker.close();
  }
});

test('a log made again under a running persister is read from its start', async () => {
  await using servers = await startServers();
  const config = brokerConfig(servers, { partitions: 1 });
  const t = randomName('t-');
  const broker = await startBroker(config, createLogger(config.logLevel));
  let ingest: Broker | undefined;
  try {
    await withIngest(broker, async (client) => {
      for (let i = 1; i <= 5; i++) await client.publish([tokenEvent(t, i)], 'PERSISTED');
    });
    await deleteLog(servers.nats.url, config);
    // Another process makes the log again (an ingest starting), and writes offsets 1..8 to it:
    // past the running persister's position (5).
    ingest = await startBroker({ ...config, roles: new Set(['ingest']) }, createLogger(config.logLevel));
    await withIngest(ingest, async (client) => {
      for (let i = 6; i <= 13; i++) await client.publish([tokenEvent(t, i)], 'ACCEPTED');
    });
    await waitFor(async () => (await threadRows(servers.db, t)).length >= 13, {
      what: 'e1-e13 stored',
      timeoutMs: 20_000,
    });
    const rows = await threadRows(servers.db, t);
    assert.deepEqual(
      rows.map((r) => r.event_id),
      Array.from({ length: 13 }, (_, i) => `e${i + 1}`),
    );
  } finally {
    await ingest?.close();
    await broker.close();
  }
});

test('a partition row from before log creation times were kept keeps its deletion horizons', async () => {
  await using servers = await startServers();
  const config = brokerConfig(servers, { partitions: 1 });
  const t = randomName('t-');
  let broker = await startBroker(config, createLogger(config.logLevel));
  try {
    await withIngest(broker, async (client) => {
      for (let i = 1; i <= 4; i++) await client.publish([tokenEvent(t, i)], 'PERSISTED');
    });
    const del = await http(`http://127.0.0.1:${broker.httpPort}/v1/threads/${t}`, { method: 'DELETE' });
    assert.equal(del.status, 200, JSON.stringify(del.body));
    await broker.close();
    await servers.db.query('UPDATE log_partitions SET log_created = NULL WHERE stream = $1', [
      config.streamName,
    ]);
    broker = await startBroker(config, createLogger(config.logLevel));
    await waitFor(
      async () =>
        (
          await servers.db.query('SELECT log_created FROM log_partitions WHERE stream = $1', [
            config.streamName,
          ])
        ).rows[0]?.log_created,
      { what: "the stream's creation time recorded" },
    );
    const { rows } = await servers.db.query(
      'SELECT deleted_upto_offset::int AS h FROM thread_heads WHERE thread_id = $1',
      [t],
    );
    assert.deepEqual(rows, [{ h: 4 }]);
  } finally {
    await broker.close();
  }
});

test('a delete that read a log made again before a persister took it up is refused, and deletes nothing', async () => {
  await using servers = await startServers();
  const config = brokerConfig(servers, { partitions: 1 });
  const t = randomName('t-');
  const broker = await startBroker(config, createLogger(config.logLevel));
  try {
    await withIngest(broker, async (client) => {
      for (let i = 1; i <= 2; i++) await client.publish([tokenEvent(t, i)], 'PERSISTED');
    });
    const partition = { stream: config.streamName, index: 0 };
    const { rows } = await servers.db.query('SELECT log_created FROM log_partitions WHERE stream = $1', [
      config.streamName,
    ]);
    const known = rows[0]?.log_created as string;
    assert.ok(known);
    await assert.rejects(
      deleteRows(servers.db, {
        threadId: t,
        logHorizon: 2,
        partition: { ...partition, logCreated: `${known}-again` },
      }),
      (err: Error) => err instanceof UnavailableError && /made again/.test(err.message),
    );
    assert.equal((await threadRows(servers.db, t)).length, 2);
    const done = await deleteRows(servers.db, {
      threadId: t,
      logHorizon: 2,
      partition: { ...partition, logCreated: known },
    });
    assert.equal(done.events, 2);
  } finally {
    await broker.close();
  }
});

test('NATS back without its store: the running broker makes the log again, stores what it is sent, and lets deleted threads live again', async () => {
  await using stack = await startStack({ partitions: 1 }, { own: true });
  const [t, o] = [randomName('t-'), randomName('o-')];
  for (let i = 1; i <= 3; i++) await stack.client.publish([tokenEvent(t, i)], 'PERSISTED');
  const del = await http(`${stack.httpUrl}/v1/threads/${t}`, { method: 'DELETE' });
  assert.equal(del.status, 200, JSON.stringify(del.body));
  for (let i = 1; i <= 5; i++) await stack.client.publish([tokenEvent(o, i)], 'PERSISTED');
  await stack.servers.nats.restart({ wipeStore: true });
  // Sent as a producer does: again with the same ids while the answer is UNAVAILABLE.
  const send = async (thread: string, i: number) => {
    for (let attempt = 0; ; attempt++) {
      try {
        return await stack.client.publish([tokenEvent(thread, i)], 'PERSISTED');
      } catch (err) {
        if (attempt > 100) throw err;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  };
  const acks = [];
  for (let i = 4; i <= 9; i++) acks.push(...(await send(t, i)));
  for (let i = 6; i <= 8; i++) acks.push(...(await send(o, i)));
  assert.deepEqual(
    acks.filter((a) => !(Number(a.seq) > 0)),
    [],
    'every event took a seq',
  );
  assert.deepEqual(
    (await threadRows(stack.db, t)).map((r) => [r.event_id, r.seq]),
    [4, 5, 6, 7, 8, 9].map((i) => [`e${i}`, i]),
  );
  assert.deepEqual(
    (await threadRows(stack.db, o)).map((r) => r.event_id),
    [1, 2, 3, 4, 5, 6, 7, 8].map((i) => `e${i}`),
  );
});
