// Faults lose nothing that was acknowledged: Postgres or NATS killed and restarted under
// load; the broker pauses, resumes by itself, and subscribers still see no gap.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Event } from '../src/client/ingest-client.js';
import { tokenEvent } from './helpers/events.js';
import { expectGapFree, randomName, startStack, threadRows } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

/** Publishes events [from, to) in batches, retrying a failed batch with the same ids. */
async function publishAll(
  publish: (batch: Event[]) => Promise<unknown>,
  t: string,
  from: number,
  to: number,
  batchSize = 10,
): Promise<number> {
  let failures = 0;
  for (let i = from; i < to; i += batchSize) {
    const batch = Array.from({ length: Math.min(batchSize, to - i) }, (_, k) => tokenEvent(t, i + k));
    for (;;) {
      try {
        await publish(batch);
        break;
      } catch {
        failures++;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  }
  return failures;
}

test('Postgres killed and restarted: accepted events are stored once, in order, when it is back', async () => {
  // Small batches: the backlog outgrows the persister's queue, so reading the log pauses
  // for the whole outage (longer than the consumer's inactivity threshold) and resumes.
  await using stack = await startStack({ persistBatchMax: 10 }, { own: true });
  const t = randomName('t-');
  const sub = await stack.ws();
  sub.subscribe('s', t);
  await sub.waitFor((f) => f.type === 'live');

  await publishAll((b) => stack.client.publish(b, 'ACCEPTED'), t, 0, 100);
  await waitFor(async () => (await threadRows(stack.db, t)).length === 100, { what: 'first 100 stored' });

  await stack.servers.pg.kill();
  // The log still takes events while the database is down.
  await publishAll((b) => stack.client.publish(b, 'ACCEPTED', 5_000), t, 100, 200);
  const ready = await fetch(`${stack.httpUrl}/readyz`);
  assert.equal(ready.status, 503, 'not ready without Postgres');
  await new Promise((r) => setTimeout(r, 8_000));

  await stack.servers.pg.restart();
  await publishAll((b) => stack.client.publish(b, 'PERSISTED'), t, 200, 220);

  await waitFor(async () => (await threadRows(stack.db, t).catch(() => [])).length === 220, {
    timeoutMs: 60_000,
    what: '220 stored after the restart',
  });
  const rows = await threadRows(stack.db, t);
  assert.equal(expectGapFree(rows.map((r) => r.seq)), 220);
  assert.deepEqual(
    rows.map((r) => (r.content as { i: number }).i),
    Array.from({ length: 220 }, (_, i) => i),
  );
  await sub.waitFor((f) => f.type === 'event' && f.event.seq === 220, 30_000);
  assert.deepEqual(
    sub.events('s').map((e) => e.seq),
    Array.from({ length: 220 }, (_, i) => i + 1),
  );
});

test('NATS killed and restarted: every acknowledged event is stored once, subscribers see no gap', async () => {
  await using stack = await startStack({}, { own: true });
  const t = randomName('t-');
  const sub = await stack.ws();
  sub.subscribe('s', t);
  await sub.waitFor((f) => f.type === 'live');

  const acked = new Set<string>();
  const publish = async (b: Event[]) => {
    const acks = await stack.client.publish(b, 'ACCEPTED', 3_000);
    for (const a of acks) acked.add(a.event_id);
  };
  await publishAll(publish, t, 0, 100);

  await stack.servers.nats.kill();
  const during = publishAll(publish, t, 100, 200);
  await new Promise((r) => setTimeout(r, 1_000));
  await stack.servers.nats.restart();
  const failures = await during;
  await publishAll(publish, t, 200, 250);

  await waitFor(async () => (await threadRows(stack.db, t)).length === 250, {
    timeoutMs: 60_000,
    what: '250 stored after the NATS restart',
  });
  const rows = await threadRows(stack.db, t);
  assert.equal(expectGapFree(rows.map((r) => r.seq)), 250);
  assert.equal(acked.size, 250);
  assert.ok(failures >= 0);
  // One live event after the restart reveals any hole; the subscriber repairs it.
  await sub.waitFor((f) => f.type === 'event' && f.event.seq === 250, 30_000);
  assert.deepEqual(
    sub.events('s').map((e) => e.seq),
    Array.from({ length: 250 }, (_, i) => i + 1),
  );
});
