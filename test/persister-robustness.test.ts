// The persister cannot be blocked by a foreign message on the log: anything that is not
// a well-formed log record is skipped (and logged), and the events after it are stored.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { partitionOf } from '../src/domain/partition.js';
import { partitionStream } from '../src/log/streams.js';
import { Subjects } from '../src/log/subjects.js';
import { PULL_MIN_MESSAGES } from '../src/persist/persister.js';
import { expectGapFree, randomName, startStack, threadRows } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

test('junk published straight onto the log is skipped, and later events are stored in order', async () => {
  await using stack = await startStack();
  const t = randomName('t-');
  const subjects = new Subjects(stack.config.subjectPrefix);
  const good = {
    thread_id: t,
    run_id: 'run-1',
    event_id: 'x',
    event_type: 'ai_chunk',
    category: 'message',
    user_id: '',
    created_at: new Date().toISOString(),
    content_json: '{}',
    metadata_json: '{}',
  };
  const nc = await connect({ servers: stack.servers.nats.url });
  try {
    const js = jetstream(nc);
    for (const junk of [
      'not json',
      JSON.stringify({ ...good, event_id: 'j1', category: 'Bogus!' }),
      JSON.stringify({ ...good, event_id: 'j2', thread_id: 'has space' }),
      JSON.stringify({ ...good, event_id: 'j3', created_at: 'yesterday' }),
      JSON.stringify({ ...good, event_id: 'j4', content_json: 5 }),
    ]) {
      await js.publish(subjects.log(t, 'run-1'), junk);
    }
  } finally {
    await nc.close();
  }
  await stack.client.publish(
    [1, 2, 3].map((i) => ({
      thread_id: t,
      run_id: 'run-1',
      event_id: `e${i}`,
      event_type: 'ai_chunk',
      category: 'MESSAGE' as const,
      content_json: JSON.stringify({ i }),
    })),
    'PERSISTED',
  );
  await waitFor(async () => (await threadRows(stack.db, t)).length === 3, { what: 'the three good events' });
  const rows = await threadRows(stack.db, t);
  assert.equal(expectGapFree(rows.map((r) => r.seq)), 3);
  assert.deepEqual(
    rows.map((r) => r.event_id),
    ['e1', 'e2', 'e3'],
  );
});

test('a persister that cannot store holds about three batches of the log, however many partitions it reads', async () => {
  const batchMax = 64;
  const partitions = 8;
  await using stack = await startStack({ partitions, persistBatchMax: batchMax });
  // A thread in each partition, each held up by a session advisory lock on its key: the
  // persister's first batch waits on it, so nothing is stored and the log backs up.
  const threads: string[] = [];
  for (let p = 0; p < partitions; p++) {
    for (;;) {
      const t = randomName('t-');
      if (partitionOf(t, partitions) === p) {
        threads.push(t);
        break;
      }
    }
  }
  const blocker = await stack.db.connect();
  try {
    for (const t of threads) await blocker.query('SELECT pg_advisory_lock(hashtextextended($1, 0))', [t]);
    const perThread = 150;
    for (let i = 0; i < perThread; i++) {
      // One event per request: one log message per event.
      await Promise.all(
        threads.map((t) =>
          stack.client.publish([
            {
              thread_id: t,
              run_id: 'run-1',
              event_id: `e${i}`,
              event_type: 'ai_chunk',
              category: 'MESSAGE',
              content_json: '{}',
            },
          ]),
        ),
      );
    }
    const nc = await connect({ servers: stack.servers.nats.url });
    try {
      const jsm = await jetstreamManager(nc);
      // What the server has handed to the persister's consumers: taken, or waiting in the client.
      const delivered = async (): Promise<number> => {
        let n = 0;
        for (let p = 0; p < partitions; p++) {
          for await (const c of jsm.consumers.list(partitionStream(stack.config.streamName, p))) {
            n += c.delivered.stream_seq;
          }
        }
        return n;
      };
      let last = -1;
      await waitFor(
        async () => {
          const now = await delivered();
          const settled = now === last && now > 0;
          last = now;
          return settled;
        },
        { what: 'the deliveries to the blocked persister to stop growing', intervalMs: 500 },
      );
      assert.equal((await threadRows(stack.db, threads[0] as string)).length, 0, 'nothing stored yet');
      // The batch in hand, the queue (two batches, plus a message per partition read), and
      // the pulls: about one batch across all partitions, at least PULL_MIN_MESSAGES each.
      const bound = batchMax + 2 * batchMax + partitions + Math.max(batchMax, partitions * PULL_MIN_MESSAGES);
      assert.ok(last <= bound, `the persister holds ${last} messages, more than ${bound}`);
    } finally {
      await nc.close();
    }
  } finally {
    await blocker.query('SELECT pg_advisory_unlock_all()');
    blocker.release();
  }
  // Then everything is stored, in order.
  await waitFor(async () => (await threadRows(stack.db, threads[7] as string)).length === 150, {
    what: 'the backlog stored',
    timeoutMs: 60_000,
  });
  for (const t of threads)
    assert.equal(expectGapFree((await threadRows(stack.db, t)).map((r) => r.seq)), 150);
});

test("a log message whose events are not of its subject's thread is skipped, not stored into another thread", async () => {
  await using stack = await startStack({ partitions: 4 });
  const subjects = new Subjects(stack.config.subjectPrefix, stack.config.partitions);
  const x = randomName('t-');
  let y = randomName('t-');
  while (partitionOf(y, 4) === partitionOf(x, 4)) y = randomName('t-');
  const forged = {
    thread_id: y,
    run_id: 'run-1',
    event_id: 'forged',
    event_type: 'ai_chunk',
    category: 'message',
    user_id: '',
    created_at: new Date().toISOString(),
    content_json: '{}',
    metadata_json: '{}',
  };
  const nc = await connect({ servers: stack.servers.nats.url });
  try {
    // On thread x's subject (x's partition stream), a record of thread y.
    await jetstream(nc).publish(subjects.log(x, 'run-1'), JSON.stringify(forged));
    // And one of x's run-1 followed by one of y's, or of x's other run: the record after one that
    // passed is checked too, and the message is skipped whole.
    const own = { ...forged, thread_id: x, event_id: 'own' };
    for (const other of [forged, { ...forged, thread_id: x, run_id: 'run-2' }]) {
      await jetstream(nc).publish(subjects.log(x, 'run-1'), JSON.stringify([own, other]));
    }
  } finally {
    await nc.close();
  }
  const event = (t: string) => ({
    thread_id: t,
    run_id: 'run-1',
    event_id: 'e1',
    event_type: 'ai_chunk',
    category: 'MESSAGE' as const,
    content_json: '{}',
  });
  await stack.client.publish([event(x), event(y)], 'PERSISTED');
  assert.deepEqual(
    (await threadRows(stack.db, y)).map((r) => r.event_id),
    ['e1'],
  );
  assert.deepEqual(
    (await threadRows(stack.db, x)).map((r) => r.event_id),
    ['e1'],
  );
});
