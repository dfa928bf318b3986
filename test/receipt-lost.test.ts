// A commit receipt that never arrives: the NATS server hangs (SIGSTOP) right as the
// persister commits, so the receipt sits in a socket the server does not read, and the
// process does not notice for as long as its pings take. The PERSISTED call is answered
// anyway, from Postgres, with the seq that was stored — well within its ack timeout.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { randomName, startStack, threadStream } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

/** Shorter than a process takes to notice a hung server (two missed 10 s pings). */
const ACK_TIMEOUT_MS = 15_000;

test('a PERSISTED call whose commit receipt is stuck in a hung NATS server is answered from Postgres', async () => {
  await using stack = await startStack({ persistedAckTimeoutMs: ACK_TIMEOUT_MS }, { own: true });
  const thread = randomName('t-');
  const event = (id: string, t = thread) => ({
    thread_id: t,
    run_id: 'r',
    event_id: id,
    event_type: 'x',
    category: 'MESSAGE' as const,
    content_json: '1',
  });
  await stack.client.publish([event('w', 'warm')], 'PERSISTED');
  const lock = await stack.db.connect();
  lock.on('error', () => undefined);
  try {
    // Hold the thread's seq lock, so the persister has the event and waits to commit it.
    await lock.query('SELECT pg_advisory_lock(hashtextextended($1, 0))', [thread]);
    const call = stack.client.publish([event('e1')], 'PERSISTED', 60_000);
    call.catch(() => undefined);
    await waitFor(
      async () =>
        (
          await stack.db.query(
            "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND pid <> pg_backend_pid()",
          )
        ).rowCount === 1,
      { timeoutMs: 30_000, what: 'the persister to wait for the thread lock' },
    );
    stack.servers.nats.pause();
    await lock.query('SELECT pg_advisory_unlock(hashtextextended($1, 0))', [thread]);
    await waitFor(
      async () =>
        (await stack.db.query('SELECT 1 FROM run_events WHERE thread_id = $1', [thread])).rowCount === 1,
      { timeoutMs: 30_000, what: 'the event to be committed' },
    );
    const acks = await call;
    assert.equal(acks[0]?.event_id, 'e1');
    assert.equal(Number(acks[0]?.seq), 1);
  } finally {
    lock.release();
    stack.servers.nats.resume();
  }
});

test('PublishStream answers in order do not wait behind a request whose receipt is lost', async () => {
  await using stack = await startStack({ persistedAckTimeoutMs: ACK_TIMEOUT_MS }, { own: true });
  const thread = randomName('t-');
  const event = (id: string) => ({
    thread_id: thread,
    run_id: 'r',
    event_id: id,
    event_type: 'x',
    category: 'MESSAGE' as const,
    content_json: '1',
  });
  const nc = await connect({ servers: stack.servers.nats.url });
  const lock = await stack.db.connect();
  lock.on('error', () => undefined);
  const stream = stack.client.openStream();
  try {
    const jsm = await jetstreamManager(nc);
    await stream.send([event('w')], 'PERSISTED');
    await lock.query('SELECT pg_advisory_lock(hashtextextended($1, 0))', [thread]);
    const first = stream.send([event('e1')], 'PERSISTED');
    const second = stream.send([event('e2')], 'PERSISTED');
    first.catch(() => undefined);
    second.catch(() => undefined);
    // Both requests are in the log and delivered to the persister, which waits for the lock.
    await waitFor(
      async () => {
        const last = (await jsm.streams.info(threadStream(stack.config, thread))).state.last_seq;
        for await (const c of jsm.consumers.list(threadStream(stack.config, thread))) {
          if (last >= 3 && c.delivered.stream_seq >= last) return true;
        }
        return false;
      },
      { timeoutMs: 30_000, what: 'both requests delivered to the persister' },
    );
    await nc.close();
    stack.servers.nats.pause();
    await lock.query('SELECT pg_advisory_unlock(hashtextextended($1, 0))', [thread]);
    const [a, b] = await Promise.all([first, second]);
    assert.deepEqual(
      [...(a ?? []), ...(b ?? [])].map((x) => [x.event_id, Number(x.seq)]),
      [
        ['e1', 2],
        ['e2', 3],
      ],
    );
  } finally {
    lock.release();
    stack.servers.nats.resume();
    await stream.end().catch(() => undefined);
    if (!nc.isClosed()) await nc.close();
  }
});
