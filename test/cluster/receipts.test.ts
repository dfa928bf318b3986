// A commit receipt that never arrives: the persister's NATS node hangs (SIGSTOP) right as it
// commits, so the receipt sits in a socket nobody reads, and the persister does not notice
// for as long as its pings take. The PERSISTED call must still be answered, from Postgres,
// well within its ack timeout — with the seq that was stored.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { IngestClient } from '../../src/client/ingest-client.js';
import { randomName } from '../helpers/stack.js';
import { waitFor } from '../helpers/wait.js';
import { clusterBroker, clusterConfig, startClusterServers } from './stack.js';

/** Shorter than the persister takes to notice a hung server (two missed 10 s pings). */
const ACK_TIMEOUT_MS = 15_000;

test('a PERSISTED call whose receipt is lost in a hung NATS node is answered from Postgres', async () => {
  await using servers = await startClusterServers();
  const streamName = randomName('RS_');
  const subjectPrefix = randomName('rs');
  // Ingest on node 0, the persister on node 1 only (each learns the others when it must move).
  await using ingest = await clusterBroker(
    clusterConfig(servers, {
      roles: ['ingest', 'fanout'],
      natsUrl: servers.nats.urlOf(0),
      streamName,
      subjectPrefix,
      persistedAckTimeoutMs: ACK_TIMEOUT_MS,
    }),
  );
  await using persister = await clusterBroker(
    clusterConfig(servers, {
      roles: ['persister'],
      natsUrl: servers.nats.urlOf(1),
      streamName,
      subjectPrefix,
    }),
  );
  const client = new IngestClient(`127.0.0.1:${ingest.grpcPort}`);
  const thread = randomName('t-');
  const lock = await servers.db.connect();
  lock.on('error', () => undefined);
  try {
    await client.publish(
      [
        {
          thread_id: 'warm',
          run_id: 'r',
          event_id: 'w',
          event_type: 'x',
          category: 'MESSAGE',
          content_json: '1',
        },
      ],
      'PERSISTED',
    );
    // Hold the thread's seq lock, so the persister has the event and waits to commit it.
    await lock.query('SELECT pg_advisory_lock(hashtextextended($1, 0))', [thread]);
    const call = client.publish(
      [
        {
          thread_id: thread,
          run_id: 'r',
          event_id: 'e1',
          event_type: 'x',
          category: 'MESSAGE',
          content_json: '1',
        },
      ],
      'PERSISTED',
      60_000,
    );
    call.catch(() => undefined);
    await waitFor(
      async () =>
        (
          await servers.db.query(
            "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND pid <> pg_backend_pid()",
          )
        ).rowCount === 1,
      { timeoutMs: 30_000, what: 'the persister to wait for the thread lock' },
    );
    servers.nats.pause(1);
    await lock.query('SELECT pg_advisory_unlock(hashtextextended($1, 0))', [thread]);
    await waitFor(
      async () =>
        (await servers.db.query('SELECT 1 FROM run_events WHERE thread_id = $1', [thread])).rowCount === 1,
      { timeoutMs: 30_000, what: 'the event to be committed' },
    );
    const acks = await call;
    assert.equal(acks[0]?.event_id, 'e1');
    assert.equal(Number(acks[0]?.seq), 1);
  } finally {
    lock.release();
    servers.nats.resume(1);
    client.close();
  }
  void persister;
});
