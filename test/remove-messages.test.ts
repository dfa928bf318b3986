// Removing a subject's messages from a stream up to an offset takes exactly those messages,
// and leaves every consumer of the stream where it was: a consumer behind the removed
// messages is still delivered every other subject's messages after them.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import {
  AckPolicy,
  DeliverPolicy,
  type JetStreamManager,
  jetstream,
  jetstreamManager,
} from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { removeMessages } from '../src/log/remove-messages.js';
import { type NatsServerHandle, startNatsServer } from './helpers/nats-server.js';
import { randomName } from './helpers/stack.js';

let nats: NatsServerHandle;
let nc: NatsConnection;
let jsm: JetStreamManager;

before(async () => {
  nats = await startNatsServer({ useEnv: true });
  nc = await connect({ servers: nats.url });
  jsm = await jetstreamManager(nc);
});
after(async () => {
  await nc.close();
  await nats[Symbol.asyncDispose]();
});

/** A fresh stream on `<name>.>`; `subjects[i]` is published as message i + 1. */
async function streamOf(subjects: readonly string[]): Promise<string> {
  const name = randomName('rm_');
  await jsm.streams.add({ name, subjects: [`${name}.>`] });
  const js = jetstream(nc);
  for (let i = 0; i < subjects.length; i += 200) {
    await Promise.all(
      subjects.slice(i, i + 200).map((s, j) => js.publish(`${name}.${s}`, String(i + j + 1))),
    );
  }
  return name;
}

async function bySubject(stream: string): Promise<Record<string, number>> {
  const info = await jsm.streams.info(stream, { subjects_filter: '>' });
  return Object.fromEntries(
    Object.entries(info.state.subjects ?? {}).map(([s, n]) => [s.slice(stream.length + 1), n]),
  );
}

test('takes the subject’s messages at or below the offset, thousands of them, and nothing else', async () => {
  // 2,600 on `a.*` (more than one fetch of offsets), `b` between them, and `a` again past the offset.
  const subjects = Array.from({ length: 3000 }, (_, i) => (i % 10 === 9 ? 'b' : `a.${i % 2}`));
  const stream = await streamOf(subjects);
  const upTo = 2900;
  const removed = await removeMessages(jsm, stream, `${stream}.a.*`, { from: 1, upTo });
  const expected = subjects.slice(0, upTo).filter((s) => s !== 'b').length;
  assert.equal(removed, expected);
  assert.deepEqual(await bySubject(stream), {
    b: 300,
    'a.0': subjects.slice(upTo).filter((s) => s === 'a.0').length,
    'a.1': subjects.slice(upTo).filter((s) => s === 'a.1').length,
  });
  // Offset 0, or a subject with nothing on it: nothing to do.
  assert.equal(await removeMessages(jsm, stream, `${stream}.b`, { from: 1, upTo: 0 }), 0);
  assert.equal(await removeMessages(jsm, stream, `${stream}.c`, { from: 1, upTo }), 0);
});

test('two removals of the same messages at once take each message once, and neither fails', async () => {
  // Another subject's message first: a message removed already inside the stream is "sequence
  // N not found" (10043), below its first sequence "no message found" (10057).
  const stream = await streamOf(['other', ...Array.from({ length: 1000 }, (_, i) => `t.${i % 3}`)]);
  const [x, y] = await Promise.all([
    removeMessages(jsm, stream, `${stream}.t.*`, { from: 1, upTo: 1001 }),
    removeMessages(jsm, stream, `${stream}.t.*`, { from: 1, upTo: 1001 }),
  ]);
  assert.equal(x + y, 1000);
  assert.deepEqual(await bySubject(stream), { other: 1 });
});

test('from an offset on: messages of the subject before it are not looked at', async () => {
  const stream = await streamOf(['t.a', 'o', 't.a', 'o', 't.b', 't.a']);
  assert.equal(await removeMessages(jsm, stream, `${stream}.t.*`, { from: 3, upTo: 5 }), 2);
  assert.deepEqual(await bySubject(stream), { 't.a': 2, o: 2 });
  // A range with nothing in it asks the server nothing.
  assert.equal(await removeMessages(jsm, stream, `${stream}.t.*`, { from: 7, upTo: 6 }), 0);
});

test('a consumer behind the removed messages is not moved: it is delivered every other message after them', async () => {
  // The removed subject's only message is the stream's last: a filtered purge of it moves
  // every consumer past the end on nats-server before 2.10.11.
  const subjects = [...Array.from({ length: 200 }, (_, i) => `other.${i % 4}`), 'gone'];
  const stream = await streamOf(subjects);
  const name = randomName('behind_');
  await jsm.consumers.add(stream, {
    durable_name: name,
    ack_policy: AckPolicy.None,
    deliver_policy: DeliverPolicy.All,
    filter_subject: `${stream}.>`,
  });
  const consumer = await jetstream(nc).consumers.get(stream, name);
  const first: number[] = [];
  for await (const m of await consumer.fetch({ max_messages: 10, expires: 5000 })) first.push(m.seq);
  assert.deepEqual(
    first,
    Array.from({ length: 10 }, (_, i) => i + 1),
  );

  assert.equal(await removeMessages(jsm, stream, `${stream}.gone`, { from: 1, upTo: subjects.length }), 1);
  const rest: number[] = [];
  // Until it has them all, or a fetch brings nothing: the server had every one before the removal.
  for (let got = -1; rest.length < 190 && got !== rest.length; ) {
    got = rest.length;
    for await (const m of await consumer.fetch({ max_messages: 190 - rest.length, expires: 2000 })) {
      rest.push(m.seq);
    }
  }
  assert.deepEqual(
    rest,
    Array.from({ length: 190 }, (_, i) => i + 11),
  );
});
