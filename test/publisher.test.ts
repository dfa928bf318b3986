// LogPublisher (src/log/publisher.ts) speaks JetStream's publish protocol itself: each
// message gets its stream sequence, an identical repeat is acked as a duplicate, and a
// subject no stream holds fails the call as unavailable at its deadline (it is issued again
// until then, as a cluster electing the stream's leader answers "no responders" for a while).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type JetStreamManager, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { partitionOf } from '../src/domain/partition.js';
import { readLogMessage } from '../src/log/log-batch.js';
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
    let timer: NodeJS.Timeout | undefined;
    const acks = await Promise.race([
      Promise.all(during),
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error('publishes issued during the outage were not acked')),
          60_000,
        );
      }),
    ]).finally(() => clearTimeout(timer));
    const seqs = acks.map((a) => a.map((x) => x.seq));
    const [d1, d2, d3] = [seqs[0]?.[0], seqs[1]?.[0], seqs[1]?.[1]];
    assert.ok((d1 as number) < (d2 as number), `run t1/r in call order: d1 at ${d1}, d2 at ${d2}`);
    assert.deepEqual([d1, d2, d3].sort(), [2, 3, 4], 'each stored once, after the first message');
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

test("a publish issued again is not overtaken by its thread's next one; other threads are not held", async () => {
  await using nats = await startNatsServer({ useEnv: false });
  const nc = await connect({ servers: nats.url });
  try {
    const jsm = await jetstreamManager(nc);
    const subjects = new Subjects('ord');
    const publisher = new LogPublisher(nc, subjects, 30_000);
    // No stream yet: the first publish is answered 503 and waits to be issued again.
    const a = publisher.publish([logRecord('t', 'r', 'a')]);
    await new Promise((resolve) => setTimeout(resolve, 100));
    await jsm.streams.add({ name: 'ORD', subjects: [subjects.logAll] });
    const b = publisher.publish([logRecord('t', 'r', 'b')]);
    const other = await publisher.publish([logRecord('t2', 'r', 'c')]);
    const [[ackA], [ackB]] = await Promise.all([a, b]);
    assert.ok(
      (ackA?.seq ?? 0) < (ackB?.seq ?? 0),
      `a at ${ackA?.seq}, b at ${ackB?.seq}: the log keeps the thread's order`,
    );
    assert.ok((other[0]?.seq ?? 0) < (ackB?.seq ?? 0), 'another thread went out while b waited for a');
  } finally {
    await nc.close();
  }
});

test("a thread's messages held behind its head go out as one message per run once it is stored, each call acked with it", async () => {
  await withLogStream('mg', async ({ nc, jsm, stream, publisher }) => {
    // One turn: t's first call goes out, the rest wait behind it (another thread's does not).
    const calls = [
      publisher.publish([logRecord('t', 'r', 'a')], { receipts: false }),
      publisher.publish([logRecord('t', 'r', 'b1'), logRecord('t', 'r', 'b2')], { receipts: false }),
      publisher.publish([logRecord('t', 'r', 'c')], { receipts: true }),
      publisher.publish([logRecord('t', 'r', 'd')], { receipts: false }),
      publisher.publish([logRecord('t', 'r2', 'e')], { receipts: false }),
      publisher.publish([logRecord('t', 'r', 'f')], { receipts: false }),
      publisher.publish([logRecord('u', 'r', 'g')], { receipts: false }),
    ];
    const acks = (await Promise.all(calls)).map((a) => a.map((x) => x.seq));
    const [a, b, c, d, e, f, g] = acks.map((x) => x[0] as number);
    assert.deepEqual(acks[1], [b, b], 'a call shares its message');
    assert.ok((a as number) < (b as number), 'the head first');
    assert.equal(c, b, 'b, c and d were held together: one message');
    assert.equal(d, b);
    assert.ok(
      (e as number) > (b as number) && (f as number) > (e as number),
      'the next run apart, then r again',
    );
    assert.ok((g as number) < (b as number), "another thread's call did not wait");
    assert.equal((await jsm.streams.info(stream)).state.messages, 5);

    const js = jetstream(nc);
    const stored = await js.consumers.get(stream).then((cons) => cons.fetch({ max_messages: 5 }));
    const bodies: string[] = [];
    for await (const m of stored) {
      bodies.push(m.string());
      if (bodies.length === 5) break;
    }
    const merged = readLogMessage(bodies[2] as string);
    assert.deepEqual(
      merged.records.map((r) => r.event_id),
      ['b1', 'b2', 'c', 'd'],
      'in call order',
    );
    assert.equal(merged.receipts, true, 'c asked for commit receipts, so the merged message does');
    assert.equal(readLogMessage(bodies[3] as string).receipts, false);
  });
});

test('held messages are merged only as far as they fit max_payload together', async () => {
  await withLogStream('mb', async ({ nc, jsm, stream, publisher }) => {
    // Three of about 40% of max_payload each, behind a head: two fit together, the third not.
    const big = JSON.stringify('x'.repeat(Math.floor((nc.info?.max_payload ?? 1 << 20) * 0.4)));
    const acks = await Promise.all([
      publisher.publish([logRecord('t', 'r', 'head')]),
      publisher.publish([logRecord('t', 'r', 'x1', big)]),
      publisher.publish([logRecord('t', 'r', 'x2', big)]),
      publisher.publish([logRecord('t', 'r', 'x3', big)]),
    ]);
    assert.deepEqual(
      acks.map((a) => a[0]?.seq),
      [1, 2, 2, 3],
    );
    assert.equal((await jsm.streams.info(stream)).state.messages, 3);
  });
});

test('a held message repeating an event of the group is not merged into it: a retry stays a JetStream duplicate', async () => {
  await withLogStream('mr', async ({ jsm, stream, publisher }) => {
    const [, [first], [retry], , overlapping, after] = await Promise.all([
      publisher.publish([logRecord('t', 'r', 'head')]),
      publisher.publish([logRecord('t', 'r', 'x')]),
      // The producer resent x while both waited behind the head.
      publisher.publish([logRecord('t', 'r', 'x')]),
      publisher.publish([logRecord('u', 'r', 'head')]),
      publisher.publish([logRecord('u', 'r', 'b'), logRecord('u', 'r', 'c')]),
      publisher.publish([logRecord('u', 'r', 'c'), logRecord('u', 'r', 'd')]),
    ]);
    assert.equal(first?.duplicate, false);
    assert.deepEqual(retry, { seq: first?.seq, duplicate: true }, "the retry went out alone, under x's id");
    assert.notEqual(overlapping?.[0]?.seq, after?.[0]?.seq, 'c in both: two messages');
    assert.equal((await jsm.streams.info(stream)).state.messages, 5);
  });
});

/** A fresh nats-server holding one stream for the log of `prefix`, and a publisher into it. */
async function withLogStream(
  prefix: string,
  fn: (o: {
    nc: NatsConnection;
    jsm: JetStreamManager;
    stream: string;
    publisher: LogPublisher;
  }) => Promise<void>,
): Promise<void> {
  await using nats = await startNatsServer({ useEnv: false });
  const nc = await connect({ servers: nats.url });
  try {
    const jsm = await jetstreamManager(nc);
    const stream = `PUB_${prefix.toUpperCase()}`;
    await jsm.streams.add({ name: stream, subjects: [`${prefix}.log.>`] });
    await fn({ nc, jsm, stream, publisher: new LogPublisher(nc, new Subjects(prefix), 10_000) });
  } finally {
    await nc.close();
  }
}
