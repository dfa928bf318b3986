// NATS restarted (SIGTERM, as an orchestrator does) under load: committed-event
// announcements and commit receipts sent around the restart can be lost. After a
// reconnect the broker looks in Postgres for what it may have missed: a live subscriber
// catches up to the head by itself, without waiting for a later event, and a PERSISTED
// request whose receipt was lost is answered from the store instead of timing out.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import type { Event } from '../src/client/ingest-client.js';
import { tokenEvent } from './helpers/events.js';
import { expectGapFree, randomName, startStack, threadRows } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

test('after NATS restarts, live subscribers reach the head and PERSISTED acks arrive, with no later event', async () => {
  await using stack = await startStack({ persistedAckTimeoutMs: 20_000 }, { own: true });
  const [t, p] = [randomName('t-'), randomName('p-')];
  const subs = await Promise.all([stack.ws(), stack.ws()]);
  for (const [k, s] of subs.entries()) s.subscribe(`s${k}`, k === 0 ? t : p);
  for (const [k, s] of subs.entries()) await s.waitFor((f) => f.type === 'live' && f.id === `s${k}`);

  let stop = false;
  let persistTimeouts = 0;
  const produce = async (thread: string, ack: 'ACCEPTED' | 'PERSISTED'): Promise<number> => {
    let i = 0;
    while (!stop) {
      const batch: Event[] = Array.from({ length: 5 }, (_, k) => tokenEvent(thread, i + k));
      for (;;) {
        try {
          await stack.client.publish(batch, ack, 25_000);
          break;
        } catch (err) {
          // Unavailable while NATS is down is expected, and retried; a lost receipt is not.
          if ((err as grpc.ServiceError).code === grpc.status.DEADLINE_EXCEEDED) persistTimeouts++;
          await new Promise((r) => setTimeout(r, 50));
        }
      }
      i += 5;
    }
    return i;
  };
  const producing = [produce(t, 'ACCEPTED'), produce(p, 'PERSISTED')];
  for (let round = 0; round < 2; round++) {
    await new Promise((r) => setTimeout(r, 1_500));
    await stack.servers.nats.restart(); // SIGTERM, then start on the same port and store
  }
  await new Promise((r) => setTimeout(r, 1_000));
  stop = true;
  const [nt, np] = await Promise.all(producing);

  const finals: [string, number][] = [
    [t, nt as number],
    [p, np as number],
  ];
  for (const [k, [thread, n]] of finals.entries()) {
    await waitFor(async () => (await threadRows(stack.db, thread)).length === n, {
      timeoutMs: 60_000,
      what: `${n} events of ${thread} stored`,
    });
    expectGapFree((await threadRows(stack.db, thread)).map((r) => r.seq));
    const sub = subs[k] as (typeof subs)[number];
    // Nothing is published any more: the subscriber must get to n on its own.
    await sub.waitFor((f) => f.type === 'event' && f.id === `s${k}` && f.event.seq === n, 30_000);
    assert.deepEqual(
      sub.events(`s${k}`).map((e) => e.seq),
      Array.from({ length: n }, (_, i) => i + 1),
      `subscriber ${k} got exactly 1..${n}`,
    );
  }
  assert.equal(persistTimeouts, 0, 'no PERSISTED request waited out its timeout');
});
