// PersistWaiter (src/ingest/persist-waiter.ts): requests waiting on a thread's commit
// receipts are matched by event_id from one listener per thread; each gets exactly its own
// events' receipts, a repeated event_id in flight twice resolves both, and a thread is
// released when its last request is done.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import type { Receipt } from '../src/domain/receipt.js';
import { PersistWaiter, type PersistWaiterOptions } from '../src/ingest/persist-waiter.js';
import { decodeReceipts, encodeReceipts } from '../src/log/announcements.js';
import { Subjects } from '../src/log/subjects.js';
import { ThreadFeeds } from '../src/log/thread-feed.js';
import { createLogger } from '../src/logger.js';
import { logRecord } from './helpers/records.js';
import { startServers } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

/** A request's log ack: stored at `offset`, not a duplicate. */
const noDup = (offset: number) => ({ seq: offset, duplicate: false });

interface WaiterContext {
  readonly nc: NatsConnection;
  readonly subjects: Subjects;
  readonly feeds: ThreadFeeds<Receipt[]>;
  readonly waiter: PersistWaiter;
}

/** Runs `body` with a waiter on receipt feeds of `prefix`, over a real nats-server and Postgres. */
async function withWaiter(
  prefix: string,
  timeoutMs: number,
  options: PersistWaiterOptions,
  body: (c: WaiterContext) => Promise<void>,
): Promise<void> {
  await using servers = await startServers();
  const nc = await connect({ servers: servers.nats.url });
  try {
    const subjects = new Subjects(prefix);
    const feeds = new ThreadFeeds(nc, (t) => subjects.receipts(t), decodeReceipts, createLogger('silent'));
    await body({ nc, subjects, feeds, waiter: new PersistWaiter(feeds, servers.db, timeoutMs, options) });
  } finally {
    await nc.close();
  }
}

test('receipts resolve exactly the requests waiting on their event_ids, and threads are released', async () => {
  await withWaiter('pw', 5_000, {}, async ({ nc, subjects, feeds, waiter }) => {
    const a = await waiter.prepare([
      logRecord('t1', 'r', 'a1'),
      logRecord('t1', 'r', 'a2'),
      logRecord('t2', 'r', 'b1'),
    ]);
    const retry = await waiter.prepare([logRecord('t1', 'r', 'a2')]); // the same event in flight twice
    const other = await waiter.prepare([logRecord('t1', 'r', 'c1')]);
    assert.equal(waiter.size, 2);

    const acksA = a.wait([noDup(7), noDup(7), noDup(8)]);
    const acksRetry = retry.wait([noDup(7)]);
    nc.publish(
      subjects.receipts('t1'),
      encodeReceipts([
        { event_id: 'a1', seq: 1, offset: 7 },
        { event_id: 'a2', seq: 2, offset: 7 },
      ]),
    );
    nc.publish(subjects.receipts('t2'), encodeReceipts([{ event_id: 'b1', seq: 1, offset: 8 }]));
    assert.deepEqual(
      (await acksA).map((x) => [x.event_id, x.seq, x.offset, x.duplicate]),
      [
        ['a1', 1, 7, false],
        ['a2', 2, 7, false],
        ['b1', 1, 8, false],
      ],
    );
    assert.deepEqual(
      (await acksRetry).map((x) => [x.event_id, x.seq]),
      [['a2', 2]],
    );
    a.dispose();
    retry.dispose();
    assert.equal(waiter.size, 1, 't2 released; t1 still has a request waiting');

    const acksOther = other.wait([noDup(9)]);
    nc.publish(subjects.receipts('t1'), encodeReceipts([{ event_id: 'c1', seq: 3, offset: 9 }]));
    assert.deepEqual(
      (await acksOther).map((x) => [x.event_id, x.seq]),
      [['c1', 3]],
    );
    other.dispose();
    assert.equal(waiter.size, 0);
    await waitFor(() => feeds.size === 0, { what: 'no subscription left once nothing waits' });
  });
});

test('a request whose receipts do not come in time fails with persist_timeout naming what is missing; the others are answered', async () => {
  await withWaiter('pwt', 300, {}, async ({ nc, subjects, waiter }) => {
    // Three requests wait on one limit-length queue: the first and the last never get receipts.
    const late = await waiter.prepare([logRecord('t1', 'r', 'x1'), logRecord('t1', 'r', 'x2')]);
    const answered = await waiter.prepare([logRecord('t1', 'r', 'y1')]);
    const later = await waiter.prepare([logRecord('t2', 'r', 'z1')]);
    const lateAcks = late.wait([noDup(1), noDup(1)]);
    const answeredAcks = answered.wait([noDup(2)]);
    const laterAcks = later.wait([noDup(3)]);
    lateAcks.catch(() => undefined);
    laterAcks.catch(() => undefined);
    nc.publish(
      subjects.receipts('t1'),
      encodeReceipts([
        { event_id: 'x1', seq: 1, offset: 1 },
        { event_id: 'y1', seq: 3, offset: 2 },
      ]),
    );
    assert.deepEqual(
      (await answeredAcks).map((x) => [x.event_id, x.seq]),
      [['y1', 3]],
    );
    await assert.rejects(lateAcks, (err: Error & { code?: string }) => {
      assert.match(
        err.message,
        /^1 of 2 events were accepted into the log but not yet committed after 300 ms/,
      );
      return true;
    });
    await assert.rejects(laterAcks, /1 of 1 events were accepted/);
    for (const p of [late, answered, later]) p.dispose();
    assert.equal(waiter.size, 0);
  });
});

test('a thread listened to lingers past its last request: the next is answered on the same subscription; it is let go after the linger', async () => {
  await withWaiter('pwl', 5_000, { lingerMs: 600 }, async ({ nc, subjects, feeds, waiter }) => {
    const answer = async (eventId: string, seq: number) => {
      const pending = await waiter.prepare([logRecord('t1', 'r', eventId)]);
      try {
        const acks = pending.wait([noDup(seq)]);
        nc.publish(subjects.receipts('t1'), encodeReceipts([{ event_id: eventId, seq, offset: seq }]));
        return (await acks).map((x) => [x.event_id, x.seq]);
      } finally {
        pending.dispose();
      }
    };
    assert.deepEqual(await answer('e1', 1), [['e1', 1]]);
    assert.equal(waiter.size, 0, 'nothing waits');
    assert.equal(feeds.size, 1, 'the thread is still listened to');
    assert.deepEqual(await answer('e2', 2), [['e2', 2]]);
    assert.equal(feeds.size, 1);
    await waitFor(() => feeds.size === 0, { what: 'the thread let go after its linger' });
    // Listened to anew, and answered.
    assert.deepEqual(await answer('e3', 3), [['e3', 3]]);
  });
});
