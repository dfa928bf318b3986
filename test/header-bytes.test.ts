// Header blocks written once as bytes (src/log/header-bytes.ts) instead of a nats.js MsgHdrs per
// message: through a real nats-server they read back as headers, JetStream deduplicates by their
// Nats-Msg-Id and refuses a message whose Nats-Expected-Stream is another stream's.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, type Msg } from '@nats-io/transport-node';
import { headerBytes } from '../src/log/header-bytes.js';
import { startNatsServer } from './helpers/nats-server.js';
import { randomName } from './helpers/stack.js';

test('a header block read back through the server: names and values as written', async () => {
  await using nats = await startNatsServer();
  const nc = await connect({ servers: nats.url });
  try {
    const subject = randomName('hb.');
    const got = new Promise<Msg>((resolve) => {
      nc.subscribe(subject, { max: 1, callback: (_err, m) => resolve(m) });
    });
    await nc.flush();
    nc.publish(subject, 'body', {
      headers: headerBytes([
        ['Rs-Committed-Ms', '1796284035162'],
        ['Nats-Msg-Id', 'th-1/ev-2+3:abc_-'],
      ]),
    });
    const m = await got;
    assert.equal(m.string(), 'body');
    assert.equal(m.headers?.get('Rs-Committed-Ms'), '1796284035162');
    assert.equal(m.headers?.get('Nats-Msg-Id'), 'th-1/ev-2+3:abc_-');
    assert.deepEqual(m.headers?.keys(), ['Rs-Committed-Ms', 'Nats-Msg-Id']);
  } finally {
    await nc.close();
  }
});

test('JetStream reads them: a repeated Nats-Msg-Id is a duplicate, a wrong Nats-Expected-Stream is refused', async () => {
  await using nats = await startNatsServer();
  const nc = await connect({ servers: nats.url });
  try {
    const stream = randomName('HB');
    const subject = `${stream}.x`;
    await (await jetstreamManager(nc)).streams.add({ name: stream, subjects: [subject] });
    const js = jetstream(nc);
    // Published as the broker's publisher does: a core publish, the reply to an inbox.
    const publish = async (msgId: string, expected: string): Promise<Record<string, unknown>> => {
      const reply = await nc.request(subject, 'x', {
        timeout: 5_000,
        headers: headerBytes([
          ['Nats-Msg-Id', msgId],
          ['Nats-Expected-Stream', expected],
        ]),
      });
      return reply.json();
    };
    const first = await publish('m-1', stream);
    assert.equal(first.seq, 1);
    assert.equal(first.duplicate, undefined);
    const again = await publish('m-1', stream);
    assert.equal(again.seq, 1);
    assert.equal(again.duplicate, true, 'the same Nats-Msg-Id is a duplicate');
    const wrong = await publish('m-2', 'OTHER');
    assert.match(JSON.stringify(wrong.error), /expected stream does not match/i);
    assert.equal((await js.streams.get(stream).then((s) => s.info())).state.messages, 1);
  } finally {
    await nc.close();
  }
});

test('a value with a line break or not printable ASCII, or a name that is not a token, is refused', () => {
  assert.throws(() => headerBytes([['Nats-Msg-Id', 'a\r\nInjected: 1']]), /line break/);
  assert.throws(() => headerBytes([['Nats-Msg-Id', 'a\n']]), /line break/);
  assert.throws(() => headerBytes([['Nats-Msg-Id', 'é']]), /printable ASCII/);
  assert.throws(() => headerBytes([['Bad Name', 'x']]), /bad header name/);
  assert.throws(() => headerBytes([['Colon:', 'x']]), /bad header name/);
});
