// JetStream without a leader, on a real 3-node cluster: a broker started then waits for one
// instead of exiting; /readyz says 503 while the cluster has no quorum and 200 once it is
// back; publishes issued while the stream's leader dies are all acked, once each, and an
// ack can only come from the log stream.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { IngestClient } from '../../src/client/ingest-client.js';
import { readLogMessage } from '../../src/log/log-batch.js';
import { type LogAck, LogPublisher } from '../../src/log/publisher.js';
import { partitionStream } from '../../src/log/streams.js';
import { Subjects } from '../../src/log/subjects.js';
import { logRecord } from '../helpers/records.js';
import { randomName } from '../helpers/stack.js';
import { waitFor } from '../helpers/wait.js';
import { clusterBroker, clusterConfig, startClusterServers } from './stack.js';

/** Longer than any JetStream API timeout the client uses (5 s). */
const NO_QUORUM_MS = 8_000;

async function readyz(httpPort: number): Promise<number> {
  const res = await fetch(`http://127.0.0.1:${httpPort}/readyz`, { signal: AbortSignal.timeout(5_000) });
  await res.arrayBuffer();
  return res.status;
}

test('a broker started while JetStream has no quorum waits for it, then starts and stores', async () => {
  await using servers = await startClusterServers();
  await servers.nats.kill(1);
  await servers.nats.kill(2);
  const config = clusterConfig(servers, {});
  const starting = clusterBroker(config);
  starting.catch(() => undefined);
  await sleep(NO_QUORUM_MS);
  await Promise.all([servers.nats.restart(1), servers.nats.restart(2)]);
  await using broker = await starting;
  const client = new IngestClient(`127.0.0.1:${broker.grpcPort}`);
  try {
    const thread = randomName('t-');
    const acks = await client.publish(
      [
        {
          thread_id: thread,
          run_id: 'r',
          event_id: 'e1',
          event_type: 'x',
          category: 'MESSAGE',
          content_json: '{}',
        },
      ],
      'PERSISTED',
    );
    assert.equal(Number(acks[0]?.seq), 1);
  } finally {
    client.close();
  }
});

test('/readyz is 503 while JetStream has no quorum and 200 again once it has', async () => {
  await using servers = await startClusterServers();
  await using broker = await clusterBroker(clusterConfig(servers, {}));
  assert.equal(await readyz(broker.httpPort), 200);
  await servers.nats.kill(1);
  await servers.nats.kill(2);
  await waitFor(async () => (await readyz(broker.httpPort)) === 503, {
    timeoutMs: 30_000,
    intervalMs: 250,
    what: '/readyz to say 503 with 2 of 3 NATS nodes down',
  });
  await Promise.all([servers.nats.restart(1), servers.nats.restart(2)]);
  await waitFor(async () => (await readyz(broker.httpPort)) === 200, {
    timeoutMs: 60_000,
    intervalMs: 250,
    what: '/readyz to say 200 once the cluster is whole',
  });
});

test('publishes issued while the stream leader dies are all acked, each stored once', async () => {
  await using servers = await startClusterServers();
  // A log of one partition: its one stream is `<log>-0`.
  const log = randomName('PUB_');
  const stream = partitionStream(log, 0);
  const prefix = randomName('p');
  const setup = await connect({ servers: servers.nats.url });
  const jsm = await jetstreamManager(setup);
  await jsm.streams.add({ name: stream, subjects: [`${prefix}.log.>`], num_replicas: 3 });
  const leader = await servers.nats.waitForLeader(stream);
  await setup.close();
  // Connected to a follower: the connection lives on while the leader dies.
  const follower = [0, 1, 2].find((i) => i !== leader) as number;
  const nc = await connect({ servers: servers.nats.urlOf(follower), maxReconnectAttempts: -1 });
  try {
    // A deadline far past any election: what fails here fails for a reason other than time.
    const publisher = new LogPublisher(nc, new Subjects(prefix, 1), 60_000, { streamName: log });
    await publisher.publish([logRecord('t', 'r', 'warm')]);
    const calls: Promise<LogAck[]>[] = [];
    const publishing = (async () => {
      for (let i = 0; i < 150; i++) {
        calls.push(publisher.publish([logRecord(`t${i % 5}`, 'r', `e${i}`)]));
        await sleep(20);
      }
    })();
    await sleep(400);
    await servers.nats.kill(leader);
    await publishing;
    const settled = await Promise.allSettled(calls);
    const failed = settled.filter((s) => s.status === 'rejected');
    assert.deepEqual(
      failed.map((f) => String((f as PromiseRejectedResult).reason)).slice(0, 3),
      [],
      `${failed.length} of ${calls.length} publishes failed`,
    );
    const seqs = settled.map((s) => (s as PromiseFulfilledResult<LogAck[]>).value[0]?.seq as number);
    // The API may still be settling after the election: ask until it answers. A thread's
    // publishes that waited out the election behind its first may have gone out as one message.
    const stored = await waitFor(() => storedEvents(nc, stream), {
      timeoutMs: 60_000,
      intervalMs: 500,
      what: 'the stream after the election',
    });
    const all = [...stored.values()].flat();
    assert.equal(all.length, calls.length + 1, 'each publish stored once');
    assert.equal(new Set(all).size, all.length, 'no event twice');
    seqs.forEach((seq, i) => {
      assert.ok(stored.get(seq)?.includes(`e${i}`), `e${i} is in the message its ack names (${seq})`);
    });
    for (let k = 0; k < 5; k++) {
      const thread = all.filter((id) => id !== 'warm' && Number(id.slice(1)) % 5 === k);
      assert.deepEqual(
        thread,
        [...thread].sort((a, b) => Number(a.slice(1)) - Number(b.slice(1))),
        `t${k}'s events in call order`,
      );
    }

    // An ack is taken only from the stream the publisher expects.
    const elsewhere = new LogPublisher(nc, new Subjects(prefix, 1), 5_000, { streamName: `${log}_OTHER` });
    await assert.rejects(elsewhere.publish([logRecord('t', 'r', 'wrong-stream')]), /expected stream/i);
  } finally {
    await nc.close();
  }
});

/** The event_ids of each message in `stream`, by stream sequence, in stream order; throws until all are read. */
async function storedEvents(nc: NatsConnection, stream: string): Promise<Map<number, string[]>> {
  const info = await (await jetstreamManager(nc)).streams.info(stream);
  const consumer = await jetstream(nc).consumers.get(stream);
  const byOffset = new Map<number, string[]>();
  const messages = await consumer.fetch({ max_messages: info.state.messages, expires: 5_000 });
  for await (const m of messages) {
    byOffset.set(
      m.seq,
      readLogMessage(m.string()).records.map((r) => r.event_id),
    );
    if (byOffset.size === info.state.messages) break;
  }
  if (byOffset.size !== info.state.messages) {
    throw new Error(`read ${byOffset.size} of ${info.state.messages} messages`);
  }
  return byOffset;
}
