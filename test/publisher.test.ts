// LogPublisher (src/log/publisher.ts) speaks JetStream's publish protocol itself: each
// message gets its stream sequence, an identical repeat is acked as a duplicate, and a
// subject no stream holds fails the call as unavailable instead of hanging.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import type { LogRecord } from '../src/event.js';
import { LogPublisher } from '../src/log/publisher.js';
import { Subjects } from '../src/log/subjects.js';
import { startNatsServer } from './helpers/nats-server.js';

function record(thread: string, run: string, eventId: string): LogRecord {
  return {
    thread_id: thread,
    run_id: run,
    event_id: eventId,
    event_type: 'ai_chunk',
    category: 'message',
    user_id: '',
    created_at: '2026-11-30T10:00:00.000Z',
    content_json: '"x"',
    metadata_json: '{}',
  };
}

test('acks carry the stream sequence, repeats are duplicates, and no stream means unavailable', async () => {
  await using nats = await startNatsServer({ useEnv: false });
  const nc = await connect({ servers: nats.url });
  try {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: 'PUBTEST', subjects: ['pt.log.>'] });
    const publisher = new LogPublisher(nc, new Subjects('pt'), 2_000);

    // Two calls in one turn: issued together, in call order.
    const [a, b] = await Promise.all([
      publisher.publish([record('t1', 'r', 'e1'), record('t1', 'r', 'e2'), record('t2', 'r', 'e3')]),
      publisher.publish([record('t1', 'r', 'e4')]),
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
      record('t1', 'r', 'e1'),
      record('t1', 'r', 'e2'),
      record('t2', 'r', 'e3'),
    ]);
    assert.deepEqual(
      again,
      a.map((x) => ({ seq: x.seq, duplicate: true })),
    );
    assert.equal((await jsm.streams.info('PUBTEST')).state.messages, 3);

    const nowhere = new LogPublisher(nc, new Subjects('nostream'), 1_500);
    await assert.rejects(nowhere.publish([record('t', 'r', 'x')]), (err: Error) => {
      assert.equal(err.name, 'UnavailableError');
      assert.match(err.message, /event log did not accept/);
      return true;
    });
  } finally {
    await nc.close();
  }
});
