// PersistWaiter (src/ingest/persist-waiter.ts): requests waiting on a thread's commit
// receipts are matched by event_id from one listener per thread; each gets exactly its own
// events' receipts, a repeated event_id in flight twice resolves both, and a thread is
// released when its last request is done.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import pg from 'pg';
import type { Receipt } from '../src/domain/receipt.js';
import { PersistWaiter, type PersistWaiterOptions } from '../src/ingest/persist-waiter.js';
import { decodeReceipts, encodeReceipts } from '../src/log/announcements.js';
import { Subjects } from '../src/log/subjects.js';
import { ThreadFeeds } from '../src/log/thread-feed.js';
import { createLogger } from '../src/logger.js';
import { migrate } from '../src/persist/migrate.js';
import { countStatements } from './helpers/postgres.js';
import { logRecord } from './helpers/records.js';
import { type Servers, startServers } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

/** A request's log ack: stored at `offset`, not a duplicate. */
const noDup = (offset: number) => ({ seq: offset, duplicate: false });
/** A request's log ack: JetStream dropped it as a duplicate of the message at `offset`. */
const dup = (offset: number) => ({ seq: offset, duplicate: true });

interface WaiterContext {
  readonly servers: Servers;
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
    await body({
      servers,
      nc,
      subjects,
      feeds,
      waiter: new PersistWaiter(feeds, servers.db, timeoutMs, options),
    });
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

test('a retry of events stored on thousands of threads is answered from Postgres in a few statements, not one per thread', async () => {
  await withWaiter('pwd', 30_000, {}, async ({ servers, waiter }) => {
    const db = servers.db;
    await migrate(db, createLogger('silent'));
    const threads = 2_500;
    // Stored: event e of thread d-i, seq i % 7 + 1, at offset 100 + i; and one refused by the store.
    await db.query(
      `INSERT INTO run_events (thread_id, seq, event_id, run_id, event_type, category, created_at, content,
                               metadata, stream_offset)
       SELECT 'd-' || i, i % 7 + 1, 'e', 'r', 'ai_chunk', 1, now(), '"x"', '{}', 100 + i
         FROM generate_series(0, $1::int - 1) AS i`,
      [threads],
    );
    await db.query(
      `INSERT INTO dead_letters (thread_id, event_id, run_id, event_type, category, user_id, created_at, content,
                                 metadata, stream_offset, error, sqlstate, notice_seq)
       VALUES ('dead', 'e', 'r', 'ai_chunk', 1, '', 'x', '"x"', '{}', 99, 'refused for the test', '22P02', 0)`,
    );
    const records = Array.from({ length: threads }, (_, i) => logRecord(`d-${i}`, 'r', 'e'));
    records.push(logRecord('dead', 'r', 'e'), logRecord('d-3', 'r', 'e')); // and a repeat
    const offsets = [...Array.from({ length: threads }, (_, i) => 100 + i), 99, 103];

    using statements = countStatements(); // the waiter's lookups: nothing else queries here now
    const pending = await waiter.prepare(records);
    try {
      const acks = await pending.wait(offsets.map(dup));
      assert.equal(acks.length, records.length);
      acks.slice(0, threads).forEach((a, i) => {
        assert.deepEqual(
          [a.event_id, a.seq, a.offset, a.duplicate, a.rejected],
          ['e', (i % 7) + 1, 100 + i, true, ''],
        );
      });
      assert.deepEqual(
        acks.slice(threads).map((a) => [a.seq, a.offset, a.rejected]),
        [
          [0, 99, 'refused for the test'],
          [4, 103, ''],
        ],
      );
      assert.ok(statements() <= 3, `${statements()} statements looked up ${threads + 1} threads`);
    } finally {
      pending.dispose();
    }
  });
});

test('the ack timeout counts from the start of the wait: lookups that cannot reach Postgres fail at the limit', async () => {
  await withWaiter('pwh', 300, {}, async ({ servers, feeds }) => {
    await migrate(servers.db, createLogger('silent'));
    // A pool whose one connection is taken: the lookup waits for it as long as it is held.
    const pool = new pg.Pool({ connectionString: servers.pg.url, max: 1 });
    const held = await pool.connect();
    try {
      const waiter = new PersistWaiter(feeds, pool, 300);
      const pending = await waiter.prepare([logRecord('h1', 'r', 'e1')]);
      try {
        const outcome = await Promise.race([
          pending.wait([dup(5)]).then(
            () => 'answered',
            (err: Error) => err.message,
          ),
          sleep(20_000, 'still waiting after 20 s', { ref: false }),
        ]);
        assert.match(
          String(outcome),
          /^1 of 1 events were accepted into the log but not yet committed after 300 ms/,
        );
      } finally {
        pending.dispose();
      }
      // Log acks still settling (deleted events published again, after a lookup of their
      // horizons that does not answer) are inside the limit too.
      const settling = await waiter.prepare([logRecord('h2', 'r', 'e1')]);
      try {
        // Not "they will be": the deleted ones may never be written again.
        await assert.rejects(
          settling.wait(new Promise(() => undefined)),
          /1 of 1 events were accepted into the log, but the check for deletions since .* did not finish in 300 ms, so some may not be stored\. Publish them again/,
        );
      } finally {
        settling.dispose();
      }
    } finally {
      held.release();
      await pool.end();
    }
  });
});
