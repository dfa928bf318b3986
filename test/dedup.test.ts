// Invariant 3: an event is stored at most once whatever the retries, redeliveries and
// restarts, and a duplicate never consumes a seq.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { startBroker } from '../src/broker.js';
import { type Event, IngestClient } from '../src/client/ingest-client.js';
import { partitionOf } from '../src/domain/partition.js';
import { decodeLogMessage } from '../src/log/log-batch.js';
import { createLogger } from '../src/logger.js';
import { partitionPositions } from '../src/persist/leases.js';
import { storeThreadBatch } from '../src/persist/seq-assigner.js';
import {
  brokerConfig,
  expectGapFree,
  randomName,
  startServers,
  startStack,
  threadRows,
  threadStream,
} from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

function ev(threadId: string, eventId: string, runId = 'run-1'): Event {
  return {
    thread_id: threadId,
    run_id: runId,
    event_id: eventId,
    event_type: 'ai_chunk',
    category: 'MESSAGE',
    content_json: JSON.stringify({ content: eventId }),
  };
}

test('the same event_id published twice is stored once and the retry is acked as a duplicate', async () => {
  await using stack = await startStack({ duplicateWindowMs: 1000 });
  const t = randomName('t-');

  const [first] = await stack.client.publish([ev(t, 'e1')], 'PERSISTED');
  assert.deepEqual(
    { ...first, offset: 0 },
    { event_id: 'e1', duplicate: false, seq: 1, offset: 0, rejected: '' },
  );

  // Inside JetStream's duplicate window: JetStream itself drops it.
  const [inWindow] = await stack.client.publish([ev(t, 'e1')], 'PERSISTED');
  assert.deepEqual(inWindow, { ...first, duplicate: true });

  // Past the window JetStream stores a second message; Postgres must drop it.
  await new Promise((r) => setTimeout(r, 1500));
  const [pastWindow] = await stack.client.publish([ev(t, 'e1')], 'PERSISTED');
  assert.equal(pastWindow?.duplicate, true);
  assert.equal(pastWindow?.seq, 1);
  assert.equal(pastWindow?.offset, first?.offset, 'the ack names the stored row, not the new log message');

  // ACCEPTED acks of a JetStream duplicate say so too.
  const [accepted] = await stack.client.publish([ev(t, 'e1')], 'ACCEPTED');
  assert.equal(accepted?.duplicate, true);

  // No seq was consumed by any of the duplicates.
  const [next] = await stack.client.publish([ev(t, 'e2')], 'PERSISTED');
  assert.equal(next?.seq, 2);
  assert.deepEqual(
    (await threadRows(stack.db, t)).map((r) => [r.seq, r.event_id]),
    [
      [1, 'e1'],
      [2, 'e2'],
    ],
  );
});

test('an ACCEPTED retry whose deletion check Postgres does not answer fails UNAVAILABLE within its bound, naming the event; new events go on', async () => {
  // The bound is the smaller of 5 s and the PERSISTED ack timeout.
  await using stack = await startStack({ persistedAckTimeoutMs: 1000 });
  const t = randomName('t-');
  const [first] = await stack.client.publish([ev(t, 'e1')], 'PERSISTED');
  assert.equal(first?.seq, 1);
  // Postgres stalled for the check: a table it reads, locked by a migration, say.
  const holder = await stack.db.connect();
  try {
    await holder.query('BEGIN');
    await holder.query('LOCK TABLE thread_heads IN ACCESS EXCLUSIVE MODE');
    await assert.rejects(
      stack.client.publish([ev(t, 'e1')], 'ACCEPTED', 20_000),
      (err: Error & { code?: number }) => {
        assert.equal(err.code, 14, `UNAVAILABLE, not ${err.code}: ${err.message}`);
        assert.match(err.message, /events\[0\] \(event_id e1\) is a duplicate in the log/);
        assert.match(err.message, /Postgres did not answer within 1000 ms/);
        return true;
      },
    );
    // A new event needs no check: it is answered from JetStream alone.
    const [fresh] = await stack.client.publish([ev(t, 'e2')], 'ACCEPTED', 20_000);
    assert.equal(fresh?.duplicate, false);
  } finally {
    await holder.query('COMMIT');
    holder.release();
  }
  const [retried] = await stack.client.publish([ev(t, 'e1')], 'ACCEPTED');
  assert.deepEqual([retried?.duplicate, retried?.offset], [true, first?.offset]);
  await waitFor(async () => (await threadRows(stack.db, t)).length === 2);
  assert.deepEqual(
    (await threadRows(stack.db, t)).map((r) => [r.seq, r.event_id]),
    [
      [1, 'e1'],
      [2, 'e2'],
    ],
  );
});

test('a repeated event_id inside one request is one row; both acks carry its seq', async () => {
  await using stack = await startStack();
  const t = randomName('t-');
  const acks = await stack.client.publish([ev(t, 'a'), ev(t, 'a'), ev(t, 'b')], 'PERSISTED');
  assert.deepEqual(
    acks.map((a) => [a.event_id, a.seq, a.duplicate]),
    [
      ['a', 1, false],
      ['a', 1, true],
      ['b', 2, false],
    ],
  );
  assert.equal((await threadRows(stack.db, t)).length, 2);
});

test('a persister that committed without moving its partition position replays the log without storing twice', async () => {
  await using servers = await startServers();
  const ingestOnly = brokerConfig(servers, { roles: new Set(['ingest']) });
  const log = createLogger('warn');
  const t = randomName('t-');

  // 1. Events accepted into the log; no persister running.
  {
    await using ingest = await startBroker(ingestOnly, log);
    using client = new IngestClient(`127.0.0.1:${ingest.grpcPort}`);
    const acks = await client.publish(
      Array.from({ length: 10 }, (_, i) => ev(t, `e${i}`)),
      'ACCEPTED',
    );
    assert.equal(acks.length, 10);
  }

  let logLast = 0;
  // 2. A "persister" reads them, commits them, and dies before saving its checkpoint.
  {
    const nc = await connect({ servers: servers.nats.url });
    const jsm = await jetstreamManager(nc);
    const pending = [];
    const stream = threadStream(ingestOnly, t);
    logLast = (await jsm.streams.info(stream)).state.last_seq;
    for (let seq = 1; seq <= logLast; seq++) {
      const m = await jsm.streams.getMessage(stream, { seq });
      assert.ok(m);
      for (const record of decodeLogMessage(m.string())) pending.push({ record, offset: m.seq });
    }
    await nc.close();
    const client = await servers.db.connect();
    try {
      assert.equal((await storeThreadBatch(client, t, pending)).inserted.length, 10);
    } finally {
      client.release();
    }
  }
  const before = await threadRows(servers.db, t);
  assert.equal(expectGapFree(before.map((r) => r.seq)), 10);

  // 3. The real persister starts from the old checkpoint and meets every message again.
  const full = brokerConfig(servers, {
    streamName: ingestOnly.streamName,
    subjectPrefix: ingestOnly.subjectPrefix,
  });
  await using broker = await startBroker(full, log);
  await waitFor(() => (broker.persister?.duplicateCount ?? 0) >= 10, {
    timeoutMs: 30_000,
    what: 'the persister to replay the 10 events',
  });
  assert.equal(broker.persister?.storedCount, 0);
  assert.deepEqual(await threadRows(servers.db, t), before);
  const partition = partitionOf(t, full.partitions);
  await waitFor(
    async () => (await partitionPositions(servers.db, full.streamName)).get(partition) === logLast,
    {
      what: `partition ${partition} at ${logLast}`,
    },
  );

  // 4. The next event takes seq 11: the replay consumed nothing.
  using client = new IngestClient(`127.0.0.1:${broker.grpcPort}`);
  const [ack] = await client.publish([ev(t, 'after')], 'PERSISTED');
  assert.equal(ack?.seq, 11);
});
