// `from_offset: K` while the persister is behind: no event at or after K is stored yet, so the
// subscription starts at the thread's head; the events stored after that from messages below K
// are passed over, not delivered, and it delivers from the first at or after K on. An event at
// or after K stored while the subscription reads its start is delivered all the same.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import pg from 'pg';
import { startBroker } from '../src/broker.js';
import { SubscriberClient } from '../src/client/subscriber-client.js';
import { createLogger } from '../src/logger.js';
import { tokenEvent } from './helpers/events.js';
import { brokerConfig, randomName, startStack, threadRows } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

test('from_offset K, with nothing at or after K stored yet, delivers no event from below K once the persister stores them', async () => {
  // Ingest and fan-out only: nothing is stored until a persister starts below.
  await using stack = await startStack({ roles: new Set(['ingest', 'fanout']) });
  const t = randomName('t-');
  const ev = (i: number) => tokenEvent(t, i);
  const offsets: number[] = [];
  for (let i = 1; i <= 4; i++) {
    const [ack] = await stack.client.publish([ev(i)], 'ACCEPTED');
    offsets.push(Number(ack?.offset));
  }
  const k = offsets[2] as number; // e3's
  const subscriber = new SubscriberClient(stack.grpcTarget);
  const s = subscriber.subscribe({ thread_id: t, from_offset: k });
  try {
    await s.waitFor((r) => r.live != null);
    const config = brokerConfig(stack.servers, {
      roles: new Set(['persister']),
      streamName: stack.config.streamName,
      subjectPrefix: stack.config.subjectPrefix,
    });
    await using persister = await startBroker(config, createLogger(config.logLevel));
    assert.ok(persister);
    await waitFor(async () => (await threadRows(stack.db, t)).length === 4, { what: 'e1-e4 stored' });
    await stack.client.publish([ev(5)], 'PERSISTED');
    await waitFor(() => s.events.some((e) => e.event_id === 'e5'), { what: 'e5 delivered' });
    assert.deepEqual(
      s.events.map((e) => [e.event_id, Number(e.offset) >= k]),
      [
        ['e3', true],
        ['e4', true],
        ['e5', true],
      ],
    );
  } finally {
    s.cancel();
    subscriber.close();
  }
});

test('from_offset K: an event at or after K stored while the subscription reads its start is delivered, not skipped', async () => {
  await using stack = await startStack();
  const t = randomName('t-');
  const ev = (i: number) => tokenEvent(t, i);
  let last = 0;
  for (let i = 1; i <= 3; i++) {
    const [ack] = await stack.client.publish([ev(i)], 'PERSISTED');
    last = Number(ack?.offset);
  }
  // K is the log's next offset: nothing at or after it is stored yet. The subscription reads
  // where K is and the thread's head; between the first of the two reads and the second, in
  // whichever order it makes them, e4 is stored (the pool's query is wrapped to hold the
  // second read for this thread until then).
  const k = last + 1;
  const query = pg.Pool.prototype.query;
  const startReads = new Set(['rs_seq_at_offset', 'rs_head']);
  let first: string | undefined;
  let stored: Promise<unknown> | undefined;
  pg.Pool.prototype.query = function (this: pg.Pool, ...args: unknown[]) {
    const q = args[0] as { name?: string; values?: unknown[] } | undefined;
    if (q?.values?.[0] === t && q.name && startReads.has(q.name) && !stored) {
      if (first === undefined) first = q.name;
      else if (q.name !== first) {
        stored = stack.client.publish([ev(4)], 'PERSISTED');
        return stored.then(() => Reflect.apply(query, this, args));
      }
    }
    return Reflect.apply(query, this, args);
  } as typeof query;
  const subscriber = new SubscriberClient(stack.grpcTarget);
  const s = subscriber.subscribe({ thread_id: t, from_offset: k });
  try {
    await s.waitFor((r) => r.live != null);
    assert.ok(stored, 'e4 was stored between the two reads');
    await stack.client.publish([ev(5)], 'PERSISTED');
    await waitFor(() => s.events.some((e) => e.event_id === 'e5'), { what: 'e5 delivered' });
    assert.deepEqual(
      s.events.map((e) => e.event_id),
      ['e4', 'e5'],
    );
  } finally {
    pg.Pool.prototype.query = query;
    s.cancel();
    subscriber.close();
  }
});
