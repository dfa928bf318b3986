// LogPublisher (src/log/publisher.ts) speaks JetStream's publish protocol itself: each
// message gets its stream sequence, an identical repeat is acked as a duplicate, and a
// subject no stream holds fails the call as unavailable at its deadline (it is issued again
// until then, as a cluster electing the stream's leader answers "no responders" for a while).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { partitionOf } from '../src/domain/partition.js';
import { LogPublisher } from '../src/log/publisher.js';
import { partitionStream } from '../src/log/streams.js';
import { Subjects } from '../src/log/subjects.js';
import { startNatsServer } from './helpers/nats-server.js';
import { logRecord } from './helpers/records.js';

test('acks carry the stream sequence, repeats are duplicates, and no stream means unavailable', async () => {
  await using nats = await startNatsServer({ useEnv: false });
  const nc = await connect({ servers: nats.url });
  try {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: 'PUBTEST', subjects: ['pt.log.>'] });
    const publisher = new LogPublisher(nc, new Subjects('pt'), 2_000);

    // Two calls in one turn: issued together, in call order.
    const [a, b] = await Promise.all([
      publisher.publish([logRecord('t1', 'r', 'e1'), logRecord('t1', 'r', 'e2'), logRecord('t2', 'r', 'e3')]),
      publisher.publish([logRecord('t1', 'r', 'e4')]),
    ]);
    assert.deepEqual(
      a.map((x) => [x.seq, x.duplicate]),
      [
        [1, false],
        [1, false],
        [2, false],
      ],
    );
    assert.deepEqual(b, [{ seq: 3, duplicate: false }]);
    const again = await publisher.publish([
      logRecord('t1', 'r', 'e1'),
      logRecord('t1', 'r', 'e2'),
      logRecord('t2', 'r', 'e3'),
    ]);
    assert.deepEqual(
      again,
      a.map((x) => ({ seq: x.seq, duplicate: true })),
    );
    assert.equal((await jsm.streams.info('PUBTEST')).state.messages, 3);

    const nowhere = new LogPublisher(nc, new Subjects('nostream'), 1_500);
    await assert.rejects(nowhere.publish([logRecord('t', 'r', 'x')]), (err: Error) => {
      assert.equal(err.name, 'UnavailableError');
      assert.match(err.message, /event log did not accept/);
      return true;
    });
  } finally {
    await nc.close();
  }
});

test('publishes issued while NATS is down are acked once it is back, in order and once each', async () => {
  await using nats = await startNatsServer({ useEnv: false });
  const nc = await connect({ servers: nats.url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
  try {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: 'PUBRECON', subjects: ['pr.log.>'] });
    // A timeout far longer than the test: nats.js drops what it buffered while disconnected
    // when it reconnects, so a publish that is not issued again would wait for all of it.
    const publisher = new LogPublisher(nc, new Subjects('pr'), 3_600_000);
    await publisher.publish([logRecord('t1', 'r', 'before')]);

    await nats.kill();
    const during = [
      publisher.publish([logRecord('t1', 'r', 'd1')]),
      publisher.publish([logRecord('t1', 'r', 'd2'), logRecord('t2', 'r', 'd3')]),
    ];
    await new Promise((r) => setTimeout(r, 300));
    await nats.restart();
    const acks = await Promise.race([
      Promise.all(during),
      new Promise<never>((_, reject) =>
        setTimeout(() => reject(new Error('publishes issued during the outage were not acked')), 60_000),
      ),
    ]);
    assert.deepEqual(
      acks.map((a) => a.map((x) => x.seq)),
      [[2], [3, 4]],
      'stored in call order after the first message',
    );
    assert.equal((await jsm.streams.info('PUBRECON')).state.messages, 4, 'each stored once');
  } finally {
    await nc.close();
  }
});

test('a publish answered "no responders" is issued again until a stream takes it (a leader election)', async () => {
  await using nats = await startNatsServer({ useEnv: false });
  const nc = await connect({ servers: nats.url });
  try {
    const jsm = await jetstreamManager(nc);
    const subjects = new Subjects('late');
    const publisher = new LogPublisher(nc, subjects, 30_000, { streamName: 'LATE' });
    // No stream holds the subject yet: every issue of the publish gets a 503, as while a
    // cluster elects the stream's next leader.
    const pending = publisher.publish([logRecord('t', 'r', 'e1')]);
    await new Promise((resolve) => setTimeout(resolve, 800));
    // The thread's partition stream of the log named LATE.
    const stream = partitionStream('LATE', partitionOf('t', subjects.partitions));
    await jsm.streams.add({ name: stream, subjects: [subjects.logAll] });
    assert.deepEqual(await pending, [{ seq: 1, duplicate: false }]);
    // An ack only from the expected stream.
    const wrong = new LogPublisher(nc, subjects, 2_000, { streamName: 'OTHER' });
    await assert.rejects(wrong.publish([logRecord('t', 'r', 'e2')]), /expected stream/i);
    assert.equal((await jsm.streams.info(stream)).state.messages, 1);
  } finally {
    await nc.close();
  }
});
